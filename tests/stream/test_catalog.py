"""The catalog follows the chain of catalog markers: one change since it last looked costs a
read of that stream's record, not a listing of every stream."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import msgspec
import pytest

from infinistream.jetstream.api import StreamConfig
from infinistream.metadata import (
    Compare,
    Delete,
    Op,
    Put,
    SqliteMetadataStore,
)
from infinistream.pipeline.compaction.swap import swap_entries
from infinistream.stream import records
from infinistream.stream.catalog import Catalog, StreamEntry
from infinistream.stream.loader import StreamGone
from infinistream.stream.publish_rules import Publish
from infinistream.stream.records import (
    StreamRecord,
    catalog_change,
    catalog_key,
    parse_catalog_change,
    streams_prefix,
)
from infinistream.stream.sections import OPEN
from infinistream.stream.view import StreamView
from support.committers import CommittingAgent, Reads, create_stream


class CountingStore(SqliteMetadataStore):
    """A real SQLite store that counts its range reads (the listings)."""

    ranges = 0

    async def range(self, prefix: str, **kwargs: object) -> list:  # type: ignore[override]
        self.ranges += 1
        return await super().range(prefix, **kwargs)  # type: ignore[arg-type]


async def change(meta: SqliteMetadataStore, name: str, *, delete: bool = False) -> None:
    """What StreamApi does to the catalog: the record and the marker, compared, in one txn."""
    marker = await meta.get(catalog_key("g"))
    previous = marker.mod_revision if marker else 0
    key = streams_prefix("g") + name
    record = StreamRecord(
        config=StreamConfig(name=name, subjects=[f"{name}.>"]), created_ns=1, uid=name
    )
    op = Delete(key) if delete else Put(key, records.encode(record))
    result = await meta.txn(
        [Compare(catalog_key("g"), previous)],
        [op, Put(catalog_key("g"), catalog_change(previous, name))],
    )
    assert result.succeeded


async def test_one_change_reads_one_record_and_a_gap_lists_them_all(tmp_path: Path) -> None:
    writer = SqliteMetadataStore(tmp_path / "meta.db")
    reader = CountingStore(tmp_path / "meta.db")
    catalog = Catalog(reader, "g")
    try:
        await change(writer, "A")
        await catalog.refresh()
        assert set(catalog.streams) == {"A"}
        listed = reader.ranges

        await change(writer, "B")  # one change: followed along the chain
        assert await catalog.refresh()
        assert set(catalog.streams) == {"A", "B"}
        assert catalog.stream_for_subject("B.x") == "B"
        await change(writer, "A", delete=True)
        assert await catalog.refresh()
        assert set(catalog.streams) == {"B"}
        assert catalog.stream_for_subject("A.x") is None
        assert reader.ranges == listed

        await change(writer, "C")  # two changes unseen: the chain is broken, list them all
        await change(writer, "D")
        assert await catalog.refresh()
        assert set(catalog.streams) == {"B", "C", "D"}
        assert reader.ranges == listed + 1
    finally:
        await writer.close()
        await reader.close()


def test_marker_values() -> None:
    assert parse_catalog_change(catalog_change(41, "ORDERS")) == (41, "ORDERS")
    # Markers written before the chain (random hex) read as unknown: a full listing.
    assert parse_catalog_change(b"9f86d081884c7d65") is None
    assert parse_catalog_change(b"") is None


async def test_a_selection_is_worked_out_again_only_when_the_catalog_changes(
    tmp_path: Path,
) -> None:
    meta = SqliteMetadataStore(tmp_path / "meta.db")
    catalog = Catalog(meta, "g")
    looked: list[str] = []

    def keep(entry: StreamEntry) -> bool:
        looked.append(entry.name)
        return entry.name.startswith("K")

    try:
        await change(meta, "K1")
        await change(meta, "X1")
        await catalog.refresh()
        assert [e.name for e in catalog.selected("k", keep)] == ["K1"]
        assert [e.name for e in catalog.selected("k", keep)] == ["K1"]
        assert sorted(looked) == ["K1", "X1"]  # once per stream, not once per call
        await change(meta, "K2")
        await catalog.refresh()
        assert sorted(e.name for e in catalog.selected("k", keep)) == ["K1", "K2"]
    finally:
        await meta.close()


def publishes(n: int) -> list[Publish]:
    return [Publish("s.1", None, 3, 20, "reply") for _ in range(n)]


async def last_seq(view: StreamView) -> int:
    """A question that reads nothing of the index."""
    return view.last_seq


async def section_first(seq: int, view: StreamView) -> int:
    """A question that reads the page of the index holding `seq`."""
    section = view.section_at(seq, lone=True)
    assert section is not None
    return section.first


async def test_ask_reads_the_marker_and_state_with_what_is_missing(tmp_path: Path) -> None:
    writer = SqliteMetadataStore(tmp_path / "meta.db")
    meta = Reads(SqliteMetadataStore(tmp_path / "meta.db"))
    try:
        await create_stream(writer, "g", "S")
        agent = CommittingAgent(writer, "g", "a")
        for _ in range(3):
            await agent.commit(publishes(4))  # sections 1-4, 5-8, 9-12
        catalog = Catalog(meta, "g")
        await catalog.refresh(force=True)
        meta.reads = 0
        # Not opened yet: the view starts from a state that knows nothing, replaced by the
        # stream's, read with the page holding 6.
        assert await catalog.ask("S", partial(section_first, 6)) == 5
        assert meta.reads == 1
        view = catalog.cached_view("S")
        assert view is not None and (view.first_seq, view.last_seq) == (1, 12)
        # A question that reads nothing is answered at the state read after it.
        await agent.commit(publishes(2))
        assert await catalog.ask("S", last_seq) == 14
        assert meta.reads == 2
        assert catalog.cached_view("S") is view
        # Another page, and a stream created meanwhile: the catalog learns of it from the
        # marker read with the page (then reads the new stream's record).
        await change(writer, "B")
        assert await catalog.ask("S", partial(section_first, 10)) == 9
        assert "B" in catalog.streams
        assert meta.reads == 4
    finally:
        await writer.close()
        await meta.close()


class Replaced(Exception):
    """What reading a message through a view behind its stream may meet: its object rewritten
    by compaction or erase, and the old one deleted by the janitor."""


async def test_ask_fails_only_at_the_streams_state(tmp_path: Path) -> None:
    writer = SqliteMetadataStore(tmp_path / "meta.db")
    meta = SqliteMetadataStore(tmp_path / "meta.db")
    try:
        await create_stream(writer, "g", "S")
        agent = CommittingAgent(writer, "g", "a")
        await agent.commit(publishes(4))
        catalog = Catalog(meta, "g")
        await catalog.refresh(force=True)
        assert await catalog.ask("S", last_seq) == 4
        asked: list[int] = []

        async def behind_fails(view: StreamView) -> int:
            asked.append(view.last_seq)
            if view.last_seq < 6:
                raise Replaced()
            return view.last_seq

        # Another agent moved the stream on: the failure of the view it held is not the
        # stream's, so the question is asked again of the stream's state.
        await agent.commit(publishes(2))
        assert await catalog.ask("S", behind_fails) == 6
        assert asked == [4, 6]

        async def fails(view: StreamView) -> int:
            asked.append(view.last_seq)
            raise Replaced()

        # At the stream's state, a failure is the answer.
        asked.clear()
        with pytest.raises(Replaced):
            await catalog.ask("S", fails)
        assert asked == [6]
    finally:
        await writer.close()
        await meta.close()


async def test_ask_of_a_view_not_opened_never_answers_from_its_unread_state(
    tmp_path: Path,
) -> None:
    meta = SqliteMetadataStore(tmp_path / "meta.db")
    try:
        await create_stream(meta, "g", "S")
        await CommittingAgent(meta, "g", "a").commit(publishes(3))
        catalog = Catalog(meta, "g")
        await catalog.refresh(force=True)
        assert await catalog.ask("S", last_seq) == 3
        view = catalog.cached_view("S")
        assert view is not None and view.last_seq == 3 and view.tombstones() == set()
    finally:
        await meta.close()


async def test_ask_of_a_stream_gone_or_never_made(tmp_path: Path) -> None:
    writer = SqliteMetadataStore(tmp_path / "meta.db")
    meta = SqliteMetadataStore(tmp_path / "meta.db")
    try:
        catalog = Catalog(meta, "g")
        with pytest.raises(StreamGone):
            await catalog.ask("S", last_seq)
        await create_stream(writer, "g", "S")  # by another agent: found by reading again
        assert await catalog.ask("S", last_seq) == 0
        keys = catalog.keys("S")
        previous = await writer.get(catalog_key("g"))
        assert previous is not None
        await writer.txn(
            [],
            [
                Delete(keys.config),
                Delete(keys.state),
                Put(catalog_key("g"), catalog_change(previous.mod_revision, "S")),
            ],
        )
        with pytest.raises(StreamGone):
            await catalog.ask("S", last_seq)
        # The marker read with the state that was not there: the catalog knows.
        assert "S" not in catalog.streams and catalog.cached_view("S") is None
    finally:
        await writer.close()
        await meta.close()


async def section_holding(seq: int, view: StreamView) -> int | None:
    """A get's question: the first sequence of the section holding `seq` (None: no section
    does, the message is not found)."""
    section = view.section_at(seq, lone=True)
    return None if section is None else section.first


async def compact(meta: SqliteMetadataStore, stream: str = "S") -> None:
    """What compaction's swap does to the index: every entry replaced by one that spans them
    all (in a new object), and the state put again with `layout + 1`."""
    keys = records.StreamKeys("g", stream)
    state_item = await meta.get(keys.state)
    assert state_item is not None
    entries = await meta.range(keys.index_prefix)
    sections = [records.decode_entry(item.value) for item in entries]
    assert all(isinstance(s, records.IndexEntry) for s in sections)
    parts = [s for s in sections if isinstance(s, records.IndexEntry)]
    # The committers here write one subject, so every section's subject ids point at it.
    assert {subject for s in parts for subject in s.subjects} == {"s.1"}
    first = parts[0]
    merged = msgspec.structs.replace(
        first,
        obj="g/objects/l1/00000001-compacted.iso",
        length=sum(s.length for s in parts),
        subject_ids=b"".join(s.subject_ids for s in parts),
        lengths=b"".join(s.lengths for s in parts),
        sizes=b"".join(s.sizes for s in parts),
    )
    ops: list[Op] = [Delete(item.key) for item in entries]
    ops.append(Put(keys.index(first.first_seq), records.encode(merged)))
    state = records.decode_state(state_item.value)
    assert await swap_entries(meta, keys, state, state_item.mod_revision, [], ops)


async def two_writers(writer: SqliteMetadataStore, a: CommittingAgent) -> StreamView:
    """Agents b (on `writer`) and `a` commit sections of 4 in turn, then compaction merges
    them: a's view holds the pages of its own sections (5-8, 13-16), ending where b's begin,
    and the index now has one section 1-16 across them. A's view, not caught up."""
    await create_stream(writer, "g", "S")
    b = CommittingAgent(writer, "g", "b")
    for agent in (b, a, b, a):
        await agent.commit(publishes(4))
    view = a.catalog.cached_view("S")
    assert view is not None and [(p.lo, p.hi) for p in view.pages.pages] == [(5, 8), (13, OPEN)]
    await compact(writer)
    return view


