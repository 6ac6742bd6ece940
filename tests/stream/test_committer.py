"""The committer plans a flush against the stream items it last read or wrote, and reads
them again only when it must: a message id's dedupe entry, a stream it has not seen, or a
compare that failed because someone else changed the stream since.

Two committers share one SQLite file, as two agents of a pool do; the tests count the
committer's reads of the metadata and check the sequences and the state it leaves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from infinistream.jetstream.api import StreamConfig
from infinistream.metadata import (
    Compare,
    Item,
    MetadataStore,
    Op,
    Put,
    Read,
    Snapshot,
    SqliteMetadataStore,
    TxnResult,
)
from infinistream.metadata.kv import ChangeWatch
from infinistream.stream import records
from infinistream.stream.catalog import Catalog
from infinistream.stream.committer import Committer, SectionWrite
from infinistream.stream.config import normalize
from infinistream.stream.publish_rules import Publish
from infinistream.stream.records import StreamKeys, StreamRecord, StreamState, catalog_key

GROUP = "g"
KEYS = StreamKeys(GROUP, "S")


class Counting(MetadataStore):
    """A metadata store that counts `get_many`, the committer's read of a stream's items."""

    def __init__(self, inner: MetadataStore) -> None:
        self.inner = inner
        self.get_many_calls = 0

    async def get(self, key: str) -> Item | None:
        return await self.inner.get(key)

    async def get_many(self, keys: list[str]) -> dict[str, Item]:
        self.get_many_calls += 1
        return await self.inner.get_many(keys)

    async def range(self, prefix: str, **kw: Any) -> list[Item]:
        return await self.inner.range(prefix, **kw)

    async def snapshot(self, reads: list[Read]) -> Snapshot:
        return await self.inner.snapshot(reads)

    async def txn(
        self, compares: list[Compare], ops: list[Op], *, durable: bool = True
    ) -> TxnResult:
        return await self.inner.txn(compares, ops, durable=durable)

    async def revision(self) -> int:
        return await self.inner.revision()

    def watch(self, prefix: str) -> ChangeWatch:
        return self.inner.watch(prefix)

    async def close(self) -> None:
        await self.inner.close()


class Agent:
    """A catalog and committer over one metadata handle, publishing with made-up objects."""

    def __init__(self, meta: Counting, name: str) -> None:
        self.meta = meta
        self.name = name
        self.catalog = Catalog(meta, GROUP)
        self.committer = Committer(meta, self.catalog)
        self.objects = 0

    async def publish(self, n: int = 1, msg_id: str | None = None) -> list[int]:
        headers = f"NATS/1.0\r\nNats-Msg-Id: {msg_id}\r\n\r\n".encode() if msg_id else None
        publishes = [
            Publish("s.1", headers, 3, 20 + (len(headers) if headers else 0), "reply")
            for _ in range(n)
        ]
        self.objects += 1
        obj = f"{GROUP}/objects/l0/{self.objects:08d}-{self.name}.iso"
        section = SectionWrite("S", obj, 8, 20 * n, publishes)
        outcomes = await self.committer.commit_sections([section])
        return [o.seq for o in outcomes["S"]]


async def stream_state(meta: MetadataStore) -> StreamState:
    item = await meta.get(KEYS.state)
    assert item is not None
    return records.decode_state(item.value)


async def put_config(meta: MetadataStore, cfg: StreamConfig) -> None:
    record = records.encode(StreamRecord(config=normalize(cfg), created_ns=1, uid="u"))
    assert (await meta.txn([], [Put(KEYS.config, record)])).succeeded


@pytest.fixture
async def agents(tmp_path: Path) -> AsyncIterator[tuple[Agent, Agent]]:
    meta_a = Counting(SqliteMetadataStore(tmp_path / "meta.db"))
    meta_b = Counting(SqliteMetadataStore(tmp_path / "meta.db"))
    cfg = normalize(StreamConfig(name="S", subjects=["s.>"]))
    await meta_a.txn(
        [],
        [
            Put(KEYS.config, records.encode(StreamRecord(config=cfg, created_ns=1, uid="u"))),
            Put(KEYS.state, records.encode(StreamState(uid="u", first_seq=1, last_seq=0))),
            Put(catalog_key(GROUP), b"1"),
        ],
    )
    a, b = Agent(meta_a, "a"), Agent(meta_b, "b")
    await a.catalog.refresh(force=True)
    await b.catalog.refresh(force=True)
    yield a, b
    await meta_a.close()
    await meta_b.close()


async def test_a_lone_writer_reads_the_stream_once(agents: tuple[Agent, Agent]) -> None:
    a, _ = agents
    # The first commits read the stream, then its subject's record.
    seqs = [await a.publish(2) for _ in range(2)]
    reads = a.meta.get_many_calls
    seqs += [await a.publish(2) for _ in range(8)]
    assert seqs == [[2 * i + 1, 2 * i + 2] for i in range(10)]
    assert a.meta.get_many_calls == reads
    assert a.committer.conflicts == 0
    state = await stream_state(a.meta)
    assert (state.first_seq, state.last_seq, state.msgs) == (1, 20, 20)


async def test_another_agents_commit_is_read_before_the_next(
    agents: tuple[Agent, Agent],
) -> None:
    a, b = agents
    assert await a.publish(2) == [1, 2]
    assert await b.publish(3) == [3, 4, 5]
    reads = a.meta.get_many_calls
    # A's items are stale: its first attempt loses its compare, the next reads and commits.
    assert await a.publish(1) == [6]
    assert a.meta.get_many_calls == reads + 1
    # Not a lost race: a read would have seen B's commit.
    assert a.committer.conflicts == 0
    assert await b.publish(1) == [7]
    assert await a.publish(1) == [8]
    state = await stream_state(a.meta)
    assert (state.last_seq, state.msgs) == (8, 8)


async def test_a_changed_config_is_planned_against(agents: tuple[Agent, Agent]) -> None:
    a, _ = agents
    await a.publish(3)
    await put_config(a.meta, StreamConfig(name="S", subjects=["s.>"], max_msgs=2))
    assert await a.publish(2) == [4, 5]
    state = await stream_state(a.meta)
    # Planned with the stored config, not the one the committer knew: the limit holds.
    assert (state.first_seq, state.last_seq, state.msgs) == (4, 5, 2)


async def test_message_ids_are_always_read(agents: tuple[Agent, Agent]) -> None:
    a, b = agents
    assert await a.publish(1, msg_id="x") == [1]
    reads = a.meta.get_many_calls
    assert await b.publish(1, msg_id="y") == [2]
    # B's dedupe entry is read, whatever A knew of the stream: the repeat is a duplicate.
    assert await a.publish(1, msg_id="y") == [2]
    assert a.meta.get_many_calls > reads
    state = await stream_state(a.meta)
    assert state.last_seq == 2
