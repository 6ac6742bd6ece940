"""The consistent read of a stream's metadata (`read_index`), and what agents and jobs build on it.

Views built by `load_view` and `catch_up` are compared with metadata in test_view.py; here the
read itself: what a span takes, that a state that moves meanwhile makes it read again, and what
each read costs in metadata round trips.
"""

from __future__ import annotations

from array import array
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
from msgspec import structs

from infinistream.jetstream.api import StreamConfig
from infinistream.metadata import open_metadata
from infinistream.metadata.kv import (
    Delete,
    DeleteRange,
    Item,
    MetadataStore,
    Op,
    Put,
    Read,
    Scan,
    Snapshot,
)
from infinistream.stream import records
from infinistream.stream.loader import (
    LEAST_REACH,
    IndexRead,
    Span,
    StreamGone,
    catch_up,
    load_view,
    read_index,
    read_stream,
)
from infinistream.stream.records import (
    IndexEntry,
    SectionEntry,
    StreamKeys,
    StreamRecord,
    StreamState,
    seq_from_key,
)
from infinistream.stream.sections import OPEN, SectionPages
from infinistream.stream.view import FIRST_REACH
from support.committers import Forwarding
from support.streamviews import answer

GROUP = "g"
T = TypeVar("T")
KEYS = StreamKeys(GROUP, "S")


class Watched(Forwarding):
    """A metadata store that counts the reads made of it and can run `before_read` just
    before the next one (as another agent committing at that moment)."""

    def __init__(self, inner: MetadataStore) -> None:
        super().__init__(inner)
        self.calls: list[str] = []
        self.reads: list[list[Read]] = []
        self.before_read: Callable[[], Awaitable[None]] | None = None
        self.after_read: Callable[[], Awaitable[None]] | None = None

    async def _call(self, name: str) -> None:
        self.calls.append(name)
        hook, self.before_read = self.before_read, None
        if hook is not None:
            await hook()

    async def get(self, key: str) -> Item | None:
        await self._call("get")
        return await self.inner.get(key)

    async def get_many(self, keys: list[str]) -> dict[str, Item]:
        await self._call("get_many")
        return await self.inner.get_many(keys)

    async def range(self, prefix: str, **kw: Any) -> list[Item]:
        await self._call("range")
        return await self.inner.range(prefix, **kw)

    async def snapshot(self, reads: list[Read]) -> Snapshot:
        await self._call("snapshot")
        self.reads.append(reads)
        snap = await self.inner.snapshot(reads)
        hook, self.after_read = self.after_read, None
        if hook is not None:
            await hook()
        return snap

    def commit_before_read(self, *ops: Op) -> None:
        """Commit `ops` just before the next read."""

        async def commit() -> None:
            await self.inner.txn([], list(ops))

        self.before_read = commit


def ten_messages(first: int, n: int = 10) -> IndexEntry:
    return IndexEntry(
        obj=f"{GROUP}/objects/l0/{first:020d}-a-00000001-aaaaaa.iso",
        offset=8,
        length=10 * n,
        first_seq=first,
        ts=1000 + first,
        subjects=["s.x"],
        subject_ids=array("I", [0] * n).tobytes(),
        lengths=array("I", [10] * n).tobytes(),
    )


def state_at(
    first: int,
    last: int,
    *,
    tomb_rev: int = 1,
    uid: str = "u1",
    layout: int = 0,
    deleted: int = 3,
) -> bytes:
    live = last - first + 1 - deleted
    return records.encode(
        StreamState(
            uid=uid,
            first_seq=first,
            last_seq=last,
            msgs=live,
            bytes=10 * live,
            num_deleted=deleted,
            tomb_rev=tomb_rev,
            layout=layout,
        )
    )


@pytest.fixture
async def meta() -> AsyncIterator[Watched]:
    """Stream S: entries at 1, 11, 21, 31 (ten messages each), 5, 15 and 25 deleted, 1 and 2
    purged."""
    store = Watched(open_metadata("sqlite://:memory:"))
    record = StreamRecord(config=StreamConfig(name="S", subjects=["s.>"]), created_ns=1, uid="u1")
    ops: list[Op] = [Put(KEYS.config, records.encode(record)), Put(KEYS.state, state_at(3, 40))]
    ops += [
        Put(KEYS.index(first), records.encode(ten_messages(first))) for first in (1, 11, 21, 31)
    ]
    ops += [Put(KEYS.tomb(seq), b"") for seq in (5, 15, 25)]
    await store.inner.txn([], ops)
    yield store
    await store.close()


