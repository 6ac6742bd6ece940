"""Acks: parsed from their subject and body as nats-server reads them, committed in batches."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infinistream.consumer.acks import (
    AckBatcher,
    AckMessage,
    PlainAckRun,
    Queued,
    parse_ack,
    parse_plain_acks,
)
from infinistream.consumer.progress import ACK, NAK, NEXT, PROGRESS, TERM
from infinistream.consumer.store import LoadedConsumer

from .harness import STREAM, Node, make_node


def test_v1_subject() -> None:
    msg = parse_ack("$JS.ACK.ORDERS.worker.2.15.31.1700000000000000000.4", b"")
    assert msg is not None
    assert (msg.stream, msg.consumer) == ("ORDERS", "worker")
    assert (msg.kind, msg.deliveries, msg.stream_seq, msg.consumer_seq) == (
        ACK,
        2,
        15,
        31,
    )
    assert msg.reply is None


def test_v2_subject_with_domain_and_account_hash() -> None:
    subject = "$JS.ACK.hub.ACCHASH.ORDERS.worker.1.7.9.1700000000000000000.0.rand"
    msg = parse_ack(subject, b"+ACK")
    assert msg is not None
    assert (msg.stream, msg.consumer) == ("ORDERS", "worker")
    assert (msg.deliveries, msg.stream_seq, msg.consumer_seq) == (1, 7, 9)


@pytest.mark.parametrize(
    "subject",
    [
        "$JS.ACK.ORDERS.worker.1.x.9.1.0",  # not a number
        "$JS.ACK.ORDERS.worker.1.-7.9.1.0",  # signed
        "$JS.ACK.ORDERS.worker.1..9.1.0",  # empty token
        "$JS.ACK.ORDERS.worker.\u0661.7.9.1.0",  # a digit, but not ASCII
        "$JS.ACK.ORDERS.worker.1.7",  # too short
        "$JS.ACK.ORDERS.worker.1.7.9.1.0.extra.more",  # ten or eleven tokens: neither form
    ],
)
def test_malformed_subjects_are_ignored(subject: str) -> None:
    assert parse_ack(subject, b"") is None


@pytest.mark.parametrize(
    ("body", "kind", "delay"),
    [
        (b"", ACK, None),
        (b"+ACK", ACK, None),
        (b" +ACK \r\n", ACK, None),
        (b"+OK", ACK, None),
        (b"-NAK", NAK, None),
        (b'-NAK {"delay": 2000000000}', NAK, 2_000_000_000),
        (b"-NAK 1.5s", NAK, 1_500_000_000),
        (b"+WPI", PROGRESS, None),
        (b"+TERM", TERM, None),
        (b"+TERM reason given", TERM, None),
        (b"+NXT", NEXT, None),
        (b'+NXT {"batch": 3}', NEXT, None),
    ],
)
def test_bodies(body: bytes, kind: str, delay: int | None) -> None:
    msg = parse_ack("$JS.ACK.S.C.1.2.3.4.5", body)
    assert msg is not None
    assert (msg.kind, msg.delay) == (kind, delay)
    assert msg.body == body


def test_unknown_body_is_ignored() -> None:
    assert parse_ack("$JS.ACK.S.C.1.2.3.4.5", b"+MAYBE") is None


MALFORMED = [
    "$JS.ACK.ORDERS.worker.1.x.9.1.0",
    "$JS.ACK.ORDERS.worker.\u0661.7.9.1.0",
    "$JS.ACK.ORDERS.worker.1.7",
    "$JS.ACK.ORDERS.worker.1.7.9.1.0.extra.more",
]


def acks_of(queued: list[Queued]) -> list[tuple[str, str, str, int, int]]:
    """What each ack says (a run's one by one), its delivery count aside."""
    out = []
    for q in queued:
        if isinstance(q, PlainAckRun):
            out += [(ACK, q.stream, q.consumer, a.stream_seq, a.consumer_seq) for a in q.each()]
        else:
            out.append((q.kind, q.stream, q.consumer, q.stream_seq, q.consumer_seq))
    return out


def test_plain_acks_in_one_pass() -> None:
    subjects = [f"$JS.ACK.ORDERS.worker.1.{n}.{n + 10}.1700000000000000000.0" for n in range(5)]
    msgs = parse_plain_acks(subjects)
    assert msgs == [PlainAckRun(list(range(5)), list(range(10, 15)), "ORDERS", "worker")]
    assert acks_of(msgs) == [(ACK, "ORDERS", "worker", n, n + 10) for n in range(5)]


def test_plain_acks_with_leading_zeros_are_one_run() -> None:
    subjects = [f"$JS.ACK.ORDERS.worker.1.0{n}.00{n + 10}.1700000000000000000.0" for n in range(3)]
    msgs = parse_plain_acks(subjects)
    assert msgs == [PlainAckRun([0, 1, 2], [10, 11, 12], "ORDERS", "worker")]


def test_plain_acks_with_any_timestamp_and_pending_are_one_run() -> None:
    # nats-server reads neither: a run whose last two tokens are not numbers is still a run.
    subjects = [f"$JS.ACK.ORDERS.worker.1.{n}.{n + 10}.ts{n}." for n in range(3)]
    msgs = parse_plain_acks(subjects)
    assert msgs == [PlainAckRun([0, 1, 2], [10, 11, 12], "ORDERS", "worker")]


def test_plain_acks_of_other_forms_are_parsed_one_by_one() -> None:
    v2 = "$JS.ACK.hub.ACCHASH.ORDERS.worker.1.7.9.1700000000000000000.0.rand"
    v1 = "$JS.ACK.ORDERS.worker.1.8.10.1700000000000000000.0"
    msgs = parse_plain_acks([v1, *MALFORMED, v2, v1])
    assert all(isinstance(m, AckMessage) for m in msgs)
    assert [m[3:] for m in acks_of(msgs)] == [(8, 10), (7, 9), (8, 10)]


def test_a_subject_holding_a_line_break_is_parsed_alone() -> None:
    v1 = "$JS.ACK.ORDERS.worker.1.8.10.1700000000000000000.0"
    broken = "$JS.ACK.ORDERS.worker.1.9.11.1700000000000000000.0\n1.2.3.4.5"
    msgs = parse_plain_acks([v1, broken])
    assert msgs == [m for s in [v1, broken] if (m := parse_ack(s, b"")) is not None]


tokens = st.sampled_from(
    ["ORDERS", "w", "", "1", "12", "07", "x", "\u0661", "-3", "0.5", "\n", "1\n$JS.ACK.O"]
)


@given(st.lists(st.lists(tokens, min_size=7, max_size=12).map(".".join), max_size=8))
def test_plain_acks_are_parse_ack_of_each(tails: list[str]) -> None:
    subjects = ["$JS.ACK." + tail for tail in tails]
    expected = [m for s in subjects if (m := parse_ack(s, b"")) is not None]
    parsed = parse_plain_acks(subjects)
    assert acks_of(parsed) == acks_of(list(expected))
    # Parsed one by one, each is parse_ack's in full.
    assert [m for m in parsed if isinstance(m, AckMessage)] in ([], expected)


# -- committing -----------------------------------------------------------------------------------


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = await make_node(tmp_path / "meta.db")
    yield n
    await n.close()


async def delivered(node: Node, name: str, n: int) -> None:
    """`n` messages published and handed out to one request."""
    await node.publish(*[(f"orders.{i}", b"%d" % i) for i in range(n)])
    await node.fetch(name, "_INBOX.f", b'{"batch": %d}' % n)
    await node.outbox.until(lambda: len(node.outbox.messages("_INBOX.f")) == n)
    pulls = node.service.pulls.active.get((STREAM, name))
    if pulls is not None and pulls.task is not None:
        await pulls.task  # no loop left to take the acks: they commit on their own


async def test_acks_with_no_loop_to_take_them_commit_in_one_batch(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await delivered(node, "C", 5)
    commits = node.store.commits
    node.outbox.subscribed.add("_INBOX.ack")
    for msg in node.outbox.messages("_INBOX.f")[:-1]:
        node.ack(msg)
    node.ack(node.outbox.messages("_INBOX.f")[-1], reply="_INBOX.ack")
    await node.outbox.until(lambda: bool(node.outbox.at("_INBOX.ack")))
    assert node.store.commits == commits + 1
    loaded = await node.store.load(STREAM, "C")
    assert loaded is not None and loaded.state.pending == {}


async def test_an_ack_past_what_was_delivered_is_not_answered(node: Node) -> None:
    await node.create("C", ack_policy="explicit")
    await delivered(node, "C", 1)
    (msg,) = node.outbox.messages("_INBOX.f")
    future = (msg[0], b"$JS.ACK.ORDERS.C.1.9.9.0.0", msg[2], msg[3])
    node.outbox.subscribed.add("_INBOX.ack")
    node.ack(future, reply="_INBOX.ack")
    node.ack(msg, reply="_INBOX.ack")
    await node.outbox.until(lambda: bool(node.outbox.at("_INBOX.ack")))
    await node.service.acks.drain()
    assert len(node.outbox.at("_INBOX.ack")) == 1


async def test_acks_for_an_ack_none_consumer_are_answered_as_unserved(node: Node) -> None:
    await node.create("C", ack_policy="none")
    await delivered(node, "C", 1)
    (msg,) = node.outbox.messages("_INBOX.f")
    node.ack(msg, reply="_INBOX.ack")
    await node.service.acks.drain()
    assert node.outbox.unserved == ["_INBOX.ack"]


async def test_acks_for_a_deleted_consumer_are_answered_as_unserved(node: Node) -> None:
    loaded = await node.create("C", ack_policy="explicit")
    await delivered(node, "C", 1)
    (msg,) = node.outbox.messages("_INBOX.f")
    assert await node.service.delete(loaded)
    node.ack(msg, reply="_INBOX.ack")
    await node.service.acks.drain()
    assert node.outbox.unserved == ["_INBOX.ack"]


async def test_acks_to_made_up_consumers_leave_nothing_behind(node: Node) -> None:
    """Nothing is created or kept for a consumer that does not exist: an ack to one is
    answered as unserved, and the batcher's queues and tasks end empty however many there
    were (they once kept a finished task per made-up consumer, for good)."""
    acks = node.service.acks
    node.service.ack(
        "$JS.ACK.ORDERS.made-up.1.1.1.0.0", "_INBOX.a", b"", node.outbox.unserved.append
    )
    for n in range(2_000):
        node.service.ack(
            f"$JS.ACK.ORDERS.made-up-{n}.1.1.1.0.0", None, b"", node.outbox.unserved.append
        )
        node.service.ack(f"$JS.ACK.NOSTREAM.c{n}.1.1.1.0.0", None, b"", node.outbox.unserved.append)
    node.service.plain_acks([f"$JS.ACK.ORDERS.plain-{n}.1.1.1.0.0" for n in range(2_000)])
    await acks.drain()
    assert node.outbox.unserved == ["_INBOX.a"]
    assert (acks._queues, acks._tasks, acks._hurry) == ({}, {}, {})
    assert len(node.store._committed) == 0


async def test_runs_of_plain_acks_in_a_row_are_queued_as_one(node: Node) -> None:
    """A client's acks come a few per read: a loop's next claim takes them as one run, and an
    ack of another kind between two runs keeps them apart, in order."""

    async def committed(loaded: LoadedConsumer, batch: list[Queued]) -> None:
        pass

    acks = AckBatcher(
        node.store, committed=committed, loop_takes=lambda s, c: True, may_linger=lambda s: True
    )

    def tails(*seqs: int) -> list[str]:
        return [f"$JS.ACK.ORDERS.C.1.{n}.{n + 10}.0.0" for n in seqs]

    acks.add_many(parse_plain_acks(tails(1, 2)))
    acks.add_many(parse_plain_acks(tails(3)))
    nak = parse_ack("$JS.ACK.ORDERS.C.1.4.14.0.0", b"-NAK")
    assert nak is not None
    acks.add(nak)
    acks.add_many(parse_plain_acks(tails(5, 6)))
    acks.add_many(parse_plain_acks(tails(7)))
    assert acks.take((STREAM, "C")) == [
        PlainAckRun([1, 2, 3], [11, 12, 13], "ORDERS", "C"),
        nak,
        PlainAckRun([5, 6, 7], [15, 16, 17], "ORDERS", "C"),
    ]


def test_numbers_of_any_length_wrap_as_nats_server_reads_them() -> None:
    # parseAckReplyNum multiplies in an int64: past 64 bits it wraps, whatever the length.
    huge = "9" * 5000
    msg = parse_ack(f"$JS.ACK.S.C.1.{huge}.3.0.0", b"")
    assert msg is not None
    assert msg.stream_seq == (10**5000 - 1) % (1 << 64) == (1 << 64) - 1
    assert (msg.deliveries, msg.consumer_seq) == (1, 3)


def test_plain_acks_with_long_numbers_wrap_too() -> None:
    subjects = [f"$JS.ACK.S.C.1.{'9' * 5000}.3.0.0", "$JS.ACK.S.C.1.2.3.0.0"]
    assert [m[3] for m in acks_of(parse_plain_acks(subjects))] == [(1 << 64) - 1, 2]
