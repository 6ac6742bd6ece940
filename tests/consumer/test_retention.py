"""Interest and workqueue retention: what a pass removes, given the consumers' states.

tests/e2e/test_retention.py runs the same rules through acks from nats-py, against the states
nats-server shows.
"""

from __future__ import annotations

from pathlib import Path

from infinistream.consumer.store import LoadedConsumer

from .harness import STREAM, Node, make_node


async def live(node: Node) -> list[int]:
    view = await node.catalog.view(STREAM)
    assert view is not None
    return list(view.live_seqs(view.first_seq))


async def acked_up_to(node: Node, name: str, seq: int) -> None:
    """The consumer has had everything up to `seq` delivered and acked."""

    def change(loaded: LoadedConsumer) -> bool:
        state = loaded.state
        state.stream_seq = state.ack_floor_stream = seq
        state.pending.clear()
        return True

    assert (await node.store.change_state(STREAM, name, change)).written


async def test_interest_removes_what_every_interested_consumer_acked(tmp_path: Path) -> None:
    node = await make_node(tmp_path / "meta.db", retention="interest")
    try:
        await node.create("all", ack_policy="explicit")
        await node.create("b", ack_policy="explicit", filter_subject="orders.b")
        await node.publish(("orders.a", b"1"), ("orders.b", b"2"), ("orders.a", b"3"))
        await acked_up_to(node, "all", 3)
        # "b" wants message 2 and has not acked it; nobody else waits for 1 and 3.
        assert await node.service.retention.apply(STREAM) == 2
        assert await live(node) == [2]
        await acked_up_to(node, "b", 2)
        assert await node.service.retention.apply(STREAM) == 1
        assert await live(node) == []
        assert await node.service.retention.apply(STREAM) == 0  # late or twice: harmless
    finally:
        await node.close()


async def test_interest_drops_what_no_consumer_wants(tmp_path: Path) -> None:
    node = await make_node(tmp_path / "meta.db", retention="interest")
    try:
        await node.create("b", ack_policy="explicit", filter_subject="orders.b")
        await node.publish(("orders.a", b"1"), ("orders.b", b"2"))
        # The commit already kept nothing no consumer wants; a pass finds nothing more.
        assert await node.service.retention.apply(STREAM) == 0
        assert await live(node) == [2]
    finally:
        await node.close()


async def test_workqueue_removes_what_its_consumer_acked(tmp_path: Path) -> None:
    node = await make_node(tmp_path / "meta.db", retention="workqueue")
    try:
        await node.create("w", ack_policy="explicit")
        await node.publish(("orders.a", b"1"), ("orders.a", b"2"), ("orders.a", b"3"))
        await acked_up_to(node, "w", 2)
        assert await node.service.retention.apply(STREAM) == 2
        assert await live(node) == [3]
    finally:
        await node.close()


async def test_limits_streams_keep_everything(tmp_path: Path) -> None:
    node = await make_node(tmp_path / "meta.db")
    try:
        await node.create("w", ack_policy="explicit")
        await node.publish(("orders.a", b"1"))
        await acked_up_to(node, "w", 1)
        assert await node.service.retention.apply(STREAM) == 0
        assert await live(node) == [1]
    finally:
        await node.close()
