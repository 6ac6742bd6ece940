"""An agent and nats-server side by side: the same raw request to both, the answers compared.

    with running_side_by_side(tmp_path) as servers:
        async with connected_side_by_side(servers) as both:
            agent, nats_server = await both.request("STREAM.INFO.S", b'{"offset":null}')
            assert comparable(agent) == comparable(nats_server)

Where `server` (tests/support/servers.py) runs a test once against each server with expected
answers written in the test, this runs one test against both at once and takes nats-server's
answer as the expected one: a battery of hundreds of requests needs no answer written down.
`comparable` blanks the values that must differ between two servers, and only those
(`VARYING`): times of creation and activity, the server's identity and version.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client

from support.servers import AGENT, NATS_SERVER, Server, running_server

API = "$JS.API."

# The keys whose values two servers cannot share, at any depth of an answer: when a stream,
# consumer or message was made or last touched (each server's own clock), how long a pause has
# left (the clock again), the server's own name, identity, version and cluster, and the API
# level it serves (`_nats.level`, account info's api `level`): InfiniStream claims only the
# level whose features it serves.
VARYING: frozenset[str] = frozenset(
    {
        "created",
        "ts",
        "time",
        "first_ts",
        "last_ts",
        "last_active",
        "pause_remaining",
        "server_id",
        "server_name",
        "cluster",
        "leader",
        "leader_since",
        "_nats.ver",
        "_nats.level",
        "level",
        "Nats-Time-Stamp",
    }
)
BLANK = "<varies>"


def comparable(answer: Any, varying: frozenset[str] = VARYING) -> Any:
    """`answer` with the value of every `varying` key blanked, at any depth."""
    if isinstance(answer, dict):
        return {
            key: BLANK if key in varying else comparable(value, varying)
            for key, value in answer.items()
        }
    if isinstance(answer, list):
        return [comparable(value, varying) for value in answer]
    return answer


@dataclass
class SideBySide:
    agent: Server
    nats_server: Server
    agent_nc: Client
    nats_server_nc: Client

    @property
    def clients(self) -> tuple[Client, Client]:
        return self.agent_nc, self.nats_server_nc

    async def each(self, step: Callable[[Client], Awaitable[Any]]) -> tuple[Any, Any]:
        """`step` with the agent's client, then with nats-server's: both results."""
        return await step(self.agent_nc), await step(self.nats_server_nc)

    async def request(self, subject: str, body: bytes = b"") -> tuple[Any, Any]:
        """The JSON answers of the agent and of nats-server to `$JS.API.<subject>` with the raw
        `body`."""

        async def ask(nc: Client) -> Any:
            msg = await nc.request(API + subject, body, timeout=10)
            return json.loads(msg.data)

        return await self.each(ask)


@contextlib.contextmanager
def running_side_by_side(root: Path) -> Iterator[tuple[Server, Server]]:
    """An agent and nats-server, each on a store of its own under `root`."""
    with (
        running_server(AGENT, root / AGENT) as agent,
        running_server(NATS_SERVER, root / NATS_SERVER) as nats_server,
    ):
        yield agent, nats_server


@contextlib.asynccontextmanager
async def connected_side_by_side(servers: tuple[Server, Server]) -> AsyncIterator[SideBySide]:
    """A client on each of `servers` (an agent, then nats-server)."""
    agent, nats_server = servers
    agent_nc = await nats.connect(agent.url)
    nats_server_nc = await nats.connect(nats_server.url)
    try:
        yield SideBySide(agent, nats_server, agent_nc, nats_server_nc)
    finally:
        await agent_nc.close()
        await nats_server_nc.close()


def differences(agent: Any, nats_server: Any, path: str = "$") -> list[str]:
    """Where `agent` differs from `nats_server` after `comparable`: one line per key path,
    with both values (an empty list where they agree)."""
    return _differences(comparable(agent), comparable(nats_server), path)


def _differences(agent: Any, nats_server: Any, path: str) -> list[str]:
    if isinstance(agent, dict) and isinstance(nats_server, dict):
        found: list[str] = []
        for key in sorted(set(agent) | set(nats_server)):
            if key not in agent:
                found.append(f"{path}.{key}: missing, nats-server {nats_server[key]!r}")
            elif key not in nats_server:
                found.append(f"{path}.{key}: {agent[key]!r}, nats-server has none")
            else:
                found += _differences(agent[key], nats_server[key], f"{path}.{key}")
        return found
    if isinstance(agent, list) and isinstance(nats_server, list) and len(agent) == len(nats_server):
        return [
            line
            for index, (mine, theirs) in enumerate(zip(agent, nats_server, strict=True))
            for line in _differences(mine, theirs, f"{path}[{index}]")
        ]
    if agent != nats_server:
        return [f"{path}: {agent!r}, nats-server {nats_server!r}"]
    return []


def assert_same(agent: Any, nats_server: Any) -> None:
    """Fails naming every difference between the agent's answer and nats-server's."""
    found = differences(agent, nats_server)
    assert not found, "the agent answers otherwise than nats-server:\n" + "\n".join(found)