async def state_item(meta: MetadataStore) -> Item:
    item = await meta.get(KEYS.state)
    assert item is not None
    return item


def firsts(read: IndexRead) -> list[int]:
    return [records.decode_index(item.value).first_seq for item in read.entries]


async def test_a_read_takes_what_its_span_asks(meta: Watched) -> None:
    item = await state_item(meta)

    async def read(span: Span) -> tuple[list[int], list[int]]:
        got = await read_index(meta, KEYS, span)
        assert got.state.last_seq == 40 and got.state_revision == item.mod_revision
        return firsts(got), got.tombstones

    assert await read(Span(0, 40, tombs_from=3)) == ([1, 11, 21, 31], [5, 15, 25])
    assert await read(Span(0, tombs_from=3)) == ([1, 11, 21, 31], [5, 15, 25])
    # With `holding`, the entry that holds `first` though it starts before it.
    assert await read(Span(15, 25, holding=True, tombs_from=15)) == ([11, 21], [15, 25])
    assert await read(Span(15, 25, tombs_from=16)) == ([21], [25])
    assert await read(Span(11, 40)) == ([11, 21, 31], [])
    meta.calls.clear()
    assert await read(Span(41, tombs_from=41)) == ([], [])
    assert await read(Span(41, 40, tombs_from=41)) == ([], [])
    assert meta.calls == ["snapshot", "snapshot"], "one snapshot each, whatever it holds"


async def test_a_commit_is_read_whole_or_not_at_all(meta: Watched) -> None:
    # Another agent commits messages 41..50 and deletes 35 just before the read.
    meta.commit_before_read(
        Put(KEYS.index(41), records.encode(ten_messages(41))),
        Put(KEYS.tomb(35), b""),
        Put(KEYS.state, state_at(3, 50, tomb_rev=2)),
    )
    meta.calls.clear()
    got = await read_index(meta, KEYS, Span(0, tombs_from=0))
    assert meta.calls == ["snapshot"]
    assert (got.state.last_seq, got.state.tomb_rev) == (50, 2)
    assert got.state_revision == (await state_item(meta)).mod_revision
    assert (firsts(got), got.tombstones) == ([1, 11, 21, 31, 41], [5, 15, 25, 35])


async def test_a_stream_deleted_before_the_read(meta: Watched) -> None:
    meta.commit_before_read(Delete(KEYS.config), Delete(KEYS.state))
    with pytest.raises(StreamGone):
        await read_index(meta, KEYS, Span(0))


async def test_a_job_finds_no_stream_deleted_while_it_read(meta: Watched) -> None:
    meta.commit_before_read(Delete(KEYS.config), Delete(KEYS.state))
    assert await read_stream(meta, GROUP, "S") is None


async def test_a_job_reads_the_config_of_the_stream_it_read(meta: Watched) -> None:
    # Deleted and created again under the same name just before the job read it: another uid.
    again = StreamRecord(config=StreamConfig(name="S", subjects=["t.>"]), created_ns=2, uid="u2")
    meta.commit_before_read(
        Delete(KEYS.index(1)),
        Delete(KEYS.index(11)),
        Delete(KEYS.index(21)),
        Delete(KEYS.index(31)),
        Delete(KEYS.tomb(5)),
        Delete(KEYS.tomb(15)),
        Delete(KEYS.tomb(25)),
        Put(KEYS.config, records.encode(again)),
        Put(KEYS.state, state_at(1, 10, tomb_rev=0, uid="u2", deleted=0)),
        Put(KEYS.index(1), records.encode(ten_messages(1))),
    )
    snap = await read_stream(meta, GROUP, "S")
    assert snap is not None
    assert (snap.state.uid, snap.config.subjects, snap.created_ns) == ("u2", ["t.>"], 2)
    assert [ref.entry.first_seq for ref in snap.entries] == [1] and not snap.tombstones


