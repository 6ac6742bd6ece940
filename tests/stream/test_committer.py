"""The committer plans a flush against the stream items it last read or wrote, and reads
them again only when it must: a message id's dedupe entry, a stream it has not seen, or a
compare that failed because someone else changed the stream since.

Two committers share one SQLite file, as two agents of a pool do; the tests count the
committer's reads of the metadata and check the sequences and the state it leaves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from infinistream.jetstream.api import StreamConfig
from infinistream.metadata import (
    Item,
    MetadataStore,
    Put,
    SqliteMetadataStore,
)
from infinistream.stream import records
from infinistream.stream.config import normalize
from infinistream.stream.publish_rules import Publish
from infinistream.stream.records import StreamKeys, StreamRecord, StreamState
from support.committers import CommittingAgent, Forwarding, create_stream

GROUP = "g"
KEYS = StreamKeys(GROUP, "S")


class Counting(Forwarding):
    """A metadata store that counts `get_many`, the committer's read of a stream's items."""

    def __init__(self, inner: MetadataStore) -> None:
        super().__init__(inner)
        self.get_many_calls = 0

    async def get_many(self, keys: list[str]) -> dict[str, Item]:
        self.get_many_calls += 1
        return await self.inner.get_many(keys)


class Agent(CommittingAgent):
    meta: Counting

    async def publish(self, n: int = 1, msg_id: str | None = None) -> list[int]:
        headers = f"NATS/1.0\r\nNats-Msg-Id: {msg_id}\r\n\r\n".encode() if msg_id else None
        size = 20 + (len(headers) if headers else 0)
        return await self.commit([Publish("s.1", headers, 3, size, "reply") for _ in range(n)])


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
    await create_stream(meta_a, GROUP, "S")
    a, b = Agent(meta_a, GROUP, "a"), Agent(meta_b, GROUP, "b")
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
