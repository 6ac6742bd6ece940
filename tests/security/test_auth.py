"""Authentication against an agent and nats-server with one config file: bcrypt passwords,
nkeys (the signed nonce), the auth timeout, no_auth_user."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import Iterator

import bcrypt
import nats
import nkeys
import pytest

from support.rawnats import RawClient
from support.servers import KINDS, Server, running_server


def _user_seed() -> tuple[str, str]:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    return seed.decode(), nkeys.from_seed(seed).public_key.decode()


SEED, PUBLIC = _user_seed()
OTHER_SEED, _ = _user_seed()
HASH = bcrypt.hashpw(b"opensesame", bcrypt.gensalt(rounds=4)).decode()


def _config_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, text: str
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp(request.param)
    conf = tmp / "auth.conf"
    conf.write_text(text)
    with running_server(request.param, tmp / "store", "-c", str(conf)) as srv:
        yield srv


@pytest.fixture(scope="module", params=KINDS)
def users(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    yield from _config_server(
        request,
        tmp_path_factory,
        f'authorization {{\n  timeout: 1\n  users: [\n    {{user: alice, password: "{HASH}"}}\n'
        f"    {{nkey: {PUBLIC}}}\n  ]\n}}\n",
    )


@pytest.fixture(scope="module", params=KINDS)
def guest(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    yield from _config_server(
        request,
        tmp_path_factory,
        "authorization { users: [ {user: guest, password: g}, {user: admin, password: a} ] }\n"
        "no_auth_user: guest\n",
    )


async def _violation(port: int, connect: bytes) -> bytes:
    client = await RawClient.open(port)
    try:
        client.send(connect + b"PING\r\n")
        return await client.read_until_closed()
    finally:
        await client.close()


async def test_bcrypt_password(users: Server) -> None:
    nc = await nats.connect(users.url, user="alice", password="opensesame")
    await nc.flush()
    await nc.close()
    got = await _violation(
        users.port, b'CONNECT {"verbose":false,"user":"alice","pass":"' + HASH.encode() + b'"}\r\n'
    )
    # The hash itself is not the password.
    assert got == b"-ERR 'Authorization Violation'\r\n"


async def test_nkey_signs_the_nonce(users: Server) -> None:
    raw = await RawClient.open(users.port)
    try:
        assert raw.info["auth_required"] is True
        assert isinstance(raw.info["nonce"], str) and raw.info["nonce"]
    finally:
        await raw.close()
    nc = await nats.connect(users.url, nkeys_seed_str=SEED)
    info = await nc.jetstream(timeout=10).account_info()
    assert info.limits is not None
    await nc.close()


async def test_a_signature_by_another_key_is_refused(users: Server) -> None:
    other = nkeys.from_seed(OTHER_SEED.encode())
    raw = await RawClient.open(users.port)
    try:
        sig = base64.urlsafe_b64encode(other.sign(raw.info["nonce"].encode())).rstrip(b"=")
        connect = json.dumps({"verbose": False, "nkey": PUBLIC, "sig": sig.decode()}).encode()
        raw.send(b"CONNECT " + connect + b"\r\nPING\r\n")
        assert await raw.read_until_closed() == b"-ERR 'Authorization Violation'\r\n"
    finally:
        await raw.close()


async def test_a_client_that_never_connects_times_out_others_unaffected(users: Server) -> None:
    silent = await RawClient.open(users.port)
    try:
        nc = await nats.connect(users.url, user="alice", password="opensesame")
        got = await silent.read_until_closed(timeout=10)
        assert got == b"-ERR 'Authentication Timeout'\r\n"
        assert nc.is_connected
        await nc.flush()
        await nc.close()
    finally:
        await silent.close()


async def test_no_auth_user_is_who_a_client_without_credentials_is(guest: Server) -> None:
    raw = await RawClient.open(guest.port)
    try:
        # As nats-server: with a no_auth_user, INFO does not ask for credentials.
        assert "auth_required" not in raw.info
    finally:
        await raw.close()
    nc = await nats.connect(guest.url)
    await nc.flush()
    await nc.close()
    nc = await nats.connect(guest.url, user="admin", password="a")
    await nc.flush()
    await nc.close()
    got = await _violation(guest.port, b'CONNECT {"verbose":false,"user":"admin","pass":"x"}\r\n')
    assert got == b"-ERR 'Authorization Violation'\r\n"


async def test_wrong_credentials_do_not_disturb_a_connected_client(users: Server) -> None:
    nc = await nats.connect(users.url, user="alice", password="opensesame")
    try:
        for _ in range(3):
            got = await _violation(
                users.port, b'CONNECT {"verbose":false,"user":"alice","pass":"no"}\r\n'
            )
            assert got == b"-ERR 'Authorization Violation'\r\n"
        await asyncio.wait_for(nc.flush(), 5)
    finally:
        await nc.close()
