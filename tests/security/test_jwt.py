"""Decentralised JWT auth (operator mode, MEMORY resolver with resolver_preload) against an
agent and nats-server with one config file: users with creds connect, their JWT permissions
apply, users of unknown accounts, expired users and bad signatures are refused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import nats
import nkeys
import pytest
from jwts import Key, account_jwt, connect_line, creds, new_key, operator_jwt, user_jwt

from support.rawnats import RawClient, api_request
from support.servers import KINDS, Server, running_server

OPERATOR = new_key(nkeys.PREFIX_BYTE_OPERATOR)
ACCOUNT = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
SYSTEM = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
STRANGER = new_key(nkeys.PREFIX_BYTE_ACCOUNT)  # an account the server does not know
ALICE = new_key(nkeys.PREFIX_BYTE_USER)
READER = new_key(nkeys.PREFIX_BYTE_USER)


@pytest.fixture(scope="module", params=KINDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp(request.param)
    conf = tmp / "op.conf"
    conf.write_text(
        f'operator: "{operator_jwt(OPERATOR)}"\n'
        f"system_account: {SYSTEM.public}\n"
        "resolver: MEMORY\n"
        "resolver_preload: {\n"
        f'  {ACCOUNT.public}: "{account_jwt(OPERATOR, ACCOUNT, "APP")}"\n'
        f'  {SYSTEM.public}: "{account_jwt(OPERATOR, SYSTEM, "SYS", jetstream=False)}"\n'
        "}\n"
    )
    with running_server(request.param, tmp / "store", "-c", str(conf)) as srv:
        yield srv


async def test_a_user_with_creds_connects_and_uses_jetstream(
    server: Server, tmp_path: Path
) -> None:
    path = tmp_path / "alice.creds"
    path.write_text(creds(user_jwt(ACCOUNT, ALICE, "alice"), ALICE))
    nc = await nats.connect(server.url, user_credentials=str(path))
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="JWT", subjects=["jwt.>"])
        ack = await js.publish("jwt.a", b"signed")
        assert ack.seq == 1
    finally:
        await nc.close()


async def _outcome(server: Server, token: str, user: Key, then: bytes = b"") -> bytes:
    raw = await RawClient.open(server.port)
    try:
        assert raw.info["auth_required"] is True
        raw.send(connect_line(token, user, raw.info["nonce"]) + then + b"PING\r\n")
        return await raw.read_until(b"\r\n", timeout=10) if not then else await raw.read_for(1.5)
    except ConnectionError:
        return b"closed"
    finally:
        await raw.close()


async def test_permissions_of_the_user_jwt_apply(server: Server) -> None:
    token = user_jwt(ACCOUNT, READER, "reader", {"pub": {"deny": ["$JS.API.STREAM.CREATE.>"]}})
    create = api_request("$JS.API.STREAM.CREATE.NOPE", {"name": "NOPE"}, "_INBOX.x")
    got = await _outcome(server, token, READER, create)
    assert got.startswith(
        b"-ERR 'Permissions Violation for Publish to \"$JS.API.STREAM.CREATE.NOPE\"'\r\n"
    )
    assert got.endswith(b"PONG\r\n")


@pytest.mark.parametrize("case", ["unknown-account", "expired", "wrong-signer-of-nonce"])
async def test_refused_users(server: Server, case: str) -> None:
    if case == "unknown-account":
        token, signer = user_jwt(STRANGER, ALICE, "alice"), ALICE
    elif case == "expired":
        token, signer = user_jwt(ACCOUNT, ALICE, "alice", exp=int(time.time()) - 60), ALICE
    else:
        token, signer = user_jwt(ACCOUNT, ALICE, "alice"), READER
    assert await _outcome(server, token, signer) == b"-ERR 'Authorization Violation'\r\n"