async def test_a_job_reads_what_its_sequences_need(meta: Watched) -> None:
    meta.calls.clear()
    snap = await read_stream(meta, GROUP, "S", 14, 26)
    assert snap is not None and snap.name == "S" and snap.config.subjects == ["s.>"]
    assert [ref.entry.first_seq for ref in snap.entries] == [11, 21]
    assert [ref.revision > 0 for ref in snap.entries] == [True, True]
    assert snap.tombstones == frozenset({15, 25})
    assert [snap.is_live(seq) for seq in (2, 3, 15, 16, 40, 41)] == [
        False,
        True,
        False,
        True,
        True,
        False,
    ]
    assert meta.calls == ["snapshot"]
    # From the start: the entry holding the first live sequence and on.
    snap = await read_stream(meta, GROUP, "S")
    assert snap is not None and [ref.entry.first_seq for ref in snap.entries] == [1, 11, 21, 31]
    assert snap.tombstones == frozenset({5, 15, 25})
    assert await read_stream(meta, GROUP, "NOPE") is None


async def test_a_job_looks_back_for_the_section_holding_its_first_sequence_within_reach() -> None:
    """The entry holding a job's first sequence is looked for within a reach of it, not from
    the stream's start (on etcd a reverse range costs its whole window); past a wider gap,
    16 times as far at each read, until it is found or the window holds the start."""
    store = Watched(open_metadata("sqlite://:memory:"))
    record = StreamRecord(config=StreamConfig(name="S", subjects=["s.>"]), created_ns=1, uid="u1")
    ops: list[Op] = [
        Put(KEYS.config, records.encode(record)),
        Put(KEYS.state, state_at(1, 100_010, deleted=0)),
        Put(KEYS.index(1), records.encode(ten_messages(1, n=100_000))),
        Put(KEYS.index(100_001), records.encode(ten_messages(100_001))),
    ]
    await store.inner.txn([], ops)

    def holding_starts() -> list[str | None]:
        return [
            read.start for reads in store.reads for read in reads[2:3] if isinstance(read, Scan)
        ]

    try:
        snap = await read_stream(store, GROUP, "S", 100_005, 100_006)
        assert snap is not None and [r.entry.first_seq for r in snap.entries] == [100_001]
        assert holding_starts() == [KEYS.index(100_006 - FIRST_REACH)]
        store.reads.clear()
        # Sequence 60,000 is in the section at 1, beyond one reach back.
        snap = await read_stream(store, GROUP, "S", 60_000, 60_010)
        assert snap is not None and [r.entry.first_seq for r in snap.entries] == [1]
        assert holding_starts() == [KEYS.index(60_001 - FIRST_REACH), KEYS.index(0)]
        store.reads.clear()
        # From the start, one read: nothing before it to look for.
        snap = await read_stream(store, GROUP, "S")
        assert snap is not None and [r.entry.first_seq for r in snap.entries] == [1, 100_001]
        assert len(store.reads) == 1
    finally:
        await store.close()


async def test_views_read_what_their_questions_need_one_snapshot_each(meta: Watched) -> None:
    item = await state_item(meta)
    meta.calls.clear()
    # Opening a stream reads nothing but the state its caller holds.
    view = load_view(KEYS, item)
    assert meta.calls == []
    assert (view.first_seq, view.last_seq, view.msgs) == (3, 40, 35)
    # A question: the page of entries holding 17, and then the tombstones, a snapshot each.
    assert await answer(meta, view, lambda: view.is_live(17) and view.subject_of(17)) == "s.x"
    assert meta.calls == ["snapshot", "snapshot"]
    assert not await answer(meta, view, lambda: view.is_live(15))
    assert meta.calls == ["snapshot", "snapshot"]

    # Another agent commits messages 41..50: the state alone tells the view, at no read.
    await meta.inner.txn(
        [],
        [Put(KEYS.index(41), records.encode(ten_messages(41))), Put(KEYS.state, state_at(3, 50))],
    )
    newer = await state_item(meta)
    meta.calls.clear()
    assert catch_up(view, newer) is view and meta.calls == []
    assert (view.last_seq, view.state_rev) == (50, newer.mod_revision)
    # What it held of the index stays; the end of it is read again when asked for.
    assert await answer(meta, view, lambda: view.subject_of(17)) == "s.x"
    assert meta.calls == []
    assert await answer(meta, view, lambda: view.subject_of(45)) == "s.x"
    assert meta.calls == ["snapshot"]

    # A delete: tombstones are read again when asked for.
    await meta.inner.txn(
        [], [Put(KEYS.tomb(45), b""), Put(KEYS.state, state_at(3, 50, tomb_rev=2, deleted=4))]
    )
    catch_up(view, await state_item(meta))
    meta.calls.clear()
    assert not await answer(meta, view, lambda: view.is_live(45))
    assert meta.calls == ["snapshot"]

    # Compaction moved messages (the layout changed): the view starts afresh.
    await meta.inner.txn([], [Put(KEYS.state, state_at(3, 50, tomb_rev=2, layout=1, deleted=4))])
    catch_up(view, await state_item(meta))
    meta.calls.clear()
    assert await answer(meta, view, lambda: view.subject_of(17)) == "s.x"
    assert meta.calls == ["snapshot"]


