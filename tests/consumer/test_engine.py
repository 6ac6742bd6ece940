"""The delivery loop every consumer shares: claims, acks, max_ack_pending, redelivery, pauses.

Pull requests drive the loop here (the push edge is tests/consumer/test_push.py); the clock is
the test's, so redelivery deadlines and pauses pass when the test says, not after a sleep.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import pytest

from infinistream.consumer.config import ConsumerConfig
from infinistream.consumer.engine import DUE_MARGIN_SECONDS, _late, until_due
from infinistream.consumer.progress import Delivery
from infinistream.consumer.records import ConsumerKeys, ConsumerRecord, ConsumerState, Pending
from infinistream.consumer.store import LoadedConsumer
from infinistream.jetstream.times import go_time
from infinistream.stream.catalog import StreamEntry
from infinistream.stream.changes import Changes
from infinistream.stream.records import StreamKeys

from .harness import STREAM, Node, make_node, reply_of

SECOND = 10**9
LONG = 60 * SECOND


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = await make_node(tmp_path / "meta.db")
    yield n
    await n.close()


def body(batch: int, **request: object) -> bytes:
    """A request that waits (up to a minute) for its batch."""
    return json.dumps({"batch": batch, "expires": LONG, **request}).encode()


NO_WAIT = json.dumps({"batch": 1, "no_wait": True}).encode()


async def nothing_now(node: Node, name: str, inbox: str) -> bool:
    """Whether a no-wait request finds nothing to hand out (the loop's round runs on the
    clock as it is now)."""
    await node.fetch(name, inbox, NO_WAIT)
    await node.outbox.until(lambda: bool(node.outbox.at(inbox)))
    return node.outbox.statuses(inbox) == [b"NATS/1.0 404 No Messages"]


async def fetch(node: Node, name: str, inbox: str, batch: int) -> list[bytes]:
    """Fetch `batch` messages; their payloads."""
    await node.fetch(name, inbox, body(batch))
    await node.outbox.until(lambda: len(node.outbox.messages(inbox)) >= batch)
    return [m[3] for m in node.outbox.messages(inbox)]


async def test_acks_queued_for_a_consumer_go_into_its_next_claim(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await node.publish(*[(f"orders.{i}", b"%d" % i) for i in range(4)])
    await fetch(node, "C", "_INBOX.1", 2)
    commits = node.store.commits
    # A client's acks and its next request, as they arrive in one read.
    for msg in node.outbox.messages("_INBOX.1"):
        node.ack(msg)
    assert await fetch(node, "C", "_INBOX.2", 2) == [b"2", b"3"]
    assert node.store.commits == commits + 1
    state = (await node.state("C")).state
    assert sorted(state.pending) == [3, 4] and state.ack_floor_stream == 2


async def test_acks_before_a_request_in_its_own_task_start_no_drain(node: Node) -> None:
    """As the agent's router runs a pull request: in a task started right after the read's
    acks were queued. The request's loop takes the acks; no drain task is started for them."""
    await node.create("C", ack_policy="explicit")
    await node.publish(*[(f"orders.{i}", b"%d" % i) for i in range(4)])
    await fetch(node, "C", "_INBOX.1", 2)
    loop = asyncio.get_running_loop()
    started: list[str] = []

    def factory(
        lp: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kw: Any
    ) -> asyncio.Task[Any]:
        started.append(coro.__qualname__)
        return asyncio.Task(coro, loop=lp, **kw)

    loop.set_task_factory(factory)
    try:
        node.service.plain_acks([reply_of(m).decode() for m in node.outbox.messages("_INBOX.1")])
        request = loop.create_task(node.fetch("C", "_INBOX.2", body(2)))
        await node.outbox.until(lambda: len(node.outbox.messages("_INBOX.2")) >= 2)
        await request
    finally:
        loop.set_task_factory(None)
    assert "AckBatcher._drain" not in started
    state = (await node.state("C")).state
    assert sorted(state.pending) == [3, 4] and state.ack_floor_stream == 2


async def test_max_ack_pending_holds_delivery_until_an_ack_frees_room(node: Node) -> None:
    await node.create("C", ack_policy="explicit", max_ack_pending=2)
    await node.publish(*[(f"orders.{i}", b"%d" % i) for i in range(4)])
    await node.fetch("C", "_INBOX.a", body(4))
    await node.outbox.until(lambda: len(node.outbox.messages("_INBOX.a")) == 2)
    assert node.service.pulls.waiting_count(STREAM, "C") == 1
    node.ack(node.outbox.messages("_INBOX.a")[0])
    await node.outbox.until(lambda: len(node.outbox.messages("_INBOX.a")) == 3)
    assert [m[3] for m in node.outbox.messages("_INBOX.a")] == [b"0", b"1", b"2"]
    assert len((await node.state("C")).state.pending) == 2


