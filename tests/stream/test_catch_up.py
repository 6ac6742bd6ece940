"""An agent catches up with a stream however fast other agents commit to it.

Two agents share one SQLite file. Agent B reads through `Churning`, a metadata store that lets
agent A commit to the stream just before each of B's reads of the stream's index: the worst
interleaving there is, and what a stream taking commits 150 times a second does to a reader
that needs many reads. B must still open the stream, catch up after falling behind (a metadata
link that was cut while A went on publishing), and get its own publish acknowledged, in a
bounded number of reads: the tests count B's reads and A's commits, never seconds.
"""

from __future__ import annotations

from array import array
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from infinistream.metadata import (
    Item,
    MetadataStore,
    Op,
    Put,
    Read,
    Snapshot,
    SqliteMetadataStore,
)
from infinistream.stream import records
from infinistream.stream.publish_rules import Publish
from infinistream.stream.records import (
    IndexEntry,
    StreamKeys,
    StreamState,
)
from support.committers import CommittingAgent, Forwarding, create_stream

GROUP = "g"
# Past this many reads of one operation, B is taken to be chasing A's commits for ever.
GIVE_UP = 500


class ReadForEver(Exception):
    pass


class Churning(Forwarding):
    """Agent B's metadata store: counts B's reads and, while `churn` is set, runs it (agent A
    committing) just before each read of the stream's index (not before reads of single keys
    by name, which is how the committer reads a stream's state)."""

    def __init__(self, inner: MetadataStore) -> None:
        super().__init__(inner)
        self.reads = 0
        self.churn: Any = None

    async def _read(self) -> None:
        self.reads += 1
        if self.reads > GIVE_UP:
            raise ReadForEver(f"{self.reads} reads and still behind")
        if self.churn is not None:
            await self.churn()

    async def get(self, key: str) -> Item | None:
        await self._read()
        return await self.inner.get(key)

    async def get_many(self, keys: list[str]) -> dict[str, Item]:
        self.reads += 1
        return await self.inner.get_many(keys)

    async def range(self, prefix: str, **kw: Any) -> list[Item]:
        await self._read()
        return await self.inner.range(prefix, **kw)

    async def snapshot(self, reads: list[Read]) -> Snapshot:
        await self._read()
        return await self.inner.snapshot(reads)


class Agent(CommittingAgent):
    async def publish(self, n: int = 1) -> list[int]:
        return await self.commit([Publish(f"s.{i % 7}", None, 3, 20, "reply") for i in range(n)])


@pytest.fixture
async def agents(tmp_path: Path) -> AsyncIterator[tuple[Agent, Agent, Churning]]:
    meta_a = SqliteMetadataStore(tmp_path / "meta.db")
    meta_b = Churning(SqliteMetadataStore(tmp_path / "meta.db"))
    await create_stream(meta_a, GROUP, "S")
    a, b = Agent(meta_a, GROUP, "a"), Agent(meta_b, GROUP, "b")
    await a.catalog.refresh(force=True)
    await b.catalog.refresh(force=True)
    yield a, b, meta_b
    await meta_a.close()
    await meta_b.close()


def commits_of(a: Agent) -> Any:
    """Agent A committing one publish each time it is called; how many so far in `.count`."""

    async def commit() -> None:
        commit.count += 1  # type: ignore[attr-defined]
        await a.publish()

    commit.count = 0  # type: ignore[attr-defined]
    return commit


async def grow(meta: MetadataStore, entries: int) -> None:
    """The stream as `entries` commits of one message each would leave it, in one write."""
    keys = StreamKeys(GROUP, "S")
    one = array("I", [0]).tobytes()
    ops: list[Op] = [
        Put(
            keys.index(seq),
            records.encode(
                IndexEntry(
                    obj=f"{GROUP}/objects/l0/{seq:08d}-old.iso",
                    offset=8,
                    length=20,
                    first_seq=seq,
                    ts=seq,
                    subjects=[f"s.{seq % 7}"],
                    subject_ids=one,
                    lengths=array("I", [20]).tobytes(),
                )
            ),
        )
        for seq in range(1, entries + 1)
    ]
    state = StreamState(
        uid="u", first_seq=1, last_seq=entries, last_ts=entries, msgs=entries, bytes=20 * entries
    )
    state.num_subjects = min(entries, 7)
    ops.append(Put(keys.state, records.encode(state)))
    assert (await meta.txn([], ops)).succeeded


async def test_a_stream_under_constant_commits_opens(agents: tuple[Agent, Agent, Churning]) -> None:
    a, b, meta_b = agents
    # 10,000 index entries, as 10,000 commits of A leave them.
    await grow(a.meta, 10_000)
    meta_b.churn = churn = commits_of(a)
    meta_b.reads = 0
    view = await b.catalog.view("S")
    assert view is not None
    # Whatever A committed while B read is in B's view or after it, never half of it.
    assert view.last_seq >= 10_000 and view.msgs == view.last_seq
    assert meta_b.reads <= 3, f"{meta_b.reads} reads for {churn.count} commits of A"
    # And B finds a message through its view: a page of the index, read in one snapshot
    # however many commits A makes meanwhile.
    meta_b.reads = 0
    seg = await b.catalog.answer(lambda: view.segment_for(10_000))
    assert seg is not None and seg.first == 10_000
    assert meta_b.reads <= 2, f"{meta_b.reads} reads for {churn.count} commits of A"


async def test_an_agent_that_fell_behind_catches_up_and_acks(
    agents: tuple[Agent, Agent, Churning],
) -> None:
    a, b, meta_b = agents
    await grow(a.meta, 3)
    view = await b.catalog.view("S")
    assert view is not None and view.last_seq == 3
    # B's metadata link is cut while A goes on publishing: B's view is 5,000 commits behind.
    await grow(a.meta, 5_003)
    meta_b.churn = churn = commits_of(a)
    meta_b.reads = 0
    # The link heals and B publishes at once, A committing before each of B's index reads.
    seqs = await b.publish(2)
    assert len(seqs) == 2 and seqs[0] > 5_003 and seqs[1] == seqs[0] + 1
    assert meta_b.reads <= 8, f"{meta_b.reads} reads for {churn.count} commits of A"
    meta_b.churn = None
    view = await b.catalog.view("S")
    assert view is not None and view.msgs == view.last_seq == 5_005 + churn.count
