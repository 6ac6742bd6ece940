"""The client protocol as a real agent speaks it, byte for byte, over a raw TCP socket.

Expected bytes were checked against the nats-server binary (v2.15): error texts, which
violations close the connection, and which are answered with -ERR first.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from support.agentproc import AgentProcess, running_agent
from support.rawnats import (
    CONNECT_HEADERS,
    CONNECT_PLAIN,
    RawClient,
    api_request,
    hpub,
    parse_msgs,
    pub,
)

MAX_PAYLOAD = 1024


def _conf(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    tmp = tmp_path_factory.mktemp("conn")
    conf = _conf(tmp / "agent.conf", f"max_payload: {MAX_PAYLOAD}\n")
    with running_agent(tmp / "store", "-c", conf, "--linger", "10ms") as proc:
        yield proc


@pytest.fixture(scope="module")
def userpass_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    tmp = tmp_path_factory.mktemp("userpass")
    with running_agent(tmp / "store", "--user", "alice", "--pass", "s3cret") as proc:
        yield proc


@pytest.fixture(scope="module")
def token_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    tmp = tmp_path_factory.mktemp("token")
    conf = _conf(tmp / "token.conf", 'authorization { token: t0ken, timeout: "500ms" }\n')
    with running_agent(tmp / "store", "-c", conf) as proc:
        yield proc


@pytest.fixture(scope="module")
def pinging_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    tmp = tmp_path_factory.mktemp("ping")
    conf = _conf(tmp / "ping.conf", 'ping_interval: "200ms"\nping_max: 2\n')
    with running_agent(tmp / "store", "-c", conf) as proc:
        yield proc


@pytest.fixture
async def raw(agent: AgentProcess) -> AsyncIterator[RawClient]:
    client = await RawClient.open(agent.port)
    yield client
    await client.close()


async def _connected(port: int, connect: bytes = CONNECT_PLAIN) -> RawClient:
    client = await RawClient.open(port)
    client.send(connect)
    assert await client.ping() == b""
    return client


async def _api(client: RawClient, subject: str, body: dict[str, object] | None) -> dict:
    """One JetStream API request on an already subscribed `_INBOX.t.*` (sid 99)."""
    client.send(api_request(subject, body, "_INBOX.t.api"))
    frame = await client.read_until(b"}\r\n")
    [(_, _, _, payload)] = parse_msgs(frame)
    return json.loads(payload)


async def _api_client(port: int) -> RawClient:
    client = await _connected(port)
    client.send(b"SUB _INBOX.t.* 99\r\n")
    return client


# -- INFO and CONNECT ---------------------------------------------------------------------


async def test_info_has_the_fields_clients_rely_on(raw: RawClient, agent: AgentProcess) -> None:
    info = raw.info
    assert isinstance(info["server_id"], str) and info["server_id"]
    assert isinstance(info["server_name"], str) and info["server_name"]
    assert isinstance(info["version"], str)
    major, minor, *_ = (int(x) for x in info["version"].split("."))
    assert (major, minor) >= (2, 10)  # nats.py and nats.go gate JetStream features on this
    assert info["proto"] == 1
    assert info["headers"] is True
    assert info["jetstream"] is True
    assert info["max_payload"] == MAX_PAYLOAD
    assert isinstance(info["client_id"], int)
    assert info["port"] == agent.port
    assert info["connect_urls"] == [f"127.0.0.1:{agent.port}"]
    assert "auth_required" not in info


async def test_info_gives_each_connection_its_own_client_id(agent: AgentProcess) -> None:
    a, b = await RawClient.open(agent.port), await RawClient.open(agent.port)
    try:
        assert a.info["client_id"] != b.info["client_id"]
        assert a.info["server_id"] == b.info["server_id"]
    finally:
        await a.close()
        await b.close()


async def test_connect_verbose_answers_ok(raw: RawClient) -> None:
    raw.send(b'CONNECT {"verbose":true}\r\n')
    assert await raw.read_until(b"\r\n") == b"+OK\r\n"


async def test_verbose_acknowledges_sub_and_unsub_but_not_ping(raw: RawClient) -> None:
    raw.send(b'CONNECT {"verbose":true}\r\nSUB foo 1\r\nUNSUB 1\r\n')
    assert await raw.ping() == b"+OK\r\n+OK\r\n+OK\r\n"


async def test_verbose_acknowledges_each_ack_of_a_run(raw: RawClient) -> None:
    # Plain acks written back to back are read as one run, and each is still a PUB.
    acks = b"".join(
        pub(f"$JS.ACK.S.C.1.{n}.{n}.1700000000000000000.0", b"+ACK" if n % 2 else b"")
        for n in range(1, 4)
    )
    raw.send(b'CONNECT {"verbose":true}\r\n' + acks)
    assert await raw.ping() == b"+OK\r\n" * 4


async def test_connect_without_verbose_field_is_verbose_as_in_nats_server(
    raw: RawClient,
) -> None:
    # nats-server's defaults for a CONNECT that leaves the field out: verbose is on.
    raw.send(b"CONNECT {}\r\n")
    assert await raw.ping() == b"+OK\r\n"


async def test_before_connect_the_client_is_verbose_as_in_nats_server(raw: RawClient) -> None:
    raw.send(b"SUB foo 1\r\n")
    assert await raw.ping() == b"+OK\r\n"


async def test_unsupported_client_protocol_is_refused(raw: RawClient) -> None:
    raw.send(b'CONNECT {"verbose":false,"protocol":2}\r\n')
    assert await raw.read_until_closed(timeout=3) == b"-ERR 'invalid client protocol'\r\n"


async def test_ping_answers_pong(raw: RawClient) -> None:
    raw.send(b"PING\r\n")
    assert await raw.read_until(b"\r\n") == b"PONG\r\n"


async def test_operations_are_case_insensitive(raw: RawClient) -> None:
    raw.send(b'connect {"verbose":false}\r\nsub _INBOX.x 1\r\n')
    raw.send(b"pub $JS.API.INFO _INBOX.x 0\r\n\r\n")
    frame = await raw.read_until(b"}\r\n")
    [(subject, sid, _, payload)] = parse_msgs(frame)
    assert (subject, sid) == ("_INBOX.x", "1")
    assert json.loads(payload)["type"] == "io.nats.jetstream.api.v1.account_info_response"


# -- keepalive ----------------------------------------------------------------------------


async def test_server_pings_a_quiet_client(pinging_agent: AgentProcess) -> None:
    client = await _connected(pinging_agent.port)
    try:
        assert await client.read_until(b"\r\n", timeout=2) == b"PING\r\n"
    finally:
        await client.close()


async def test_client_that_answers_pings_stays_connected(pinging_agent: AgentProcess) -> None:
    client = await _connected(pinging_agent.port)
    try:
        for _ in range(5):  # well past ping_max unanswered intervals
            assert await client.read_until(b"\r\n", timeout=2) == b"PING\r\n"
            client.send(b"PONG\r\n")
        assert await client.ping() == b""
    finally:
        await client.close()


async def test_client_that_never_answers_pings_is_closed_as_stale(
    pinging_agent: AgentProcess,
) -> None:
    client = await _connected(pinging_agent.port)
    try:
        # ping_max 2: two PINGs go unanswered, the third interval closes the connection.
        got = await client.read_until_closed(timeout=3)
        assert got == b"PING\r\nPING\r\n-ERR 'Stale Connection'\r\n"
    finally:
        await client.close()


# -- authorization ------------------------------------------------------------------------


async def _auth_outcome(port: int, connect: bytes) -> bytes:
    client = await RawClient.open(port)
    try:
        assert client.info["auth_required"] is True
        client.send(connect + b"PING\r\n")
        return await client.read_until_closed(timeout=3)
    except TimeoutError:
        # Still open: the credentials were accepted.
        return b"<open>"
    finally:
        await client.close()


async def test_user_and_password_are_accepted(userpass_agent: AgentProcess) -> None:
    client = await RawClient.open(userpass_agent.port)
    try:
        client.send(b'CONNECT {"verbose":false,"user":"alice","pass":"s3cret"}\r\n')
        assert await client.ping() == b""
    finally:
        await client.close()


@pytest.mark.parametrize(
    "connect",
    [
        b'CONNECT {"verbose":false,"user":"alice","pass":"wrong"}\r\n',
        b'CONNECT {"verbose":false,"user":"bob","pass":"s3cret"}\r\n',
        b'CONNECT {"verbose":false,"user":"alice"}\r\n',
        b'CONNECT {"verbose":false}\r\n',
        b'CONNECT {"verbose":false,"auth_token":"s3cret"}\r\n',
        b"",  # no CONNECT at all: the PING is the first thing the server sees
    ],
    ids=["wrong-password", "wrong-user", "no-password", "no-credentials", "token", "no-connect"],
)
async def test_bad_or_missing_user_credentials_are_an_authorization_violation(
    userpass_agent: AgentProcess, connect: bytes
) -> None:
    got = await _auth_outcome(userpass_agent.port, connect)
    assert got == b"-ERR 'Authorization Violation'\r\n"


async def test_publish_before_connect_is_an_authorization_violation(
    userpass_agent: AgentProcess,
) -> None:
    got = await _auth_outcome(userpass_agent.port, b"SUB foo 1\r\n" + pub("foo", b"x"))
    assert got == b"-ERR 'Authorization Violation'\r\n"


async def test_acks_before_connect_are_an_authorization_violation(
    userpass_agent: AgentProcess,
) -> None:
    acks = pub("$JS.ACK.S.C.1.1.1.1700000000000000000.0", b"") * 2
    got = await _auth_outcome(userpass_agent.port, acks)
    assert got == b"-ERR 'Authorization Violation'\r\n"


async def test_token_is_accepted(token_agent: AgentProcess) -> None:
    client = await RawClient.open(token_agent.port)
    try:
        client.send(b'CONNECT {"verbose":false,"auth_token":"t0ken"}\r\n')
        assert await client.ping() == b""
    finally:
        await client.close()


@pytest.mark.parametrize(
    "connect",
    [
        b'CONNECT {"verbose":false,"auth_token":"nope"}\r\n',
        b'CONNECT {"verbose":false,"user":"t0ken","pass":"t0ken"}\r\n',
        b'CONNECT {"verbose":false}\r\n',
    ],
    ids=["wrong-token", "user-pass-instead", "missing"],
)
async def test_bad_or_missing_token_is_an_authorization_violation(
    token_agent: AgentProcess, connect: bytes
) -> None:
    got = await _auth_outcome(token_agent.port, connect)
    assert got == b"-ERR 'Authorization Violation'\r\n"


async def test_client_that_never_sends_connect_is_closed_when_auth_is_required(
    token_agent: AgentProcess,
) -> None:
    client = await RawClient.open(token_agent.port)
    try:
        got = await client.read_until_closed(timeout=3)  # the agent's auth timeout is 500ms
        assert got == b"-ERR 'Authentication Timeout'\r\n"
    finally:
        await client.close()


async def test_authenticated_client_outlives_the_auth_timeout(token_agent: AgentProcess) -> None:
    client = await RawClient.open(token_agent.port)
    try:
        client.send(b'CONNECT {"verbose":false,"auth_token":"t0ken"}\r\n')
        assert await client.read_for(0.8) == b""
        assert await client.ping() == b""
    finally:
        await client.close()


# -- protocol violations ------------------------------------------------------------------


async def test_payload_over_max_payload_is_refused_and_nothing_is_written(
    agent: AgentProcess,
) -> None:
    admin = await _api_client(agent.port)
    try:
        created = await _api(
            admin, "$JS.API.STREAM.CREATE.BIG", {"name": "BIG", "subjects": ["big.>"]}
        )
        assert "error" not in created, created
        client = await _connected(agent.port)
        # A fitting message first: processed, as nats-server processes what came before.
        client.send(pub("big.ok", b"x" * MAX_PAYLOAD, "_INBOX.c.ack"))
        client.send(pub("big.too", b"y" * (MAX_PAYLOAD + 1), "_INBOX.c.ack"))
        got = await client.read_until_closed(timeout=3)
        assert got == b"-ERR 'Maximum Payload Violation'\r\n"
        await client.close()
        info = await _api(admin, "$JS.API.STREAM.INFO.BIG", None)
        for _ in range(50):  # the fitting message lingers in the write buffer a moment
            if info["state"]["messages"]:
                break
            await asyncio.sleep(0.05)
            info = await _api(admin, "$JS.API.STREAM.INFO.BIG", None)
        await asyncio.sleep(0.2)
        info = await _api(admin, "$JS.API.STREAM.INFO.BIG", None)
        assert info["state"]["messages"] == 1
        assert info["state"]["last_seq"] == 1
        msg = await _api(admin, "$JS.API.STREAM.MSG.GET.BIG", {"seq": 1})
        assert msg["message"]["subject"] == "big.ok"
    finally:
        await admin.close()


@pytest.mark.parametrize(
    "garbage",
    [
        b"FOO bar\r\n",
        b"PUBLISH foo 1\r\nx\r\n",
        b"PUB foo 1\r\nab\r\n",  # the payload is longer than the size said
        b"\x00\x01\x02\r\n",
    ],
    ids=["unknown-op", "misspelled-op", "payload-overrun", "binary"],
)
async def test_malformed_input_is_an_unknown_protocol_operation(
    raw: RawClient, garbage: bytes
) -> None:
    raw.send(CONNECT_PLAIN + garbage)
    assert await raw.read_until_closed(timeout=3) == b"-ERR 'Unknown Protocol Operation'\r\n"


async def test_control_line_over_the_limit_is_refused(raw: RawClient) -> None:
    raw.send(CONNECT_PLAIN + b"SUB " + b"a" * 5000 + b" 1\r\n")
    assert await raw.read_until_closed(timeout=3) == b"-ERR 'maximum control line exceeded'\r\n"


async def test_invalid_subject_in_sub_is_refused_and_connection_stays_open(
    raw: RawClient,
) -> None:
    raw.send(b'CONNECT {"verbose":true}\r\nSUB foo..bar 1\r\n')
    # nats-server: +OK for CONNECT, then -ERR (and no +OK) for the SUB; still usable.
    assert await raw.ping() == b"+OK\r\n-ERR 'Invalid Subject'\r\n"


async def test_a_misbehaving_client_does_not_disturb_another(agent: AgentProcess) -> None:
    good = await _api_client(agent.port)
    bad = await _connected(agent.port)
    try:
        bad.send(b"GARBAGE\r\n")
        assert await bad.read_until_closed(timeout=3) == b"-ERR 'Unknown Protocol Operation'\r\n"
        assert await good.ping() == b""
        reply = await _api(good, "$JS.API.INFO", None)
        assert reply["type"] == "io.nats.jetstream.api.v1.account_info_response"
    finally:
        await good.close()
        await bad.close()


# -- subscriptions ------------------------------------------------------------------------


async def test_sub_receives_replies_to_its_inbox(raw: RawClient) -> None:
    raw.send(
        CONNECT_PLAIN + b"SUB _INBOX.a.* 7\r\n" + api_request("$JS.API.INFO", None, "_INBOX.a.1")
    )
    [(subject, sid, headers, _)] = parse_msgs(await raw.read_until(b"}\r\n"))
    assert (subject, sid, headers) == ("_INBOX.a.1", "7", None)


async def test_unsub_stops_delivery(raw: RawClient) -> None:
    raw.send(CONNECT_PLAIN + b"SUB _INBOX.a 1\r\nUNSUB 1\r\n")
    raw.send(api_request("$JS.API.INFO", None, "_INBOX.a"))
    assert await raw.ping() == b""
    assert await raw.read_for(0.5) == b""


async def test_unsub_with_max_delivers_exactly_max(raw: RawClient) -> None:
    raw.send(CONNECT_PLAIN + b"SUB _INBOX.a 1\r\nUNSUB 1 2\r\n")
    for _ in range(4):
        raw.send(api_request("$JS.API.INFO", None, "_INBOX.a"))
    got = await raw.ping()
    msgs = parse_msgs(got + await raw.read_for(1.0))
    assert len(msgs) == 2


async def test_unsub_with_max_already_reached_removes_at_once(raw: RawClient) -> None:
    raw.send(CONNECT_PLAIN + b"SUB _INBOX.a 1\r\n" + api_request("$JS.API.INFO", None, "_INBOX.a"))
    assert len(parse_msgs(await raw.read_until(b"}\r\n"))) == 1
    raw.send(b"UNSUB 1 1\r\n" + api_request("$JS.API.INFO", None, "_INBOX.a"))
    assert await raw.read_for(0.5) == b""


# -- no responders ------------------------------------------------------------------------


async def test_request_nothing_serves_gets_503_when_client_asked_for_it(raw: RawClient) -> None:
    raw.send(CONNECT_HEADERS + b"SUB _INBOX.r 1\r\n" + pub("nobody.home", b"hi", "_INBOX.r"))
    frame = await raw.read_until(b"\r\n\r\n\r\n", timeout=3)
    [(subject, sid, headers, payload)] = parse_msgs(frame)
    assert (subject, sid, payload) == ("_INBOX.r", "1", b"")
    assert headers is not None and headers.startswith(b"NATS/1.0 503")


async def test_unknown_jetstream_api_gets_503_when_client_asked_for_it(raw: RawClient) -> None:
    raw.send(CONNECT_HEADERS + b"SUB _INBOX.r 1\r\n" + pub("$JS.FC.nothing", b"", "_INBOX.r"))
    frame = await raw.read_until(b"\r\n\r\n\r\n", timeout=3)
    [(_, _, headers, _)] = parse_msgs(frame)
    assert headers is not None and headers.startswith(b"NATS/1.0 503")


@pytest.mark.parametrize(
    "connect",
    [
        CONNECT_PLAIN,
        b'CONNECT {"verbose":false,"headers":true}\r\n',
        b'CONNECT {"verbose":false,"headers":true,"no_responders":false}\r\n',
    ],
    ids=["plain", "headers-only", "no_responders-false"],
)
async def test_request_nothing_serves_is_silent_unless_asked(
    raw: RawClient, connect: bytes
) -> None:
    raw.send(connect + b"SUB _INBOX.r 1\r\n" + pub("nobody.home", b"hi", "_INBOX.r"))
    assert await raw.ping() == b""
    assert await raw.read_for(0.6) == b""


async def test_no_responders_without_headers_is_refused(raw: RawClient) -> None:
    raw.send(b'CONNECT {"verbose":false,"no_responders":true}\r\n')
    got = await raw.read_until_closed(timeout=3)
    assert got == b"-ERR 'no responders requires headers support'\r\n"


# -- headers ------------------------------------------------------------------------------


async def test_hpub_is_refused_when_headers_were_not_negotiated(raw: RawClient) -> None:
    # nats-server closes such a client without a word.
    raw.send(CONNECT_PLAIN + b"SUB _INBOX.h 1\r\n")
    raw.send(hpub("$JS.API.INFO", b"NATS/1.0\r\n\r\n", b"", "_INBOX.h"))
    assert await raw.read_until_closed(timeout=3) == b""


async def test_hpub_before_connect_is_refused(raw: RawClient) -> None:
    raw.send(hpub("$JS.API.INFO", b"NATS/1.0\r\n\r\n", b"", "_INBOX.h"))
    assert await raw.read_until_closed(timeout=3) == b""


async def test_hpub_is_accepted_when_headers_were_negotiated(raw: RawClient) -> None:
    raw.send(CONNECT_HEADERS + b"SUB _INBOX.h 1\r\n")
    raw.send(hpub("$JS.API.INFO", b"NATS/1.0\r\nX-Test: 1\r\n\r\n", b"", "_INBOX.h"))
    [(subject, _, _, payload)] = parse_msgs(await raw.read_until(b"}\r\n"))
    assert subject == "_INBOX.h"
    assert json.loads(payload)["type"] == "io.nats.jetstream.api.v1.account_info_response"