def ten_records(first: int, subjects: tuple[str, ...] = ("orders.eu", "orders.us")) -> SectionEntry:
    """The entry of a section of ten records whose detail is in its record directory."""
    return SectionEntry(
        obj=f"{GROUP}/objects/l0/{first:020d}-a-00000001-aaaaaa.iso",
        offset=8,
        length=100,
        plain_length=100,
        dir_length=40,
        records=10,
        first_seq=first,
        last_seq=first + 9,
        count=10,
        size=100,
        ts=first,
        last_ts=first + 9,
        # Decoded from each entry: equal strings, not the same ones, until the page holds them.
        names=tuple(name.encode().decode() for name in subjects),
        counts=(5,) * len(subjects),
    )


async def test_a_lookup_of_one_message_reads_the_entry_holding_it_alone(meta: Watched) -> None:
    # Sections at 1, 11, 21 and 41 (31..40 compacted away), the stream up to 50.
    firsts = (1, 11, 21, 41)
    ops: list[Op] = [Put(KEYS.state, state_at(1, 50, deleted=10))]
    ops += [Put(KEYS.index(first), records.encode(ten_records(first))) for first in firsts]
    ops += [Delete(KEYS.index(31))]
    await meta.inner.txn([], ops)
    view = load_view(KEYS, await state_item(meta))
    meta.calls.clear()

    def lookup(seq: int) -> int | None:
        section = view.section_at(seq, lone=True)
        return None if section is None else section.first

    # One snapshot, one entry held: its page ends where the next entry starts.
    assert await answer(meta, view, lambda: lookup(15)) == 11
    assert meta.calls == ["snapshot"]
    assert [(p.lo, p.hi, len(p.sections)) for p in view.pages.pages] == [(11, 20, 1)]
    # In the gap after 21..30: the page of 21..30 says no section holds 35.
    assert await answer(meta, view, lambda: lookup(35)) is None
    assert await answer(meta, view, lambda: lookup(28)) == 21
    assert meta.calls == ["snapshot", "snapshot"]
    # The last section's page reaches the stream's end; the first's starts the stream.
    assert await answer(meta, view, lambda: lookup(50)) == 41
    assert await answer(meta, view, lambda: lookup(3)) == 1
    assert [(p.lo, p.hi) for p in view.pages.pages] == [(1, 10), (11, 20), (21, 40), (41, OPEN)]
    assert len(meta.calls) == 4
    # A walk over those pages finds every section once, and each page still answers alone.
    sections = await answer(meta, view, lambda: list(view.sections_from(1)))
    assert [s.first for s in sections] == list(firsts)
    assert len(meta.calls) == 4
    assert await answer(meta, view, lambda: view.section_at(45)) is not None


