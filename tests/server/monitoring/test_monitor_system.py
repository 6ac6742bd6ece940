"""The monitoring data over the system account's request subjects, in nats-server's envelope:
`$SYS.REQ.SERVER.PING.<NAME>` and `$SYS.REQ.SERVER.<server id>.<NAME>`, the same requests
to an agent and to nats-server (as its system account user) compared shape by shape.

Both run one config file with a system account and an application account: a user of the
system account asks; a user of another account finds no responders, on both.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.errors import NoRespondersError, TimeoutError
from test_monitor_shapes import CONNZ_MISSING, JSZ_EXTRA, JSZ_MISSING, VARZ_EXTRA, VARZ_MISSING

from support.monitorshape import differences
from support.servers import AGENT, NATS_SERVER, Server, running_server
from support.written import written

SYS_CONF = """
system_account: SYS
accounts {
  SYS { users [ { user: sys, password: sys } ] }
  APP { jetstream: enabled, users [ { user: app, password: app } ] }
}
"""


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    base: Path = tmp_path_factory.mktemp("system")
    conf = base / "sys.conf"
    conf.write_text(SYS_CONF)
    with (
        running_server(AGENT, base / "agent", "-c", str(conf)) as agent,
        running_server(NATS_SERVER, base / "ns", "-c", str(conf)) as ns,
    ):
        yield {AGENT: agent, NATS_SERVER: ns}


@pytest.fixture
async def system(servers: dict[str, Server]) -> AsyncIterator[dict[str, Client]]:
    out = {
        kind: await nats.connect(server.url, user="sys", password="sys")
        for kind, server in servers.items()
    }
    # A client of the application account on each, for CONNZ to show.
    apps = [
        await nats.connect(server.url, user="app", password="app", name="app")
        for server in servers.values()
    ]
    for app in apps:
        await app.subscribe("orders.*")
        await written(app)
    yield out
    for nc in [*out.values(), *apps]:
        await nc.close()


async def _ask(nc: Client, subject: str, body: dict[str, Any] | None = None) -> Any:
    payload = json.dumps(body).encode() if body is not None else b""
    msg = await nc.request(subject, payload, timeout=5)
    return json.loads(msg.data)


# name, the data's allowed differences (nats-server's fields the agent leaves out, its own)
ENDPOINTS = [
    ("VARZ", VARZ_MISSING, VARZ_EXTRA),
    ("JSZ", JSZ_MISSING, JSZ_EXTRA),
    ("CONNZ", CONNZ_MISSING, frozenset()),
    ("SUBSZ", frozenset(), frozenset()),
    ("ROUTEZ", frozenset(), frozenset()),
    ("GATEWAYZ", frozenset(), frozenset()),
    ("LEAFZ", frozenset(), frozenset()),
    ("HEALTHZ", frozenset(), frozenset()),
]
# ServerInfo fields of a server in a cluster, with tags or feature flags; none here.
SERVER_MISSING = frozenset({"server.feature_flags", "server.cluster", "server.domain"})


def _prefixed(paths: frozenset[str]) -> frozenset[str]:
    return frozenset(f"data.{p}" for p in paths) | SERVER_MISSING


@pytest.mark.parametrize(
    ("name", "missing_ok", "extra_ok"), ENDPOINTS, ids=[e[0] for e in ENDPOINTS]
)
async def test_ping_answers_in_nats_server_envelope(
    system: dict[str, Client], name: str, missing_ok: frozenset[str], extra_ok: frozenset[str]
) -> None:
    agent = await _ask(system[AGENT], f"$SYS.REQ.SERVER.PING.{name}")
    ns = await _ask(system[NATS_SERVER], f"$SYS.REQ.SERVER.PING.{name}")
    assert set(ns) == {"server", "data"}
    diff = differences(agent, ns, missing_ok=_prefixed(missing_ok), extra_ok=_prefixed(extra_ok))
    assert diff == []


async def test_direct_request_names_the_server(system: dict[str, Client]) -> None:
    for nc in system.values():
        server_id = nc._server_info["server_id"]
        answer = await _ask(nc, f"$SYS.REQ.SERVER.{server_id}.VARZ")
        assert answer["server"]["id"] == server_id
        assert answer["data"]["server_id"] == server_id


async def test_statsz_and_idz(system: dict[str, Client]) -> None:
    agent = await _ask(system[AGENT], "$SYS.REQ.SERVER.PING")
    ns = await _ask(system[NATS_SERVER], "$SYS.REQ.SERVER.PING")
    assert set(agent) == set(ns) == {"server", "statsz"}
    for key in ("start", "mem", "cores", "cpu", "connections", "subscriptions", "sent"):
        assert key in agent["statsz"], key
    agent_idz = await _ask(system[AGENT], "$SYS.REQ.SERVER.PING.IDZ")
    ns_idz = await _ask(system[NATS_SERVER], "$SYS.REQ.SERVER.PING.IDZ")
    assert set(agent_idz) == set(ns_idz) == {"name", "host", "id"}


async def test_options_in_the_body(system: dict[str, Client]) -> None:
    for nc in system.values():
        answer = await _ask(nc, "$SYS.REQ.SERVER.PING.CONNZ", {"subscriptions": True, "limit": 1})
        assert answer["data"]["limit"] == 1
        answer = await _ask(nc, "$SYS.REQ.SERVER.PING.JSZ", {"accounts": True})
        assert "account_details" in answer["data"] or answer["data"]["total"] >= 0


async def test_refused_options_answer_as_nats_server(system: dict[str, Client]) -> None:
    agent = await _ask(system[AGENT], "$SYS.REQ.SERVER.PING.CONNZ", {"sort": "bogus"})
    ns = await _ask(system[NATS_SERVER], "$SYS.REQ.SERVER.PING.CONNZ", {"sort": "bogus"})
    assert set(agent) == set(ns) == {"server", "data", "error"}
    assert agent["data"] is ns["data"] is None
    assert (
        agent["error"]
        == ns["error"]
        == {"code": 500, "description": "invalid sorting option: bogus"}
    )
    agent = await _ask(system[AGENT], "$SYS.REQ.SERVER.PING.CONNZ", {"limit": "x"})
    ns = await _ask(system[NATS_SERVER], "$SYS.REQ.SERVER.PING.CONNZ", {"limit": "x"})
    assert agent["error"]["code"] == ns["error"]["code"] == 400
    assert "data" not in agent and "data" not in ns
    agent = await _ask(system[AGENT], "$SYS.REQ.SERVER.PING.SUBSZ", {"test": "a.*"})
    ns = await _ask(system[NATS_SERVER], "$SYS.REQ.SERVER.PING.SUBSZ", {"test": "a.*"})
    assert agent["error"] == ns["error"]
    for nc in system.values():
        msg = await nc.request("$SYS.REQ.SERVER.PING.VARZ", b"not json", timeout=5)
        assert json.loads(msg.data)["error"]["code"] == 400


async def test_a_server_filter_that_leaves_the_server_out_gets_no_answer(
    system: dict[str, Client],
) -> None:
    for nc in system.values():
        with pytest.raises(TimeoutError):
            await nc.request(
                "$SYS.REQ.SERVER.PING.VARZ", b'{"server_name":"no-such-server"}', timeout=0.5
            )


async def test_connz_names_accounts_and_users(system: dict[str, Client]) -> None:
    answers = []
    for nc in system.values():
        answer = await _ask(nc, "$SYS.REQ.SERVER.PING.CONNZ", {"auth": True, "acc": "APP"})
        (app,) = answer["data"]["connections"]
        assert (app["account"], app["authorized_user"], app["name"]) == ("APP", "app", "app")
        answers.append(answer)
    diff = differences(*answers, missing_ok=_prefixed(CONNZ_MISSING))
    assert diff == []


async def test_accountz_lists_the_configured_accounts(system: dict[str, Client]) -> None:
    for nc in system.values():
        data = (await _ask(nc, "$SYS.REQ.SERVER.PING.ACCOUNTZ"))["data"]
        assert data["system_account"] == "SYS"
        assert {"SYS", "APP", "$G"} <= set(data["accounts"])
        detail = (await _ask(nc, "$SYS.REQ.SERVER.PING.ACCOUNTZ", {"account": "APP"}))["data"]
        assert detail["account_detail"]["client_connections"] == 1
        assert detail["account_detail"]["jetstream_enabled"] is True


async def test_other_accounts_find_no_responders(servers: dict[str, Server]) -> None:
    for server in servers.values():
        nc = await nats.connect(server.url, user="app", password="app")
        try:
            with pytest.raises(NoRespondersError):
                await nc.request("$SYS.REQ.SERVER.PING.VARZ", b"", timeout=5)
        finally:
            await nc.close()


async def test_another_servers_id_finds_no_responders(system: dict[str, Client]) -> None:
    for nc in system.values():
        with pytest.raises(NoRespondersError):
            await nc.request("$SYS.REQ.SERVER.NOTASERVER.VARZ", b"", timeout=5)


async def test_other_accounts_ask_about_themselves(servers: dict[str, Server]) -> None:
    """nats-server imports these into every account: its own connections, statistics, user."""
    for kind, server in servers.items():
        nc = await nats.connect(server.url, user="app", password="app", name="me")
        try:
            for subject in ("$SYS.REQ.SERVER.PING.CONNZ", "$SYS.REQ.ACCOUNT.PING.CONNZ"):
                data = (await _ask(nc, subject, {"acc": "SYS", "auth": True}))["data"]
                accounts = {c["account"] for c in data["connections"]}
                assert accounts == {"APP"}, (kind, subject)
                assert "me" in {c.get("name") for c in data["connections"]}
            statz = (await _ask(nc, "$SYS.REQ.ACCOUNT.PING.STATZ"))["data"]["account_statz"]
            assert [s["acc"] for s in statz] == ["APP"], kind
            user = await _ask(nc, "$SYS.REQ.USER.INFO")
            assert user["data"] == {"user": "app", "account": "APP", "account_name": "APP"}
        finally:
            await nc.close()


async def test_connz_filter_subject(system: dict[str, Client]) -> None:
    for nc in system.values():
        refused = await _ask(nc, "$SYS.REQ.SERVER.PING.CONNZ", {"filter_subject": "orders.x"})
        assert refused["error"] == {
            "code": 500,
            "description": "filter by subject only valid with account filtering",
        }
        body = {"filter_subject": "orders.x", "acc": "APP"}
        (app,) = (await _ask(nc, "$SYS.REQ.SERVER.PING.CONNZ", body))["data"]["connections"]
        assert app["name"] == "app"
        body = {"filter_subject": "nothing.here", "acc": "APP"}
        none = (await _ask(nc, "$SYS.REQ.SERVER.PING.CONNZ", body))["data"]["connections"]
        assert not none
