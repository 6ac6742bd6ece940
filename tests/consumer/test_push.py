"""Push consumers, served where their subscribers are: flow control, heartbeats, the rate limit.

The rules are nats-server's (server/consumer.go deliverMsg, needFlowControl,
processFlowControl, sendIdleHeartbeat); tests/e2e/test_push.py runs push consumers with real
clients against the agent and nats-server alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from infinistream.consumer.push import FLOW_CONTROL_MAX_PENDING
from infinistream.consumer.records import encode
from infinistream.metadata.kv import Put

from .harness import STREAM, Node, make_node, reply_of

HOUR = 3600 * 10**9


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = await make_node(tmp_path / "meta.db")
    yield n
    await n.close()


async def test_messages_go_to_the_deliver_subject_once_a_client_subscribes(node: Node) -> None:
    await node.create("P", ack_policy="explicit", deliver_subject="out.p")
    await node.publish(("orders.1", b"one"), ("orders.2", b"two"))
    assert not node.service.push.serving(STREAM, "P")
    assert node.outbox.at("out.p") == []
    node.subscribe("out.p")
    await node.outbox.until(lambda: len(node.outbox.messages("out.p")) == 2)
    assert [m[3] for m in node.outbox.messages("out.p")] == [b"one", b"two"]
    await node.publish(("orders.3", b"three"))
    await node.outbox.until(lambda: len(node.outbox.messages("out.p")) == 3)


async def test_a_wildcard_subscription_serves_the_consumer(node: Node) -> None:
    await node.create("P", ack_policy="explicit", deliver_subject="out.p")
    await node.publish(("orders.1", b"one"))
    node.subscribe("out.*")
    await node.outbox.until(lambda: len(node.outbox.messages("out.p")) == 1)


async def test_the_loop_stops_when_the_last_subscriber_leaves(node: Node) -> None:
    await node.create("P", ack_policy="explicit", deliver_subject="out.p")
    node.subscribe("out.p")
    await node.outbox.until(lambda: node.service.push.serving(STREAM, "P"))
    served = node.service.push.active[(STREAM, "P")]
    node.unsubscribe("out.p")
    assert served.task is not None
    await served.task
    assert not node.service.push.serving(STREAM, "P")
    await node.publish(("orders.1", b"one"))
    assert node.outbox.at("out.p") == []


async def test_headers_only_sends_the_size_instead_of_the_data(node: Node) -> None:
    await node.create("P", ack_policy="explicit", deliver_subject="out.p", headers_only=True)
    await node.publish(("orders.1", b"12345"), headers=b"NATS/1.0\r\nK: v\r\n\r\n")
    node.subscribe("out.p")
    await node.outbox.until(lambda: len(node.outbox.messages("out.p")) == 1)
    (msg,) = node.outbox.messages("out.p")
    assert msg[3] == b""
    assert msg[2] == b"NATS/1.0\r\nK: v\r\nNats-Msg-Size: 5\r\n\r\n"


async def test_flow_control_stalls_delivery_until_the_request_is_answered(node: Node) -> None:
    await node.create(
        "P",
        ack_policy="explicit",
        deliver_subject="out.p",
        flow_control=True,
        idle_heartbeat=5_000_000_000,
    )
    window = FLOW_CONTROL_MAX_PENDING // 16
    big = b"x" * (window // 4)
    await node.publish(*[(f"orders.{i}", big) for i in range(8)])
    node.subscribe("out.p")
    await node.outbox.until(lambda: bool(node.outbox.statuses("out.p")))
    # The request follows the message that crossed half the window; delivery goes on to the
    # window's end and stops there.
    requests = [m for m in node.outbox.at("out.p") if m[2] and b"FlowControl Request" in m[2]]
    assert len(requests) == 1
    served = node.service.push.active[(STREAM, "P")]
    await node.outbox.until(lambda: served.stalled)
    sent = len(node.outbox.messages("out.p"))
    assert 2 < sent < 8
    # A heartbeat while stalled names the request a subscriber missed.
    node.time.advance(5)
    node.service.consumer_changed(STREAM, "P")
    await node.outbox.until(
        lambda: any(b"Idle Heartbeat" in (m[2] or b"") for m in node.outbox.at("out.p"))
    )
    beat = next(m[2] for m in node.outbox.at("out.p") if b"Idle Heartbeat" in (m[2] or b""))
    reply = reply_of(requests[0])
    assert b"Nats-Consumer-Stalled: " + reply + b"\r\n" in (beat or b"")
    assert len(node.outbox.messages("out.p")) == sent
    assert node.service.flow_control(reply.decode())
    await node.outbox.until(lambda: len(node.outbox.messages("out.p")) == 8)
    assert served.window == window * 2


async def test_an_answer_to_an_old_flow_control_request_changes_nothing(node: Node) -> None:
    await node.create(
        "P",
        ack_policy="explicit",
        deliver_subject="out.p",
        flow_control=True,
        idle_heartbeat=5_000_000_000,
    )
    node.subscribe("out.p")
    await node.outbox.until(lambda: node.service.push.serving(STREAM, "P"))
    assert node.service.flow_control(f"$JS.FC.{STREAM}.P.abcdef")
    assert node.service.push.active[(STREAM, "P")].window == FLOW_CONTROL_MAX_PENDING // 16
    assert not node.service.flow_control(f"$JS.FC.{STREAM}.nobody.abcdef")


async def test_an_idle_consumer_heartbeats_after_idle_heartbeat(node: Node) -> None:
    await node.create(
        "P",
        ack_policy="explicit",
        ack_wait=HOUR,  # no redelivery while the clock moves
        deliver_subject="out.p",
        idle_heartbeat=60_000_000_000,
    )
    await node.publish(("orders.1", b"one"))
    node.subscribe("out.p")
    await node.outbox.until(lambda: len(node.outbox.messages("out.p")) == 1)
    node.time.advance(60)
    node.service.consumer_changed(STREAM, "P")
    await node.outbox.until(lambda: bool(node.outbox.statuses("out.p")))
    beats = [m[2] for m in node.outbox.at("out.p") if m[1] is None]
    assert beats == [
        b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 1\r\nNats-Last-Stream: 1\r\n\r\n"
    ]


async def test_the_rate_limit_holds_back_what_its_budget_has_not_earned(node: Node) -> None:
    # 8,000 bits per second: about 100 bytes a tenth of a second, so one message a round.
    await node.create("P", ack_policy="explicit", deliver_subject="out.p", rate_limit_bps=8_000)
    await node.publish(*[(f"orders.{i}", b"x" * 60) for i in range(3)])
    node.subscribe("out.p")
    await node.outbox.until(lambda: len(node.outbox.messages("out.p")) == 1)
    served = node.service.push.active[(STREAM, "P")]
    assert served.next_send > node.time.seconds
    node.time.advance(served.next_send - node.time.seconds)
    node.service.consumer_changed(STREAM, "P")
    await node.outbox.until(lambda: len(node.outbox.messages("out.p")) == 2)


async def test_a_moved_deliver_subject_moves_delivery(node: Node) -> None:
    await node.create("P", ack_policy="explicit", deliver_subject="out.old")
    node.subscribe("out.old")
    node.subscribe("out.new")
    await node.publish(("orders.1", b"one"))
    await node.outbox.until(lambda: len(node.outbox.messages("out.old")) == 1)
    old = node.service.push.active[(STREAM, "P")]
    await node.reconfigure("P", deliver_subject="out.new")
    new = node.service.push.active[(STREAM, "P")]
    assert new is not old and new.deliver_subject == "out.new"
    assert old.task is not None
    await old.task
    await node.publish(("orders.2", b"two"))
    await node.outbox.until(lambda: len(node.outbox.messages("out.new")) == 1)
    assert [m[3] for m in node.outbox.messages("out.new")] == [b"two"]
    assert len(node.outbox.messages("out.old")) == 1


async def test_a_loop_whose_consumer_moved_elsewhere_stops(node: Node) -> None:
    # Another agent moved the deliver subject: the config read at the claim says so before
    # this agent's directory does.
    await node.create("P", ack_policy="explicit", deliver_subject="out.p")
    node.subscribe("out.p")
    await node.outbox.until(lambda: node.service.push.serving(STREAM, "P"))
    served = node.service.push.active[(STREAM, "P")]
    loaded = await node.store.load(STREAM, "P")
    assert loaded is not None
    cfg = msgspec.structs.replace(loaded.record.config, deliver_subject="out.elsewhere")
    record = msgspec.structs.replace(loaded.record, config=cfg)
    assert (await node.meta.txn([], [Put(loaded.keys.config, encode(record))])).succeeded
    node.service.consumer_changed(STREAM, "P")
    assert served.task is not None
    await served.task
    assert served.stopped and not node.service.push.serving(STREAM, "P")
    await node.publish(("orders.1", b"one"))
    assert node.outbox.at("out.p") == [] and node.outbox.at("out.elsewhere") == []


async def test_a_deleted_consumer_stops_delivering(node: Node) -> None:
    loaded = await node.create("P", ack_policy="explicit", deliver_subject="out.p")
    node.subscribe("out.p")
    await node.outbox.until(lambda: node.service.push.serving(STREAM, "P"))
    assert await node.service.delete(loaded)
    assert not node.service.push.serving(STREAM, "P")
    assert node.service.push.directory.target(STREAM, "P") is None
    await node.publish(("orders.1", b"one"))
    assert node.outbox.at("out.p") == []
