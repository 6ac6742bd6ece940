"""Bad query options: the agent answers as nats-server does (the same status, content type
and text), never with a 500; unknown options are ignored; out-of-range pages are clamped."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_monitor_shapes import JSZ_EXTRA, JSZ_MISSING, VARZ_EXTRA, VARZ_MISSING

from support.monitorshape import differences, http_get
from support.servers import AGENT, NATS_SERVER, Server, free_port, running_server

# The allowances of test_monitor_shapes, for whichever endpoint is asked; and with no client
# connected, nats-server still lists subscriptions of its own (the agent has none).
MISSING_OK = VARZ_MISSING | JSZ_MISSING | {"subscriptions_list"}
EXTRA_OK = VARZ_EXTRA | JSZ_EXTRA


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    base: Path = tmp_path_factory.mktemp("options")
    with (
        running_server(AGENT, base / "agent", "-m", str(free_port())) as agent,
        running_server(NATS_SERVER, base / "ns", "-m", str(free_port())) as ns,
    ):
        yield {AGENT: agent, NATS_SERVER: ns}


def _get(server: Server, path: str) -> tuple[int, str, object]:
    assert server.process is not None
    return http_get(server.process.http_port, path)


REFUSED = [
    "/connz?sort=bogus",
    "/connz?sort=stop",
    "/connz?sort=reason&state=open",
    "/connz?limit=99999999999999999999",
    "/connz?limit=ten",
    "/connz?offset=abc",
    "/connz?offset=1.5",
    "/connz?cid=-1",
    "/connz?cid=abc",
    "/connz?subs=maybe",
    "/connz?auth=yes",
    "/connz?state=weird",
    "/jsz?accounts=maybe",
    "/jsz?limit=99999999999999999999",
    "/jsz?offset=x",
    "/subsz?test=foo.*",
    "/subsz?subs=detail",
    "/subsz?limit=9223372036854775808",
    "/accountz?acc=nobody",
    "/accstatz?unused=2",
    "/healthz?js-enabled-only=maybe",
    "/healthz?js-server-only=yes",
    "/healthz?stream=S",
    "/healthz?account=$G&consumer=C",
    "/connz?state=any&sort=reason&state=closed",  # the first value counts
    # Numbers of 5,000 digits: Go's strconv says they are out of range (the agent once
    # answered 503 with Python's own complaint about them).
    "/connz?limit=" + "9" * 5000,
    "/connz?offset=-" + "9" * 5000,
    "/connz?cid=" + "9" * 5000,
    "/jsz?limit=" + "9" * 5000,
    "/subsz?offset=" + "9" * 5000,
]


@pytest.mark.parametrize("path", REFUSED, ids=lambda path: path[:60])
def test_refused_as_nats_server_refuses(servers: dict[str, Server], path: str) -> None:
    agent, ns = _get(servers[AGENT], path), _get(servers[NATS_SERVER], path)
    assert ns[0] == 400, ns  # the request is one nats-server refuses
    assert agent == ns


ACCEPTED = [
    "/connz?limit=-5",
    "/connz?offset=-3",
    "/connz?offset=1000000&limit=1",
    "/connz?limit=9223372036854775807",
    "/connz?bogus=1",
    "/connz?sort=cid&subs=1&auth=0",
    "/connz?sort=stop&state=closed",
    "/connz?state=closed&sort=reason&state=open",  # the first value counts
    "/jsz?limit=-1&offset=-1",
    "/jsz?acc=nobody",
    "/jsz?offset=1000&accounts=true",
    "/subsz?subs=1&limit=1&offset=-1",
    "/subsz?subs=true&offset=99999",
    "/varz?x=1",
    "/accstatz?accounts=nobody",
    "/healthz?details=true",
    "/routez?subs=1",
    "/connz?acc=nobody",
    "/connz?acc=$G",
    "/subsz?acc=nobody&subs=1",
    "/connz?limit=" + "0" * 5000 + "7",  # leading zeros: any number of them
]


@pytest.mark.parametrize("path", ACCEPTED, ids=lambda path: path[:60])
def test_accepted_as_nats_server_accepts(servers: dict[str, Server], path: str) -> None:
    agent, ns = _get(servers[AGENT], path), _get(servers[NATS_SERVER], path)
    assert ns[0] == 200
    assert agent[:2] == ns[:2]
    assert isinstance(agent[2], dict) and isinstance(ns[2], dict)
    assert differences(agent[2], ns[2], missing_ok=MISSING_OK, extra_ok=EXTRA_OK) == []
    # Paging is clamped the same way (no clients are connected to either server; nats-server
    # has subscriptions of its own, so subsz totals differ).
    fields = {
        "/connz": ("offset", "limit", "num_connections", "total"),
        "/subsz": ("offset", "limit"),
    }
    for field in fields.get(path.split("?")[0], ()):
        assert agent[2][field] == ns[2][field], field


async def test_no_500_for_any_option_value(servers: dict[str, Server]) -> None:
    agent = servers[AGENT]
    odd = ["", "-1", "0", "99999999999999999999999", "true", "%00", "%ff", "a%20b", "d%C3%A9tail"]
    odd += ["9" * 5000, "-" + "1" * 5000]
    paths = ["/varz", "/jsz", "/connz", "/subsz", "/accountz", "/accstatz", "/healthz"]
    names = ["limit", "offset", "sort", "subs", "auth", "state", "cid", "acc", "test", "stream"]
    for path in paths:
        for name in names:
            for value in odd:
                status, _, _ = await asyncio.to_thread(_get, agent, f"{path}?{name}={value}")
                assert status < 500, (path, name, value)
