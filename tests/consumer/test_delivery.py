"""Claimed deliveries as the messages that go on the wire: ack replies, runs, damaged records."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from infinistream.consumer.delivery import (
    MAX_RUN_GAP,
    move_past_damaged,
    outgoing,
    read_deliveries,
    wire_size,
)
from infinistream.consumer.progress import TERM, Delivery
from infinistream.storage import ObjectStore, SectionCache
from infinistream.stream.damage import DamageLog
from infinistream.stream.reader import MessageReader
from infinistream.stream.view import StreamView

from .harness import STREAM, Node, make_node


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = await make_node(tmp_path / "meta.db")
    yield n
    await n.close()


async def view_of(node: Node) -> StreamView:
    view = await node.catalog.view(STREAM)
    assert view is not None
    return view


def fresh(n: int, first: int = 1) -> list[Delivery]:
    """First deliveries of stream sequences first.., as consumer sequences 1.."""
    return [Delivery(first + i, 1 + i, 1) for i in range(n)]


async def test_each_message_carries_its_ack_reply_and_own_subject(node: Node) -> None:
    loaded = await node.create("C", ack_policy="explicit")
    await node.publish(("orders.a", b"1"), ("orders.b", b"2"), ("orders.c", b"3"))
    view = await view_of(node)
    # A redelivery of 1 and the first delivery of 2, claimed; 3 is still to come.
    loaded.state.stream_seq = 2
    deliveries = [Delivery(1, 7, 2), Delivery(2, 8, 1)]
    out = await node.catalog.answer_async(
        lambda: outgoing(
            node.service.reader, STREAM, "C", loaded.record.config, loaded.state, view, deliveries
        )
    )
    assert out.damaged == []
    assert [(m[0], m[3]) for m in out.messages] == [(b"orders.a", b"1"), (b"orders.b", b"2")]
    ts = await node.catalog.answer(lambda: [view.ts_of(1), view.ts_of(2)])
    # Pending after each: the one not handed out, plus first deliveries later in the batch.
    assert [m[1] for m in out.messages] == [
        b"$JS.ACK.ORDERS.C.2.1.7.%d.2" % ts[0],
        b"$JS.ACK.ORDERS.C.1.2.8.%d.1" % ts[1],
    ]


async def test_an_ack_reply_names_its_consumer_as_it_is_spelled(node: Node) -> None:
    # The names go into the reply's format: a `%` in one is written as it is.
    loaded = await node.create("C%d%%", ack_policy="explicit")
    await node.publish(("orders.a", b"1"))
    view = await view_of(node)
    loaded.state.stream_seq = 1
    out = await node.catalog.answer_async(
        lambda: outgoing(
            node.service.reader, STREAM, "C%d%%", loaded.record.config, loaded.state, view, fresh(1)
        )
    )
    ts = await node.catalog.answer(lambda: view.ts_of(1))
    assert [m[1] for m in out.messages] == [b"$JS.ACK.ORDERS.C%%d%%%%.1.1.1.%d.0" % ts]


async def test_headers_only_replaces_the_data_by_its_size(node: Node) -> None:
    loaded = await node.create("C", ack_policy="explicit", headers_only=True)
    await node.publish(("orders.a", b"12345"))
    await node.publish(("orders.b", b"678"), headers=b"NATS/1.0\r\nK: v\r\n\r\n")
    view = await view_of(node)
    loaded.state.stream_seq = 2
    out = await node.catalog.answer_async(
        lambda: outgoing(
            node.service.reader, STREAM, "C", loaded.record.config, loaded.state, view, fresh(2)
        )
    )
    assert [(m[2], m[3]) for m in out.messages] == [
        (b"NATS/1.0\r\nNats-Msg-Size: 5\r\n\r\n", b""),
        (b"NATS/1.0\r\nK: v\r\nNats-Msg-Size: 3\r\n\r\n", b""),
    ]


async def test_near_deliveries_are_read_as_a_run_and_far_ones_apart(node: Node) -> None:
    await node.publish(*[(f"orders.{i}", b"%d" % i) for i in range(1, 2 * MAX_RUN_GAP + 1)])
    view = await view_of(node)
    far = 2 * MAX_RUN_GAP
    deliveries = [Delivery(2, 1, 1), Delivery(4, 2, 2), Delivery(far, 3, 1)]
    read = await read_deliveries(node.service.reader, view, deliveries)
    found = zip(read.indices, read.messages, read.deliveries, strict=True)
    assert [(i, parts[0], parts[4], d) for i, parts, d in found] == [
        (0, 2, b"2", deliveries[0]),
        (1, 4, b"4", deliveries[1]),
        (2, far, b"%d" % far, deliveries[2]),
    ]
    assert read.damaged == []


async def damage(path: Path, payload: bytes) -> None:
    """Flip a byte of `payload` where it is stored, as a failing disk would."""
    (obj,) = [p for p in (path / "objects").rglob("*") if p.is_file()]
    data = bytearray(obj.read_bytes())
    at = data.find(payload)
    assert at >= 0
    data[at] ^= 0xFF
    obj.write_bytes(bytes(data))


@pytest.mark.parametrize(("policy", "terminated"), [("explicit", [2]), ("all", [])])
async def test_a_damaged_record_is_not_sent_and_the_consumer_moves_past_it(
    tmp_path: Path, node: Node, policy: str, terminated: list[int]
) -> None:
    loaded = await node.create("C", ack_policy=policy)
    await node.publish(("orders.a", b"first"), ("orders.b", b"second"), ("orders.c", b"third"))
    await damage(tmp_path, b"second")
    # A reader that has not cached this agent's own write, as another agent's.
    damage_log = DamageLog()
    reader = MessageReader(
        ObjectStore.from_url(str(tmp_path / "objects")), SectionCache(1 << 20), damage_log
    )
    view = await view_of(node)
    loaded.state.stream_seq = 3
    deliveries = fresh(3)
    out = await outgoing(reader, STREAM, "C", loaded.record.config, loaded.state, view, deliveries)
    assert [m[3] for m in out.messages] == [b"first", b"third"]
    assert [d.seq for d in out.damaged] == [2]
    acks = node.service.acks
    move_past_damaged(acks, damage_log, STREAM, loaded, deliveries, out.damaged)
    queued = acks.take((STREAM, "C"))
    assert [(a.kind, a.stream_seq) for a in queued] == [(TERM, s) for s in terminated]


def test_wire_size_counts_subject_reply_headers_and_data() -> None:
    assert wire_size((b"orders.a", b"$JS.ACK.x", b"NATS/1.0\r\n\r\n", b"data")) == 8 + 9 + 12 + 4
    assert wire_size(("orders.a", None, None, b"")) == 8