async def test_a_lookup_between_pages_reads_up_to_the_next_page(meta: Watched) -> None:
    # A page of entries read first (1..10 is held), then a lookup past it and one before it.
    view = load_view(KEYS, await state_item(meta))
    assert await answer(meta, view, lambda: view.subject_of(31)) == "s.x"
    held = [(p.lo, p.hi) for p in view.pages.pages]
    assert held == [(31, OPEN)]
    section = await answer(meta, view, lambda: view.section_at(17, lone=True))
    assert section is not None and section.first == 11
    assert [(p.lo, p.hi) for p in view.pages.pages] == [(11, 20), (31, OPEN)]
    section = await answer(meta, view, lambda: view.section_at(25, lone=True))
    assert section is not None and section.first == 21
    assert [(p.lo, p.hi) for p in view.pages.pages] == [(11, 20), (21, 30), (31, OPEN)]
    assert [s.first for s in await answer(meta, view, lambda: list(view.sections_from(3)))] == [
        1,
        11,
        21,
        31,
    ]


def sections_of_ten(firsts: list[int], last: int) -> list[Op]:
    """Sections of ten records starting at `firsts`, in a stream of 1..`last`."""
    held = 10 * len(firsts)
    ops: list[Op] = [Put(KEYS.state, state_at(1, last, deleted=last - held))]
    ops += [Put(KEYS.index(first), records.encode(ten_records(first))) for first in firsts]
    return [*ops, Delete(KEYS.index(31))]


def windows(reads: list[Read]) -> list[tuple[int, int | None]]:
    """The sequences each scan of the index among `reads` covers, [start, end)."""
    out = []
    for read in reads:
        if isinstance(read, Scan) and read.prefix == KEYS.index_prefix:
            assert read.start is not None
            end = None if read.end is None else seq_from_key(read.end)
            out.append((seq_from_key(read.start), end))
    return out


async def test_a_lookup_reads_the_index_within_its_reach(meta: Watched) -> None:
    # 1,000 sections of ten: what a lookup reads of the index does not grow with them (etcd
    # reads a reverse range's whole window, and walks a forward range's).
    await meta.inner.txn([], sections_of_ten(list(range(1, 10_000, 10)), 10_000))
    view = load_view(KEYS, await state_item(meta))
    meta.calls.clear()
    section = await answer(meta, view, lambda: view.section_at(5_005, lone=True))
    assert section is not None and section.first == 5_001
    assert meta.calls == ["snapshot"]
    reach = FIRST_REACH
    assert windows(meta.reads[-1]) == [(max(0, 5_006 - reach), 5_006), (5_006, 5_006 + reach)]
    # The reach is learned from what was read: four sections' worth, down by half a read.
    assert view.reach == FIRST_REACH // 2
    assert [(p.lo, p.hi) for p in view.pages.pages] == [(5_001, 5_010)]
    for _ in range(10):
        view.pages = SectionPages()
        assert await answer(meta, view, lambda: view.section_at(5_005, lone=True)) is not None
    assert view.reach == LEAST_REACH
    section = await answer(meta, view, lambda: view.section_at(8_888, lone=True))
    assert section is not None and section.first == 8_881
    assert windows(meta.reads[-1]) == [(8_889 - 64, 8_889), (8_889, 8_889 + 64)]
    assert len(meta.calls) == 12


async def test_a_lookup_beyond_its_reach_looks_further_back(meta: Watched) -> None:
    # Sections of ten, then one of 1,000 records, then sections of ten again.
    big = structs.replace(ten_records(101), records=1_000, count=1_000, last_seq=1_100)
    ops = sections_of_ten([*range(1, 101, 10), *range(1_101, 2_001, 10)], 2_000)
    await meta.inner.txn([], [*ops, Put(KEYS.index(101), records.encode(big))])
    view = load_view(KEYS, await state_item(meta))
    view.reach = LEAST_REACH
    meta.calls.clear()
    # 64 back from 1,000 holds no entry's start: a second read, 16 times as far back, finds it.
    section = await answer(meta, view, lambda: view.section_at(1_000, lone=True))
    assert section is not None and (section.first, section.last) == (101, 1_100)
    assert len(meta.calls) == 2
    assert [w[0] for w in windows(meta.reads[0])] == [1_001 - 64, 1_001]
    assert [w[0] for w in windows(meta.reads[1])] == [0, 1_001]
    assert [(p.lo, p.hi) for p in view.pages.pages] == [(101, 1_100)]
    # Its span sets the reach at once: four times 1,000.
    assert view.reach == 4_000


