"""ConsumerStore.change_state: compare-and-set, and the state it keeps from its own commits.

Two stores on one SQLite file stand for two agents sharing the embedded metadata store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from infinistream.consumer.progress import Ack, apply_ack
from infinistream.consumer.records import ConsumerRecord, ConsumerState, Pending, encode
from infinistream.consumer.requests import ConsumerConfig
from infinistream.consumer.store import ConsumerGone, ConsumerStore, LoadedConsumer
from infinistream.metadata import Delete, Item, Put, SqliteMetadataStore
from infinistream.stream.catalog import Catalog

GROUP = "g"
STREAM, NAME = "ORDERS", "worker"
FAR = 2**62  # a redelivery deadline no test reaches


class CountingStore(SqliteMetadataStore):
    """The real SQLite store, counting the consumer-state reads it serves."""

    reads = 0

    async def get_many(self, keys: list[str]) -> dict[str, Item]:
        self.reads += 1
        return await super().get_many(keys)


@pytest.fixture
async def metas(tmp_path: Path) -> AsyncIterator[tuple[CountingStore, CountingStore]]:
    a, b = CountingStore(tmp_path / "meta.db"), CountingStore(tmp_path / "meta.db")
    yield a, b
    await a.close()
    await b.close()


async def create(store: ConsumerStore, pending: int = 0) -> None:
    keys = store.keys(STREAM, NAME)
    state = ConsumerState(
        uid="u1",
        stream_seq=pending,
        consumer_seq=pending,
        pending={s: Pending(s, 1, FAR, 0, s) for s in range(1, pending + 1)},
    )
    record = ConsumerRecord(config=ConsumerConfig(ack_policy="explicit"), created_ns=0, uid="u1")
    result = await store.meta.txn(
        [], [Put(keys.config, encode(record)), Put(keys.state, encode(state))]
    )
    assert result.succeeded


def stores(metas: tuple[CountingStore, CountingStore]) -> tuple[ConsumerStore, ConsumerStore]:
    a, b = metas
    return ConsumerStore(a, Catalog(a, GROUP)), ConsumerStore(b, Catalog(b, GROUP))


def ack(seq: int) -> Callable[[LoadedConsumer], bool | None]:
    def change(loaded: LoadedConsumer) -> bool | None:
        cfg = loaded.record.config
        return True if apply_ack(loaded.state, cfg, Ack("ack", seq, 1, None, seq), 0) else None

    return change


async def test_a_second_change_starts_from_the_last_commit_without_reading(
    metas: tuple[CountingStore, CountingStore],
) -> None:
    store, _ = stores(metas)
    await create(store, pending=3)
    assert (await store.change_state(STREAM, NAME, ack(1))).written
    reads = metas[0].reads
    assert (await store.change_state(STREAM, NAME, ack(2))).written
    assert metas[0].reads == reads
    fresh = await store.load(STREAM, NAME)
    assert fresh is not None and sorted(fresh.state.pending) == [3]


async def test_another_agents_commit_is_read_before_changing(
    metas: tuple[CountingStore, CountingStore],
) -> None:
    mine, other = stores(metas)
    await create(mine, pending=3)
    assert (await mine.change_state(STREAM, NAME, ack(1))).written
    assert (await other.change_state(STREAM, NAME, ack(2))).written
    assert (await mine.change_state(STREAM, NAME, ack(3))).written
    fresh = await mine.load(STREAM, NAME)
    assert fresh is not None and fresh.state.pending == {}
    assert mine.conflicts == 1


async def test_nothing_to_write_is_only_believed_of_a_fresh_read(
    metas: tuple[CountingStore, CountingStore],
) -> None:
    mine, other = stores(metas)
    await create(mine, pending=2)
    assert (await mine.change_state(STREAM, NAME, ack(1))).written

    def deliver_three(loaded: LoadedConsumer) -> bool | None:
        loaded.state.stream_seq = loaded.state.consumer_seq = 3
        loaded.state.pending[3] = Pending(3, 1, FAR, 0, 3)
        return True

    # Another agent hands out message 3; an ack for it is unknown to this agent's last commit.
    assert (await other.change_state(STREAM, NAME, deliver_three)).written
    assert (await mine.change_state(STREAM, NAME, ack(3))).written
    fresh = await mine.load(STREAM, NAME)
    assert fresh is not None and sorted(fresh.state.pending) == [2]


async def test_changing_what_was_returned_does_not_change_what_is_kept(
    metas: tuple[CountingStore, CountingStore],
) -> None:
    store, _ = stores(metas)
    await create(store, pending=2)
    committed = await store.change_state(STREAM, NAME, ack(1))
    assert committed.written
    committed.loaded.state.pending.clear()  # a caller's private business, never committed
    assert (await store.change_state(STREAM, NAME, ack(2))).written
    fresh = await store.load(STREAM, NAME)
    assert fresh is not None and fresh.state.pending == {} and fresh.state.ack_floor_stream == 2


async def test_a_deleted_consumer_is_gone_even_when_kept(
    metas: tuple[CountingStore, CountingStore],
) -> None:
    store, _ = stores(metas)
    await create(store, pending=2)
    assert (await store.change_state(STREAM, NAME, ack(1))).written
    keys = store.keys(STREAM, NAME)
    await metas[1].txn([], [Delete(keys.config), Delete(keys.state)])
    with pytest.raises(ConsumerGone):
        await store.change_state(STREAM, NAME, ack(2))


async def test_the_record_of_the_last_commit_is_known_until_forgotten(
    metas: tuple[CountingStore, CountingStore],
) -> None:
    store, _ = stores(metas)
    await create(store, pending=1)
    assert store.known_record(STREAM, NAME) is None  # nothing committed here yet
    assert (await store.change_state(STREAM, NAME, ack(1))).written
    known = store.known_record(STREAM, NAME)
    assert known is not None and known.uid == "u1"
    store.forget(STREAM, NAME)
    assert store.known_record(STREAM, NAME) is None


async def test_nothing_to_write_returns_the_consumer_as_read_and_the_result(
    metas: tuple[CountingStore, CountingStore],
) -> None:
    store, _ = stores(metas)
    await create(store, pending=2)
    before = await store.load(STREAM, NAME)
    assert before is not None

    def look(loaded: LoadedConsumer) -> tuple[int, ...]:
        return tuple(sorted(loaded.state.pending))

    seen = await store.change_state(STREAM, NAME, look, writes=lambda _: False)
    assert (seen.written, seen.result) == (False, (1, 2))
    assert seen.loaded.state_rev == before.state_rev
    assert (await store.change_state(STREAM, NAME, ack(5))).written is False
    after = await store.load(STREAM, NAME)
    assert after is not None and after.state_rev == before.state_rev
