"""Pull requests, served by the delivery engine: batches, bytes, expiry, statuses.

The statuses are nats-server's (server/consumer.go processNextMsgRequest, processWaiting); the
end-to-end tests (tests/e2e/test_fetch.py) run the same against nats-server with real clients.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from infinistream.consumer.pull import CHUNK_MESSAGES

from .harness import STREAM, Node, make_node


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = await make_node(tmp_path / "meta.db")
    yield n
    await n.close()


def body(**request: object) -> bytes:
    return json.dumps(request).encode()


async def test_a_request_gets_its_batch_with_ack_replies(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await node.publish(*[(f"orders.{i}", b"m%d" % i) for i in range(5)])
    await node.fetch("C", "_INBOX.a", body(batch=3))
    await node.outbox.until(lambda: len(node.outbox.messages("_INBOX.a")) == 3)
    msgs = node.outbox.messages("_INBOX.a")
    assert [m[0] for m in msgs] == [b"orders.0", b"orders.1", b"orders.2"]
    assert [m[3] for m in msgs] == [b"m0", b"m1", b"m2"]
    # delivered, stream seq, consumer seq, timestamp, pending after it
    replies = [m[1].decode().split(".") for m in msgs if m[1] is not None]
    assert [r[:4] for r in replies] == [["$JS", "ACK", STREAM, "C"]] * 3
    assert [(r[4], r[5], r[6], r[8]) for r in replies] == [
        ("1", "1", "1", "4"),
        ("1", "2", "2", "3"),
        ("1", "3", "3", "2"),
    ]
    assert node.service.pulls.waiting_count(STREAM, "C") == 0
    assert node.outbox.statuses("_INBOX.a") == []


async def test_a_waiting_request_is_served_when_a_publish_commits(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await node.fetch("C", "_INBOX.a", body(batch=2, expires=60_000_000_000))
    assert node.service.pulls.waiting_count(STREAM, "C") == 1
    await node.publish(("orders.1", b"one"))
    await node.outbox.until(lambda: len(node.outbox.messages("_INBOX.a")) == 1)
    await node.publish(("orders.2", b"two"))
    await node.outbox.until(lambda: len(node.outbox.messages("_INBOX.a")) == 2)
    await node.outbox.until(lambda: node.service.pulls.waiting_count(STREAM, "C") == 0)


async def test_no_wait_with_nothing_to_hand_out_is_answered_404(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await node.fetch("C", "_INBOX.a", body(batch=5, no_wait=True))
    await node.outbox.until(lambda: bool(node.outbox.statuses("_INBOX.a")))
    assert node.outbox.statuses("_INBOX.a") == [b"NATS/1.0 404 No Messages"]


async def test_no_wait_gets_what_there_is_then_404(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await node.publish(("orders.1", b"one"), ("orders.2", b"two"))
    await node.fetch("C", "_INBOX.a", body(batch=5, no_wait=True))
    await node.outbox.until(lambda: bool(node.outbox.statuses("_INBOX.a")))
    assert len(node.outbox.messages("_INBOX.a")) == 2
    assert node.outbox.statuses("_INBOX.a") == [b"NATS/1.0 404 No Messages"]


async def test_an_expired_request_is_answered_408_with_what_it_still_wanted(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await node.publish(("orders.1", b"one"))
    await node.fetch("C", "_INBOX.a", body(batch=3, expires=50_000_000, max_bytes=0))
    await node.outbox.until(lambda: bool(node.outbox.statuses("_INBOX.a")))
    (status,) = [m[2] for m in node.outbox.at("_INBOX.a") if m[1] is None]
    assert status == (
        b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 2\r\nNats-Pending-Bytes: 0\r\n\r\n"
    )
    assert len(node.outbox.messages("_INBOX.a")) == 1


async def test_a_message_over_max_bytes_is_answered_409(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await node.publish(("orders.1", b"x" * 500))
    await node.fetch("C", "_INBOX.a", body(batch=3, max_bytes=100, expires=60_000_000_000))
    await node.outbox.until(lambda: bool(node.outbox.statuses("_INBOX.a")))
    assert node.outbox.statuses("_INBOX.a") == [b"NATS/1.0 409 Message Size Exceeds MaxBytes"]
    assert node.outbox.messages("_INBOX.a") == []
    # Nothing was handed out: the message waits for a request that can take it.
    assert (await node.state("C")).state.stream_seq == 0


async def test_max_bytes_counts_subject_reply_and_data_as_nats_server(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await node.create("D", ack_policy="explicit")
    await node.publish(*[(f"orders.{i}", b"x" * 50) for i in range(4)])
    # What C's first two deliveries will weigh, from D's (same names' lengths, same messages).
    await node.fetch("D", "_INBOX.d", body(batch=2))
    await node.outbox.until(lambda: len(node.outbox.messages("_INBOX.d")) == 2)
    size = sum(len(s) + len(r or b"") + len(d) for s, r, _, d in node.outbox.messages("_INBOX.d"))
    await node.fetch("C", "_INBOX.a", body(batch=10, max_bytes=size - 1, expires=60_000_000_000))
    await node.outbox.until(lambda: bool(node.outbox.statuses("_INBOX.a")))
    assert len(node.outbox.messages("_INBOX.a")) == 1
    assert node.outbox.statuses("_INBOX.a") == [b"NATS/1.0 409 Message Size Exceeds MaxBytes"]
    await node.create("E", ack_policy="explicit")
    await node.fetch("E", "_INBOX.e", body(batch=2, max_bytes=size, expires=60_000_000_000))
    await node.outbox.until(lambda: node.service.pulls.waiting_count(STREAM, "E") == 0)
    assert len(node.outbox.messages("_INBOX.e")) == 2
    assert node.outbox.statuses("_INBOX.e") == []


async def test_a_batch_of_bytes_says_it_completed(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await node.publish(("orders.1", b"one"), ("orders.2", b"two"))
    await node.fetch("C", "_INBOX.a", body(batch=1, max_bytes=10_000, expires=60_000_000_000))
    await node.outbox.until(lambda: bool(node.outbox.statuses("_INBOX.a")))
    assert len(node.outbox.messages("_INBOX.a")) == 1
    (status,) = [m[2] for m in node.outbox.at("_INBOX.a") if m[1] is None]
    assert status is not None and status.startswith(b"NATS/1.0 409 Batch Completed\r\n")
    assert b"Nats-Pending-Messages: 0\r\n" in status


async def test_requests_past_max_waiting_are_refused_409(node: Node) -> None:
    await node.create("C", ack_policy="explicit", max_waiting=1)
    await node.fetch("C", "_INBOX.a", body(batch=1, expires=60_000_000_000))
    await node.fetch("C", "_INBOX.b", body(batch=1, expires=60_000_000_000))
    await node.outbox.until(lambda: bool(node.outbox.statuses("_INBOX.b")))
    assert node.outbox.statuses("_INBOX.b") == [b"NATS/1.0 409 Exceeded MaxWaiting"]
    assert node.service.pulls.waiting_count(STREAM, "C") == 1


async def test_an_idle_request_gets_a_heartbeat_each_interval_it_idles(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await node.fetch(
        "C", "_INBOX.a", body(batch=1, expires=60_000_000_000, idle_heartbeat=10_000_000)
    )
    for beats in (1, 2):
        node.time.advance(0.01)
        await node.outbox.until(lambda n=beats: len(node.outbox.statuses("_INBOX.a")) == n)
    assert set(node.outbox.statuses("_INBOX.a")) == {b"NATS/1.0 100 Idle Heartbeat"}


async def test_a_request_whose_client_left_is_dropped_for_the_next(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await node.fetch("C", "_INBOX.gone", body(batch=1, expires=60_000_000_000))
    await node.fetch("C", "_INBOX.here", body(batch=1, expires=60_000_000_000))
    node.outbox.subscribed.discard("_INBOX.gone")
    await node.publish(("orders.1", b"one"))
    await node.outbox.until(lambda: len(node.outbox.messages("_INBOX.here")) == 1)
    assert node.outbox.at("_INBOX.gone") == []
    assert node.service.pulls.waiting_count(STREAM, "C") == 0


async def test_waiting_requests_are_told_when_their_consumer_is_deleted(node: Node) -> None:
    loaded = await node.create("C", ack_policy="explicit")
    await node.fetch("C", "_INBOX.a", body(batch=1, expires=60_000_000_000))
    assert await node.service.delete(loaded)
    assert node.outbox.statuses("_INBOX.a") == [b"NATS/1.0 409 Consumer Deleted"]
    assert node.service.pulls.waiting_count(STREAM, "C") == 0


async def test_a_request_for_no_such_consumer_is_not_served(node: Node) -> None:
    node.outbox.subscribed.add("_INBOX.a")
    assert not await node.service.next_request(STREAM, "nobody", "_INBOX.a", body(batch=1))


async def test_requests_are_served_oldest_first(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    for inbox in ("_INBOX.1", "_INBOX.2", "_INBOX.3"):
        await node.fetch("C", inbox, body(batch=1, expires=60_000_000_000))
    await node.publish(("orders.a", b"a"), ("orders.b", b"b"), ("orders.c", b"c"))
    await node.outbox.until(lambda: len(node.outbox.messages("_INBOX.3")) == 1)
    got = [node.outbox.messages(f"_INBOX.{i}")[0][3] for i in (1, 2, 3)]
    assert got == [b"a", b"b", b"c"]


# -- a batch in chunks ------------------------------------------------------------------------

BIG = 600 * 1024  # over half a chunk: a chunk holds one


async def test_a_batch_over_a_chunk_is_claimed_as_its_client_reads(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await node.publish(*[(f"orders.{i}", bytes([i]) * BIG) for i in range(3)])
    node.outbox.reading.clear()
    await node.fetch("C", "_INBOX.a", body(batch=3, max_bytes=1 << 30, expires=60_000_000_000))
    await node.outbox.until(lambda: len(node.outbox.messages("_INBOX.a")) == 1)
    # The client has not read the first chunk: the next is neither claimed nor read.
    for _ in range(5):
        await asyncio.sleep(0)
    assert (await node.state("C")).state.stream_seq == 1
    node.outbox.reading.set()
    await node.outbox.until(lambda: node.service.pulls.waiting_count(STREAM, "C") == 0)
    msgs = node.outbox.messages("_INBOX.a")
    assert [m[3][:1] for m in msgs] == [b"\0", b"\1", b"\2"]
    assert node.outbox.writes["_INBOX.a"][:3] == [1, 1, 1]
    assert [s.split(b"\r\n")[0] for s in node.outbox.statuses("_INBOX.a")] == [
        b"NATS/1.0 409 Batch Completed"
    ]


async def test_max_bytes_spans_chunks_and_still_answers_409(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await node.publish(*[(f"orders.{i}", b"x" * BIG) for i in range(4)])
    await node.fetch("C", "_INBOX.a", body(batch=10, max_bytes=BIG * 5 // 2))
    await node.outbox.until(lambda: bool(node.outbox.statuses("_INBOX.a")))
    assert len(node.outbox.messages("_INBOX.a")) == 2
    assert node.outbox.writes["_INBOX.a"][:2] == [1, 1]
    assert node.outbox.statuses("_INBOX.a") == [b"NATS/1.0 409 Message Size Exceeds MaxBytes"]
    assert (await node.state("C")).state.stream_seq == 2


async def test_a_batch_of_more_messages_than_a_chunk_comes_whole_and_in_order(
    node: Node,
) -> None:
    await node.create("C", ack_policy="explicit", max_ack_pending=10_000)
    count = CHUNK_MESSAGES + 10
    await node.publish(*[(f"orders.{i}", b"%d" % i) for i in range(count)])
    await node.fetch("C", "_INBOX.a", body(batch=count, no_wait=True))
    await node.outbox.until(lambda: node.service.pulls.waiting_count(STREAM, "C") == 0)
    msgs = node.outbox.messages("_INBOX.a")
    assert [m[3] for m in msgs] == [b"%d" % i for i in range(count)]
    assert node.outbox.writes["_INBOX.a"][:2] == [CHUNK_MESSAGES, 10]
    # Its batch full: no 404 after it, as nats-server sends none.
    assert node.outbox.statuses("_INBOX.a") == []


async def test_a_client_that_does_not_read_holds_up_no_other_request(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await node.publish(*[(f"orders.{i}", bytes([i]) * BIG) for i in range(4)])
    node.outbox.reading.clear()
    await node.fetch("C", "_INBOX.slow", body(batch=3, expires=60_000_000_000))
    await node.outbox.until(lambda: len(node.outbox.messages("_INBOX.slow")) == 1)
    # The slow client's request waits for it to read; the next request is served meanwhile.
    await node.fetch("C", "_INBOX.next", body(batch=1, expires=60_000_000_000))
    await node.outbox.until(lambda: len(node.outbox.messages("_INBOX.next")) == 1)
    assert node.outbox.messages("_INBOX.next")[0][3][:1] == b"\1"
    assert len(node.outbox.messages("_INBOX.slow")) == 1
    node.outbox.reading.set()
    await node.outbox.until(lambda: node.service.pulls.waiting_count(STREAM, "C") == 0)
    assert [m[3][:1] for m in node.outbox.messages("_INBOX.slow")] == [b"\0", b"\2", b"\3"]