async def test_a_view_looks_for_compacted_sections_with_the_first_reach(meta: Watched) -> None:
    # A view of small sections learned a small reach; compaction then put their messages into
    # one large section. The reach learned from the sections dropped would miss it: a read more.
    await meta.inner.txn([], sections_of_ten(list(range(1, 2_001, 10)), 2_000))
    view = load_view(KEYS, await state_item(meta))
    view.reach = LEAST_REACH
    assert await answer(meta, view, lambda: view.section_at(1_005, lone=True)) is not None
    compacted = structs.replace(ten_records(1), records=2_000, count=2_000, last_seq=2_000)
    await meta.inner.txn(
        [],
        [
            DeleteRange(KEYS.index(1), KEYS.index(2_001)),
            Put(KEYS.index(1), records.encode(compacted)),
            Put(KEYS.state, state_at(1, 2_000, deleted=0, layout=1)),
        ],
    )
    catch_up(view, await state_item(meta))
    assert view.reach == FIRST_REACH
    meta.calls.clear()
    section = await answer(meta, view, lambda: view.section_at(1_500, lone=True))
    assert section is not None and (section.first, section.last) == (1, 2_000)
    assert meta.calls == ["snapshot"]


async def test_a_reader_at_the_stream_end_keeps_its_reach(meta: Watched) -> None:
    # A consumer keeping up with another agent's commits reads each new section as it comes:
    # the read finds nothing after it (the stream ends there), which is no gap to look across.
    # Taken for one, the reach grew 16 times a read until, thousands of reads on, its window's
    # key was a number too long to write and every read of the view failed.
    view = load_view(KEYS, await state_item(meta))
    for first in range(41, 341, 10):
        await meta.inner.txn(
            [],
            [
                Put(KEYS.index(first), records.encode(ten_messages(first))),
                Put(KEYS.state, state_at(3, first + 9)),
            ],
        )
        catch_up(view, await state_item(meta))
        section = await answer(meta, view, lambda s=first: view.section_at(s, lone=True))
        assert section is not None and section.first == first
    assert view.reach <= FIRST_REACH
    back, ahead = windows(meta.reads[-1])
    assert back[0] >= 331 - FIRST_REACH and ahead[1] is not None and ahead[1] <= 332 + FIRST_REACH


async def test_a_walk_over_pages_within_reach_finds_every_section_once(meta: Watched) -> None:
    # Sections of ten up to 1,000 and after a gap (deleted messages) from 90,001.
    firsts = [*range(1, 1_000, 10), *range(90_001, 91_000, 10)]
    await meta.inner.txn([], sections_of_ten(firsts, 91_000))
    view = load_view(KEYS, await state_item(meta))
    view.reach = LEAST_REACH
    meta.calls.clear()
    # The first page ends where its scan did (6 + 64 * 64 - 1), past the last section found.
    assert await answer(meta, view, lambda: view.section_at(5)) is not None
    assert [(p.lo, p.hi) for p in view.pages.pages] == [(1, 4_101)]
    sections = await answer(meta, view, lambda: list(view.sections_from(1)))
    assert [s.first for s in sections] == [f for f in firsts if f != 31]
    # The gap is crossed in a few reads: each that finds nothing ahead looks 16 times as far.
    assert len(meta.calls) <= 6
    lone = await answer(meta, view, lambda: view.section_at(50_000, lone=True))
    assert lone is None


async def test_a_page_of_sections_holds_each_subject_name_once() -> None:
    # Every entry names the same subjects: a page keeps one string of each, not one per entry.
    store = open_metadata("sqlite://:memory:")
    entry = ten_records
    ops: list[Op] = [Put(KEYS.state, state_at(1, 30, deleted=0))]
    ops += [Put(KEYS.index(first), records.encode(entry(first))) for first in (1, 11, 21)]
    await store.txn([], ops)
    try:
        view = load_view(KEYS, await state_item(store))
        sections = await answer(store, view, lambda: list(view.sections_from(1)))
        assert [s.first for s in sections] == [1, 11, 21]
        for name in (0, 1):
            assert len({id(s.summary.names[name]) for s in sections}) == 1
    finally:
        await store.close()


