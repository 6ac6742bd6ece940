"""SIGHUP reloads users and permissions, as nats-server's reload: removed users are closed,
changed permissions apply to connected clients, new credentials to new connections, and a
file with an error is refused while the old configuration stays. Same test on both servers."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.rawnats import RawClient, api_request
from support.servers import KINDS, Server, running_server

BEFORE = """
authorization {
  users: [
    {user: alice, password: a}
    {user: bob, password: b}
  ]
}
"""
AFTER = """
authorization {
  users: [
    {user: alice, password: a, permissions: {
      publish: {deny: "$JS.API.STREAM.CREATE.>"}
      subscribe: {deny: "_INBOX.old.>"}
    }}
    {user: carol, password: c}
  ]
}
"""
BROKEN = "authorization {\n  users: [ {user: alice, password: a, colour: red} ]\n}\n"


@pytest.fixture(params=KINDS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    conf = tmp_path / "reload.conf"
    conf.write_text(BEFORE)
    with running_server(request.param, tmp_path / "store", "-c", str(conf)) as srv:
        yield srv, conf


async def _login(srv: Server, user: str, password: str) -> RawClient:
    raw = await RawClient.open(srv.port)
    connect = {"verbose": False, "user": user, "pass": password}
    raw.send(b"CONNECT " + json.dumps(connect).encode() + b"\r\n")
    return raw


async def _can_login(srv: Server, user: str, password: str) -> bool:
    raw = await _login(srv, user, password)
    try:
        raw.send(b"PING\r\n")
        return (await raw.read_until(b"\r\n")).startswith(b"PONG")
    except ConnectionError:
        return False
    finally:
        await raw.close()


async def _eventually(check: object, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "reload not applied in time"
        await asyncio.sleep(0.1)


def _hup(srv: Server) -> None:
    assert srv.process is not None and srv.process.process is not None
    srv.process.process.send_signal(signal.SIGHUP)


async def test_sighup_reloads_users_and_permissions(server: tuple[Server, Path]) -> None:
    srv, conf = server
    alice = await _login(srv, "alice", "a")
    bob = await _login(srv, "bob", "b")
    try:
        alice.send(b"SUB _INBOX.old.x 1\r\n")
        assert await alice.ping() == b""
        assert await bob.ping() == b""
        assert not await _can_login(srv, "carol", "c")

        conf.write_text(AFTER)
        _hup(srv)
        await _eventually(lambda: _can_login(srv, "carol", "c"))

        # bob is gone: his connection is closed, without a word as on nats-server.
        assert await bob.read_until_closed(timeout=10) == b""
        assert not await _can_login(srv, "bob", "b")
        # alice stays, with her new permissions: her old subscription is dropped, and
        # creating a stream is now refused.
        got = await alice.ping()
        assert got == (
            b'-ERR \'Permissions Violation for Subscription to "_INBOX.old.x" (sid "1")\'\r\n'
        )
        alice.send(api_request("$JS.API.STREAM.CREATE.S", {"name": "S"}, "_INBOX.r"))
        got = await alice.ping()
        assert got == b"-ERR 'Permissions Violation for Publish to \"$JS.API.STREAM.CREATE.S\"'\r\n"

        # A file with an error: refused, the server stays up with what it had.
        conf.write_text(BROKEN)
        _hup(srv)
        await asyncio.sleep(1.0)
        assert await alice.ping() == b""
        assert await _can_login(srv, "carol", "c")
        assert srv.process is not None and srv.process.process is not None
        assert srv.process.process.poll() is None
    finally:
        await alice.close()
        await bob.close()
    log = srv.log()
    assert "colour" in log, log[-2000:]
