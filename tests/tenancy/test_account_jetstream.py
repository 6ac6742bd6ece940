"""Each account's JetStream as its config says: limits refused with nats-server's errors and
err_codes, account info with the account's own limits, and the accounts without JetStream (by
`jetstream: disabled`, by saying nothing, or the system account) answered as nats-server
answers them. Run against an agent and nats-server with one config file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.errors import NoRespondersError
from nats.js.errors import APIError

from support.servers import KINDS, Server, running_server

CONFIG = """
accounts {
  L: { users: [ {user: l, password: l} ],
       jetstream: { max_streams: 1, max_consumers: 1, max_mem: 1M, max_file: 10M,
                    max_ack_pending: 5 } }
  M: { users: [ {user: m, password: m} ], jetstream: { max_mem: 1M, max_file: 10M } }
  R: { users: [ {user: r, password: r} ], jetstream: { max_bytes_required: true } }
  Q: { users: [ {user: q, password: q} ], jetstream: { max_file: 2000 } }
  D: { users: [ {user: d, password: d} ], jetstream: disabled }
  C: { users: [ {user: c, password: c} ] }
  SYS: { users: [ {user: s, password: s} ] }
}
system_account: SYS
"""


@pytest.fixture(scope="module", params=KINDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp(request.param)
    conf = tmp / "accounts.conf"
    conf.write_text(CONFIG)
    with running_server(request.param, tmp / "store", "-c", str(conf)) as srv:
        yield srv


async def api(server: Server, user: str, subject: str, body: Any = None) -> dict[str, Any]:
    nc = await nats.connect(server.url, user=user, password=user)
    try:
        data = b"" if body is None else json.dumps(body).encode()
        msg = await nc.request(subject, data, timeout=10)
        answer: dict[str, Any] = json.loads(msg.data)
        return answer
    finally:
        await nc.close()


def stream(name: str, **config: Any) -> dict[str, Any]:
    return {"name": name, "subjects": [name.lower() + ".>"], **config}


def error_of(answer: dict[str, Any]) -> tuple[str, int, int, str]:
    e = answer["error"]
    return answer["type"].rsplit(".", 1)[1], e["code"], e["err_code"], e["description"]


async def test_stream_and_consumer_limits_are_refused_with_nats_servers_errors(
    server: Server,
) -> None:
    async def create(name: str, **config: Any) -> dict[str, Any]:
        return await api(server, "l", f"$JS.API.STREAM.CREATE.{name}", stream(name, **config))

    assert error_of(await create("S1", storage="memory", max_bytes=2_000_000)) == (
        "stream_create_response",
        500,
        10028,
        "insufficient memory resources available",
    )
    assert error_of(await create("S1", max_bytes=20_000_000)) == (
        "stream_create_response",
        500,
        10047,
        "insufficient storage resources available",
    )
    assert "error" not in await create("S1")
    # The same create again is no new stream; another one is one too many.
    assert "error" not in await create("S1")
    assert error_of(await create("S2")) == (
        "stream_create_response",
        400,
        10027,
        "maximum number of streams reached",
    )

    def consumer(name: str, **config: Any) -> dict[str, Any]:
        return {
            "stream_name": "S1",
            "config": {"durable_name": name, "ack_policy": "explicit", **config},
        }

    too_many_pending = await api(
        server, "l", "$JS.API.CONSUMER.CREATE.S1.C1", consumer("C1", max_ack_pending=10)
    )
    assert error_of(too_many_pending) == (
        "consumer_create_response",
        400,
        10121,
        "consumer max ack pending exceeds system limit of 5",
    )
    created = await api(server, "l", "$JS.API.CONSUMER.CREATE.S1.C1", consumer("C1"))
    # The account's limit lowers the default of 1000.
    assert created["config"]["max_ack_pending"] == 5
    assert error_of(await api(server, "l", "$JS.API.CONSUMER.CREATE.S1.C2", consumer("C2"))) == (
        "consumer_create_response",
        400,
        10026,
        "maximum consumers limit reached",
    )

    info = await api(server, "l", "$JS.API.INFO")
    assert (info["streams"], info["consumers"]) == (1, 1)
    assert info["limits"] == {
        "max_memory": 1_000_000,
        "max_storage": 10_000_000,
        "max_streams": 1,
        "max_consumers": 1,
        "max_ack_pending": 5,
        "memory_max_stream_bytes": -1,
        "storage_max_stream_bytes": -1,
        "max_bytes_required": False,
    }


async def test_reservations_add_up_and_updates_are_held_to_them(server: Server) -> None:
    async def call(op: str, name: str, **config: Any) -> dict[str, Any]:
        return await api(server, "m", f"$JS.API.STREAM.{op}.{name}", stream(name, **config))

    assert "error" not in await call("CREATE", "F1", max_bytes=6_000_000)
    assert error_of(await call("CREATE", "F2", max_bytes=6_000_000)) == (
        "stream_create_response",
        500,
        10047,
        "insufficient storage resources available",
    )
    assert "error" not in await call("CREATE", "F2", max_bytes=3_000_000)
    # A stream without max_bytes reserves nothing, but needs room for a byte.
    assert "error" not in await call("CREATE", "F3")
    assert error_of(await call("UPDATE", "F1", max_bytes=7_000_001)) == (
        "stream_update_response",
        500,
        10047,
        "insufficient storage resources available",
    )
    assert "error" not in await call("UPDATE", "F1", max_bytes=5_000_000)
    assert error_of(await call("CREATE", "F4", max_bytes=2_000_001)) == (
        "stream_create_response",
        500,
        10047,
        "insufficient storage resources available",
    )
    info = await api(server, "m", "$JS.API.INFO")
    assert (info["streams"], info["reserved_storage"]) == (3, 8_000_000)


async def test_an_account_that_requires_max_bytes_refuses_streams_without(server: Server) -> None:
    subject = "$JS.API.STREAM.CREATE.NOBYTES"
    assert error_of(await api(server, "r", subject, stream("NOBYTES"))) == (
        "stream_create_response",
        400,
        10113,
        "account requires a stream config to have max bytes set",
    )
    assert "error" not in await api(server, "r", subject, stream("NOBYTES", max_bytes=1000))
    info = await api(server, "r", "$JS.API.INFO")
    assert info["limits"]["max_bytes_required"] is True


async def test_a_publish_past_the_accounts_storage_is_refused(server: Server) -> None:
    nc = await nats.connect(server.url, user="q", password="q")
    try:
        js = nc.jetstream()
        await js.add_stream(name="FULL", subjects=["full"])
        for _ in range(2):
            await js.publish("full", b"x" * 900)
        with pytest.raises(APIError) as refused:
            await js.publish("full", b"x" * 900)
        assert (refused.value.code, refused.value.err_code) == (400, 10002)
        assert refused.value.description == "resource limits exceeded for account"
        assert (await js.stream_info("FULL")).state.messages == 2
    finally:
        await nc.close()


@pytest.mark.parametrize("user", ["d", "c"], ids=["disabled", "not-enabled"])
async def test_accounts_without_jetstream_are_answered_as_nats_server_answers(
    server: Server, user: str
) -> None:
    not_enabled = (503, 10039, "JetStream not enabled for account")
    for subject, body, kind in (
        ("$JS.API.INFO", None, "account_info_response"),
        ("$JS.API.STREAM.CREATE.X", stream("X"), "stream_create_response"),
        ("$JS.API.STREAM.NAMES", None, "stream_names_response"),
        ("$JS.API.STREAM.MSG.GET.X", {"seq": 1}, "stream_msg_get_response"),
        ("$JS.API.CONSUMER.INFO.X.C", None, "consumer_info_response"),
    ):
        assert error_of(await api(server, user, subject, body)) == (kind, *not_enabled)
    nc = await nats.connect(server.url, user=user, password=user)
    try:
        for subject in ("$JS.API.CONSUMER.MSG.NEXT.X.C", "$JS.API.DIRECT.GET.X", "x.y"):
            with pytest.raises(NoRespondersError):
                await nc.request(subject, b"{}", timeout=5)
    finally:
        await nc.close()


async def test_the_system_account_answers_every_api_request_with_the_503(server: Server) -> None:
    not_enabled = (503, 10039, "JetStream not enabled for account")
    assert error_of(await api(server, "s", "$JS.API.INFO")) == (
        "account_info_response",
        *not_enabled,
    )
    for subject in (
        "$JS.API.STREAM.CREATE.X",
        "$JS.API.CONSUMER.MSG.NEXT.X.C",
        "$JS.API.DIRECT.GET.X",
        "$JS.API.NOT.AN.API",
    ):
        assert error_of(await api(server, "s", subject, {})) == ("system_response", *not_enabled)


GLOBAL_ONLY = """
accounts { SYS: { users: [ {user: s, password: s} ] } }
authorization { users: [ {user: g, password: g} ] }
system_account: SYS
"""


@pytest.mark.parametrize("kind", KINDS)
async def test_with_only_the_system_account_configured_the_global_account_has_jetstream(
    kind: str, tmp_path: Path
) -> None:
    conf = tmp_path / "global.conf"
    conf.write_text(GLOBAL_ONLY)
    with running_server(kind, tmp_path / "store", "-c", str(conf)) as server:
        info = await api(server, "g", "$JS.API.INFO")
        assert "error" not in info and info["streams"] == 0
        assert error_of(await api(server, "s", "$JS.API.INFO"))[2] == 10039