async def test_a_fill_takes_the_state_it_read_with(meta: Watched) -> None:
    view = load_view(KEYS, await state_item(meta))
    # Another agent commits 41..50 and deletes 35 just before the view reads a page.
    meta.commit_before_read(
        Put(KEYS.index(41), records.encode(ten_messages(41))),
        Put(KEYS.tomb(35), b""),
        Put(KEYS.state, state_at(3, 50, tomb_rev=2)),
    )
    assert await answer(meta, view, lambda: view.subject_of(45)) == "s.x"
    assert (view.last_seq, view.tomb_rev) == (50, 2)
    assert not await answer(meta, view, lambda: view.is_live(35))


async def test_a_fill_read_before_the_view_moved_on_reads_again(meta: Watched) -> None:
    view = load_view(KEYS, await state_item(meta))

    async def moved_on() -> None:
        # While the read is out, another agent commits 41..50 and the view takes that state
        # (another question's read came back first): the read holds neither.
        await meta.inner.txn(
            [],
            [
                Put(KEYS.index(41), records.encode(ten_messages(41))),
                Put(KEYS.state, state_at(3, 50)),
            ],
        )
        newer = await meta.inner.get(KEYS.state)
        assert newer is not None
        catch_up(view, newer)

    meta.after_read = moved_on
    meta.calls.clear()
    section = await answer(meta, view, lambda: view.section_at(35))
    assert section is not None and section.first == 31
    # Read again at the view's state: 45 is in the section the first read did not see.
    assert meta.calls == ["snapshot", "snapshot"]
    section = await answer(meta, view, lambda: view.section_at(45))
    assert section is not None and section.first == 41


async def test_view_loads_compacted_entry_with_gaps() -> None:
    """The agent's view of a stream whose compacted entry left out deleted messages.

    Seqs 10..16; 11, 13 and 16 (the last) were deleted (tombstones) before compaction dropped
    them from the new object; then 10 was deleted too (the head moves past 11, whose
    tombstone goes)."""
    meta = open_metadata("sqlite://:memory:")
    keys = StreamKeys("g", "S")
    seqs = [10, 12, 14, 15]
    entry = IndexEntry(
        obj="g/objects/l1/00000000000000000001-c0.iso",
        offset=8,
        length=4 * 20,
        first_seq=10,
        ts=1000,
        subjects=["s.a", "s.b"],
        subject_ids=array("I", [0, 1, 0, 1]).tobytes(),
        lengths=array("I", [20] * 4).tobytes(),
        seqs=array("Q", seqs).tobytes(),
        timestamps=array("Q", [1000, 1002, 1004, 1005]).tobytes(),
        sizes=array("I", [20] * 4).tobytes(),
    )
    state = StreamState(uid="u", first_seq=10, last_seq=16, msgs=4, bytes=80, num_subjects=2)
    state.num_deleted, state.tomb_rev, state.layout = 3, 1, 1
    try:
        ops: list[Op] = [
            Put(keys.state, records.encode(state)),
            Put(keys.index(10), records.encode(entry)),
        ]
        ops += [Put(keys.tomb(11), b""), Put(keys.tomb(13), b""), Put(keys.tomb(16), b"")]
        await meta.txn([], ops)
        item = await meta.get(keys.state)
        assert item is not None
        view = load_view(keys, item)
        assert (view.msgs, view.bytes, view.first_seq, view.last_seq) == (4, 80, 10, 16)
        assert await answer(meta, view, lambda: list(view.live_seqs())) == seqs
        assert view.tombstones() == {11, 13, 16}
        assert not view.is_live(16) and not view.is_live(13) and view.is_live(15)
        assert await answer(meta, view, lambda: (view.ts_of(14), view.subject_of(15))) == (
            1004,
            "s.b",
        )

        state.first_seq, state.msgs, state.bytes, state.num_deleted = 12, 3, 60, 2
        await meta.txn([], [Put(keys.state, records.encode(state)), Delete(keys.tomb(11))])
        item = await meta.get(keys.state)
        assert item is not None
        view = load_view(keys, item)
        assert await answer(meta, view, lambda: (view.msgs, view.first_seq, view.tombstones())) == (
            3,
            12,
            {13, 16},
        )
        assert await answer(meta, view, lambda: list(view.live_seqs())) == [12, 14, 15]
    finally:
        await meta.close()
