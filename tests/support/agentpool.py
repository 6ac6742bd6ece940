"""Several agents on one store, as a pool runs them, for end-to-end tests.

    with running_agents(store_dir) as (a, b):                   # metadata in SQLite in store_dir
    with running_agents(tmp_path, metadata=etcd.url, count=3) as agents:
    with running_agents(store_dir, "-m", "-1", each=[("--zone", "z1"), ("--zone", "z2")]) as ...:
    async with connected(a, b, allow_reconnect=False) as (nc_a, nc_b):

Agents of one pool share their metadata and their objects, nothing else. With SQLite (the
default) every agent runs on the one store directory; with etcd (`metadata`) each has a
directory of its own under `root` and all share the objects in `root/objects`, as agents on
different hosts share etcd and a bucket. `extra` and `env` are given to every agent, `each`
holds one agent's own flags per agent (then there are as many agents as entries).

Every agent listens on a port chosen before it starts and keeps it across `restart`, so that
a client given every agent's URL (as a client is given a cluster's) reconnects to it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client

from support.agentproc import AgentProcess
from support.servers import free_port

# Short enough to keep publishes quick, long enough that publishes still share an object:
# batching behaves as with the default.
LINGER = "10ms"
# Ports tried for an agent before giving up (`start_on_a_free_port`).
PORT_ATTEMPTS = 3


def pool_args(root: Path, index: int, metadata: str | None) -> list[str]:
    """The store flags of agent `index` of a pool on `root`."""
    if metadata is None:
        return ["-sd", str(root)]
    objects = (root / "objects").resolve().as_uri()
    return ["-sd", str(root / f"agent-{index}"), "--objects", objects, "--metadata", metadata]


@contextlib.contextmanager
def running_agents(
    root: Path,
    *extra: str,
    count: int = 2,
    linger: str = LINGER,
    metadata: str | None = None,
    env: dict[str, str] | None = None,
    each: Sequence[Sequence[str]] | None = None,
) -> Iterator[list[AgentProcess]]:
    """`count` agents on one store, started in order; every one is killed (kill -9) after."""
    own = list(each) if each is not None else [()] * count
    agents: list[AgentProcess] = []
    try:
        for index, flags in enumerate(own):
            args = [*pool_args(root, index, metadata), "--linger", linger, *extra, *flags]
            agents.append(start_on_a_free_port(args, env))
        yield agents
    finally:
        for agent in agents:
            agent.kill()


def start_on_a_free_port(args: list[str], env: dict[str, str] | None) -> AgentProcess:
    """An agent started with `args` on a port chosen now (`-p PORT`, kept across restarts).
    The port may be taken before the agent binds it (an outgoing connection's source port
    comes from the same range): then the agent is started again, on another."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        agent = AgentProcess(["-p", str(free_port()), *args], env=env)
        try:
            return agent.start()
        except RuntimeError:
            if attempt == PORT_ATTEMPTS or "address already in use" not in agent.log():
                raise
    raise AssertionError("unreachable")


@contextlib.asynccontextmanager
async def connected(*agents: AgentProcess, **options: Any) -> AsyncIterator[list[Client]]:
    """A nats-py client on each agent (`options` go to `nats.connect`), closed after."""
    clients: list[Client] = []
    try:
        for agent in agents:
            clients.append(await nats.connect(agent.url, **options))
        yield clients
    finally:
        for nc in clients:
            # A client whose agent a test killed may be closed already, or fail to close.
            with contextlib.suppress(Exception):
                await nc.close()
