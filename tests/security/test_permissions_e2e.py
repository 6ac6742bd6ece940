"""Per-user permissions on every subject, the JetStream API and acks included, against an
agent and nats-server with one config file: what is refused, in nats-server's words, and that
the connection stays open after it."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator

import nats
import pytest
from nats.js import JetStreamContext

from support.rawnats import RawClient, api_request, pub
from support.servers import KINDS, Server, running_server

CONFIG = """
authorization {
  users: [
    {user: admin, password: a}
    {user: worker, password: w, permissions: {
      publish: {allow: ["$JS.API.CONSUMER.MSG.NEXT.ORDERS.*", "$JS.ACK.ORDERS.>"]}
      subscribe: {allow: ["_INBOX.>", "jobs workers"], deny: "_INBOX.secret.>"}
    }}
    {user: responder, password: r, permissions: {
      publish: "$JS.API.CONSUMER.MSG.NEXT.ORDERS.*"
      subscribe: "_INBOX.>"
      allow_responses: {max: 1}
    }}
  ]
}
"""

MSG_RE = re.compile(rb"MSG (\S+) (\S+) (?:(\S+) )?(\d+)\r\n")


@pytest.fixture(scope="module", params=KINDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp(request.param)
    conf = tmp / "perms.conf"
    conf.write_text(CONFIG)
    with running_server(request.param, tmp / "store", "-c", str(conf)) as srv:
        yield srv


@pytest.fixture
async def orders(server: Server) -> AsyncIterator[JetStreamContext]:
    """As admin: a stream ORDERS with a durable pull consumer C, ack explicit (creating them
    again with the same config is a no-op on both servers)."""
    nc = await nats.connect(server.url, user="admin", password="a")
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    await js.add_consumer("ORDERS", durable_name="C", ack_policy="explicit", ack_wait=30)
    yield js
    await nc.close()


async def _login(server: Server, user: str, password: str) -> RawClient:
    raw = await RawClient.open(server.port)
    connect = {"verbose": False, "pedantic": False, "user": user, "pass": password}
    raw.send(b"CONNECT " + json.dumps(connect).encode() + b"\r\n")
    assert await raw.ping() == b""
    return raw


def _violation(subject: str, kind: str = "Publish to") -> bytes:
    return f"-ERR 'Permissions Violation for {kind} \"{subject}\"'\r\n".encode()


async def test_a_consumer_only_user_cannot_create_streams(server: Server) -> None:
    raw = await _login(server, "worker", "w")
    try:
        raw.send(b"SUB _INBOX.w 1\r\n")
        raw.send(api_request("$JS.API.STREAM.CREATE.EVIL", {"name": "EVIL"}, "_INBOX.w"))
        raw.send(api_request("$JS.API.STREAM.DELETE.ORDERS", None, "_INBOX.w"))
        raw.send(pub("orders.new", b"x"))
        got = await raw.ping()
        assert got == (
            _violation("$JS.API.STREAM.CREATE.EVIL")
            + _violation("$JS.API.STREAM.DELETE.ORDERS")
            + _violation("orders.new")
        )
        # Still connected, still able to do what it may.
        assert await raw.ping() == b""
    finally:
        await raw.close()


async def test_a_consumer_only_user_fetches_and_acks(
    server: Server, orders: JetStreamContext
) -> None:
    await orders.publish("orders.1", b"first")
    raw = await _login(server, "worker", "w")
    try:
        raw.send(b"SUB _INBOX.w 1\r\n")
        raw.send(api_request("$JS.API.CONSUMER.MSG.NEXT.ORDERS.C", {"batch": 1}, "_INBOX.w"))
        data = await raw.read_until(b"first\r\n", timeout=10)
        reply = MSG_RE.search(data).group(3).decode()  # type: ignore[union-attr]
        assert reply.startswith("$JS.ACK.ORDERS.C.")
        # An ack with a reply subject, answered once applied: nats-server applies acks on
        # another goroutine, so a plain ack may not have landed when the info is asked for.
        raw.send(pub(reply, b"+ACK", "_INBOX.w"))
        await raw.read_until(b"MSG _INBOX.w 1 0\r\n\r\n", timeout=10)
        assert await raw.ping() == b""
    finally:
        await raw.close()
    info = await orders.consumer_info("ORDERS", "C")
    assert info.num_ack_pending == 0


async def test_subscriptions_are_checked_with_queues_and_deny(server: Server) -> None:
    raw = await _login(server, "worker", "w")
    try:
        raw.send(b"SUB orders.> 1\r\n")
        raw.send(b"SUB _INBOX.secret.x 2\r\n")
        raw.send(b"SUB jobs 3\r\n")
        raw.send(b"SUB jobs others 4\r\n")
        raw.send(b"SUB jobs workers 5\r\n")
        raw.send(b"SUB _INBOX.ok.> 6\r\n")
        got = await raw.ping()
        assert got == (
            _violation("orders.>", "Subscription to")
            + _violation("_INBOX.secret.x", "Subscription to")
            + _violation("jobs", "Subscription to")
            + b'-ERR \'Permissions Violation for Subscription to "jobs" using queue "others"\'\r\n'
        )
    finally:
        await raw.close()


async def test_allow_responses_lets_a_user_ack_what_it_was_sent_once(
    server: Server, orders: JetStreamContext
) -> None:
    await orders.publish("orders.2", b"second")
    raw = await _login(server, "responder", "r")
    try:
        raw.send(b"SUB _INBOX.r 1\r\n")
        # Not delivered to it: no ack of its own making.
        forged = "$JS.ACK.ORDERS.C.1.1.1.0.0"
        raw.send(pub(forged, b"+ACK"))
        assert await raw.ping() == _violation(forged)
        raw.send(api_request("$JS.API.CONSUMER.MSG.NEXT.ORDERS.C", {"batch": 1}, "_INBOX.r"))
        data = await raw.read_until(b"second\r\n", timeout=10)
        reply = MSG_RE.search(data).group(3).decode()  # type: ignore[union-attr]
        raw.send(pub(reply, b"+WPI"))
        assert await raw.ping() == b""
        # max: 1 -- the second answer to the same message is refused.
        raw.send(pub(reply, b"+ACK"))
        assert await raw.ping() == _violation(reply)
    finally:
        await raw.close()


async def test_nats_py_sees_the_violation_as_an_error_and_stays_connected(server: Server) -> None:
    errors: list[Exception] = []

    async def on_error(e: Exception) -> None:
        errors.append(e)

    nc = await nats.connect(server.url, user="worker", password="w", error_cb=on_error)
    try:
        await nc.publish("orders.x", b"no")
        await nc.flush()
        for _ in range(50):
            if errors:
                break
            await nc.flush()
        assert errors and "permissions violation for publish" in str(errors[0]).lower()
        assert nc.is_connected
    finally:
        await nc.close()