async def test_an_unacked_message_is_redelivered_after_ack_wait(node: Node) -> None:
    await node.create("C", ack_policy="explicit", ack_wait=30 * SECOND)
    await node.publish(("orders.1", b"one"))
    assert await fetch(node, "C", "_INBOX.1", 1) == [b"one"]
    node.time.advance(29)
    assert await nothing_now(node, "C", "_INBOX.2")
    await node.fetch("C", "_INBOX.3", body(1))
    node.time.advance(1)
    node.service.consumer_changed(STREAM, "C")
    await node.outbox.until(lambda: len(node.outbox.messages("_INBOX.3")) == 1)
    (again,) = node.outbox.messages("_INBOX.3")
    # The second delivery of stream message 1, as consumer sequence 2.
    assert reply_of(again).split(b".")[4:7] == [b"2", b"1", b"2"]


async def test_backoff_sets_each_redelivery_deadline(node: Node) -> None:
    await node.create("C", ack_policy="explicit", max_deliver=4, backoff=[10 * SECOND, 60 * SECOND])
    await node.publish(("orders.1", b"one"))
    await fetch(node, "C", "_INBOX.1", 1)
    start = node.time.ns
    pending = (await node.state("C")).state.pending[1]
    assert pending.deadline == start + 10 * SECOND
    node.time.advance(10)
    await fetch(node, "C", "_INBOX.2", 1)
    pending = (await node.state("C")).state.pending[1]
    assert (pending.deliveries, pending.deadline) == (2, node.time.ns + 60 * SECOND)


async def test_a_nak_with_a_delay_redelivers_after_it(node: Node) -> None:
    await node.create("C", ack_policy="explicit", ack_wait=3600 * SECOND)
    await node.publish(("orders.1", b"one"))
    await fetch(node, "C", "_INBOX.1", 1)
    node.ack(node.outbox.messages("_INBOX.1")[0], b'-NAK {"delay": 5000000000}')
    await node.state("C")  # committed now, so its delay runs from now
    node.time.advance(4)
    assert await nothing_now(node, "C", "_INBOX.2")
    node.time.advance(1)
    assert await fetch(node, "C", "_INBOX.3", 1) == [b"one"]


async def test_past_max_deliver_a_message_is_no_longer_handed_out(node: Node) -> None:
    await node.create("C", ack_policy="explicit", ack_wait=SECOND, max_deliver=2)
    await node.publish(("orders.1", b"one"), ("orders.2", b"two"))
    assert await fetch(node, "C", "_INBOX.1", 1) == [b"one"]
    node.time.advance(1)
    assert await fetch(node, "C", "_INBOX.2", 1) == [b"one"]
    node.time.advance(1)
    assert await fetch(node, "C", "_INBOX.3", 1) == [b"two"]
    state = (await node.state("C")).state
    assert state.pending[1].deadline == -1  # kept as redelivered, never sent again


async def test_ack_policy_none_keeps_nothing_pending(node: Node) -> None:
    await node.create("C", ack_policy="none")
    await node.publish(("orders.1", b"one"), ("orders.2", b"two"))
    assert await fetch(node, "C", "_INBOX.1", 2) == [b"one", b"two"]
    state = (await node.state("C")).state
    assert state.pending == {} and (state.ack_floor_stream, state.ack_floor_consumer) == (2, 2)


async def test_ack_policy_all_acks_everything_up_to_the_ack(node: Node) -> None:
    await node.create("C", ack_policy="all")
    await node.publish(*[(f"orders.{i}", b"%d" % i) for i in range(3)])
    await fetch(node, "C", "_INBOX.1", 3)
    node.ack(node.outbox.messages("_INBOX.1")[1])
    state = (await node.state("C")).state
    assert sorted(state.pending) == [3] and state.ack_floor_stream == 2