async def test_ask_of_a_writers_view_after_compaction_finds_every_message(
    tmp_path: Path,
) -> None:
    writer = SqliteMetadataStore(tmp_path / "meta.db")
    a = CommittingAgent(SqliteMetadataStore(tmp_path / "meta.db"), "g", "a")
    try:
        view = await two_writers(writer, a)
        # The first get's page is planned from a's pages before the read brings the state
        # that drops them: kept, it would end where a's page of 5-8 began, and the page read
        # for 5 then look for its section from 5 on, finding none (not found).
        assert await a.catalog.ask("S", partial(section_holding, 1)) == 1
        for seq in (5, 9, 13, 16):
            assert await a.catalog.ask("S", partial(section_holding, seq)) == 1
        assert a.catalog.cached_view("S") is view and view.layout == 1
    finally:
        await writer.close()
        await a.meta.close()


async def test_a_fill_that_meets_a_compaction_is_planned_again(tmp_path: Path) -> None:
    writer = SqliteMetadataStore(tmp_path / "meta.db")
    a = CommittingAgent(SqliteMetadataStore(tmp_path / "meta.db"), "g", "a")
    try:
        # The view's state read before the compaction, its pages read after: what a question
        # answered through `answer` meets when a compaction lands between the two reads.
        view = await two_writers(writer, a)
        for seq in (1, 5, 9, 13, 16):
            section = await a.catalog.answer(partial(view.section_at, seq, lone=True))
            assert section is not None and section.first == 1
        assert view.layout == 1
    finally:
        await writer.close()
        await a.meta.close()