async def test_an_ack_with_a_reply_is_answered_once_committed(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await node.publish(("orders.1", b"one"))
    await fetch(node, "C", "_INBOX.1", 1)
    node.outbox.subscribed.add("_INBOX.ack")
    node.ack(node.outbox.messages("_INBOX.1")[0], reply="_INBOX.ack")
    await node.outbox.until(lambda: bool(node.outbox.at("_INBOX.ack")))
    loaded = await node.store.load(STREAM, "C")
    assert loaded is not None and loaded.state.pending == {}


async def test_a_paused_consumer_hands_out_nothing_until_the_pause_ends(node: Node) -> None:
    until = node.time.ns + 60 * SECOND
    await node.create("C", ack_policy="explicit", pause_until=go_time(until))
    await node.publish(("orders.1", b"one"))
    assert await nothing_now(node, "C", "_INBOX.a")
    await node.fetch("C", "_INBOX.b", body(1))
    node.time.advance(60)
    node.service.consumer_changed(STREAM, "C")
    await node.outbox.until(lambda: len(node.outbox.messages("_INBOX.b")) == 1)


async def test_a_loop_with_nothing_left_to_serve_leaves(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await node.publish(("orders.1", b"one"))
    await fetch(node, "C", "_INBOX.1", 1)
    served = node.service.pulls.active.get((STREAM, "C"))
    if served is not None and served.task is not None:
        await served.task
    assert (STREAM, "C") not in node.service.pulls.active
    assert node.service.pulls.watched() == []


async def test_pending_messages_gone_from_the_stream_leave_pending_at_the_next_claim(
    node: Node,
) -> None:
    await node.create("C", ack_policy="explicit")
    await node.publish(("orders.1", b"one"), ("orders.2", b"two"))
    await fetch(node, "C", "_INBOX.1", 2)

    def drop(entry: StreamEntry, changes: Changes) -> int:
        return int(changes.kill(1))

    assert await node.service.committer.change_stream(STREAM, drop) == 1
    assert await nothing_now(node, "C", "_INBOX.2")
    # Nothing to hand out, but the claim committed what it dropped (CONSUMER.INFO sees it).
    loaded = await node.store.load(STREAM, "C")
    assert loaded is not None and sorted(loaded.state.pending) == [2]


def test_until_due_is_bounded_by_the_next_deadline_and_the_pause() -> None:
    now = 1_000 * SECOND
    state = ConsumerState(uid="u", pending={1: Pending(1, 1, now + 2 * SECOND, now, 1)})
    record = ConsumerRecord(config=ConsumerConfig(), created_ns=0, uid="u")
    keys = ConsumerKeys(StreamKeys("g", STREAM), "C")
    loaded = LoadedConsumer(STREAM, "C", keys, record, 1, state, 1)
    assert until_due(loaded, now, 5.0) == pytest.approx(2 + DUE_MARGIN_SECONDS)
    assert until_due(loaded, now, 1.0) == 1.0
    paused = ConsumerConfig(pause_until=go_time(now + SECOND))
    loaded.record = ConsumerRecord(config=paused, created_ns=0, uid="u")
    assert until_due(loaded, now, 5.0) == pytest.approx(1 + DUE_MARGIN_SECONDS)


def test_a_claim_is_late_once_less_than_half_the_ack_wait_of_one_delivery_is_left() -> None:
    now = 1_000 * SECOND
    cfg = ConsumerConfig(
        ack_policy="explicit", ack_wait=4 * SECOND, backoff=[4 * SECOND, 40 * SECOND]
    )
    record = ConsumerRecord(config=cfg, created_ns=0, uid="u")
    keys = ConsumerKeys(StreamKeys("g", STREAM), "C")
    # Seq 1 a first delivery, seq 2 a second (a 40 s wait); seq 3 not pending.
    deliveries = [Delivery(1, 1, 1), Delivery(2, 2, 2), Delivery(3, 3, 1)]

    def late(first_left: int, second_left: int) -> bool:
        pending = {
            1: Pending(1, 1, now + first_left, now, 1),
            2: Pending(2, 2, now + second_left, now, 2),
        }
        state = ConsumerState(uid="u", pending=pending)
        loaded = LoadedConsumer(STREAM, "C", keys, record, 1, state, 1)
        return _late(loaded, deliveries, now - 10 * SECOND, now)

    assert not late(3 * SECOND, 30 * SECOND)
    assert late(SECOND, 30 * SECOND)
    assert late(3 * SECOND, SECOND)
    # 19 s left of the second delivery's 40 s wait.
    assert late(3 * SECOND, 19 * SECOND)
    assert not late(3 * SECOND, 21 * SECOND)


@pytest.mark.parametrize("ack_policy", ["explicit", "all", "none"])
def test_without_backoff_a_claim_is_late_once_half_the_ack_wait_passed_since_it_was_planned(
    ack_policy: str,
) -> None:
    planned = 1_000 * SECOND
    cfg = ConsumerConfig(ack_policy=ack_policy, ack_wait=4 * SECOND)
    record = ConsumerRecord(config=cfg, created_ns=0, uid="u")
    keys = ConsumerKeys(StreamKeys("g", STREAM), "C")
    deliveries = [Delivery(1, 1, 1), Delivery(2, 2, 2)]
    # As the claim left them: each delivery's wait started when it was planned.
    pending = {
        d.stream_seq: Pending(d.consumer_seq, d.deliveries, planned + 4 * SECOND, planned, 1)
        for d in deliveries
    }
    loaded = LoadedConsumer(
        STREAM, "C", keys, record, 1, ConsumerState(uid="u", pending=pending), 1
    )
    explicit = ack_policy != "none"
    assert not _late(loaded, deliveries, planned, planned + 2 * SECOND)
    assert _late(loaded, deliveries, planned, planned + 2 * SECOND + 1) == explicit
    assert not _late(loaded, [], planned, planned + 3 * SECOND)
