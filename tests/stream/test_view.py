"""StreamView on its own, and the view an agent keeps after its commits against a fresh load.

The first half builds views in memory (support.streamviews: the planning and applying code of a
commit, without a metadata store). The second half drives the real Committer against a
SqliteMetadataStore in a temporary directory (no object storage: index entries written before
record directories hold each record's detail) and checks that the view each commit leaves in
the catalog answers as a view built afresh from metadata alone does (invariant 4), and that the
subject records committed are exact.
"""

from __future__ import annotations

import asyncio
import random
import tracemalloc
from array import array
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from infinistream.jetstream.api import StreamConfig
from infinistream.metadata import Delete, Put, SqliteMetadataStore
from infinistream.protocol import encode_headers
from infinistream.stream import records
from infinistream.stream.catalog import Catalog
from infinistream.stream.changes import Changes
from infinistream.stream.committer import Committer, SectionWrite
from infinistream.stream.config import normalize
from infinistream.stream.index_cache import IndexCache
from infinistream.stream.limits import enforce_limits
from infinistream.stream.loader import catch_up
from infinistream.stream.publish_rules import Publish
from infinistream.stream.purge import purge
from infinistream.stream.records import (
    IndexEntry,
    SectionEntry,
    StreamRecord,
    StreamState,
    SubjectRecord,
    catalog_key,
    decode_subject,
)
from infinistream.stream.sections import (
    OPEN,
    PAGE_ENTRIES,
    Page,
    Segment,
    section_of,
    summary_of,
)
from infinistream.stream.summary import summarize
from infinistream.stream.view import (
    AllSubjects,
    Details,
    Missing,
    SectionAt,
    StreamView,
    Subjects,
    SubjectsMatching,
    Tombstones,
)
from support.streamviews import add_segment, empty_view, extend, kill

# -- in memory --------------------------------------------------------------------------------


def view_of(*subject_runs: list[str]) -> StreamView:
    """A view with one section per run, sequences from 1, every record 10 bytes."""
    view = empty_view()
    for run in subject_runs:
        extend(view, run)
    return view


def test_sections_give_consecutive_sequences() -> None:
    view = view_of(["a", "b", "a"], ["c"])
    assert (view.first_seq, view.last_seq) == (1, 4)
    assert [view.subject_of(s) for s in range(1, 5)] == ["a", "b", "a", "c"]
    assert (view.msgs, view.bytes, view.num_subjects) == (4, 40, 3)


def test_what_a_message_counts_for_is_kept_apart_from_its_record_length() -> None:
    names = array("I", [0, 1, 2])
    entry = IndexEntry(
        obj="obj",
        offset=0,
        length=21,
        first_seq=1,
        ts=1_000,
        subjects=["a", "x", "b"],
        subject_ids=names.tobytes(),
        lengths=array("I", [5, 7, 9]).tobytes(),
        skipped=[1],
        sizes=array("I", [21, 27, 99]).tobytes(),
    )
    seg = Segment.from_entry("k", entry)
    assert (list(seg.lengths), [seg.size_at(i, "file") for i in (0, 1)]) == ([5, 9], [21, 99])
    view = empty_view()
    add_segment(view, seg)
    assert (view.bytes, view.size_of(2)) == (120, 99)
    kill(view, [1])
    assert view.bytes == 99
    # An entry written before sizes were kept: each message as nats-server's file store
    # frames a message without headers (30 bytes where a record takes 14), or its memory
    # store (16).
    old = Segment.from_entry("k", msgspec.structs.replace(entry, sizes=b""))
    assert [old.size_at(i, "file") for i in (0, 1)] == [21, 25]
    assert [old.size_at(i, "memory") for i in (0, 1)] == [7, 11]


def test_sizes_and_stamps_follow_the_entry() -> None:
    view = empty_view()
    extend(view, ["a", "b", "c"], [5, 7, 9], ts=500)
    assert [view.size_of(s) for s in (1, 2, 3)] == [5, 7, 9]
    assert [view.ts_of(s) for s in (1, 2, 3)] == [500, 501, 502]
    assert view.first_ts == 500 and view.last_ts == 502
    assert view.bytes == 21


def test_skipped_records_take_no_sequence() -> None:
    names = {"a": 0, "x": 1, "b": 2, "y": 3}
    entry = IndexEntry(
        obj="o",
        offset=0,
        length=26,
        first_seq=1,
        ts=1,
        subjects=list(names),
        subject_ids=array("I", names.values()).tobytes(),
        lengths=array("I", [5, 6, 7, 8]).tobytes(),
        skipped=[1, 3],
    )
    seg = Segment.from_entry("k", entry)
    assert (seg.first, seg.last) == (1, 2)
    assert seg.subjects == ("a", "b")
    # Offsets still point at the right records inside the section.
    assert list(seg.offsets) == [0, 11]
    assert list(seg.lengths) == [5, 7]


def test_section_for_finds_the_right_section() -> None:
    view = view_of(["a", "a"], ["b"], ["c", "c", "c"])
    firsts = {s: view.segment_for(s).first for s in range(1, 7)}  # type: ignore[union-attr]
    assert firsts == {1: 1, 2: 1, 3: 3, 4: 4, 5: 4, 6: 4}
    assert view.segment_for(7) is None
    assert [s.first for s in view.sections_from(2)] == [1, 3, 4]
    assert [s.first for s in view.sections_back_from(3)] == [3, 1]
    assert [s.first for s in view.following(view.segment_for(1))] == [3, 4]  # type: ignore[arg-type]


def test_kill_inside_the_range_leaves_a_tombstone() -> None:
    view = view_of(["a", "b", "a", "c"])
    kill(view, [2])
    assert not view.is_live(2)
    assert view.tombstones() == {2}
    assert (view.first_seq, view.last_seq, view.msgs, view.bytes) == (1, 4, 3, 30)
    assert list(view.live_seqs()) == [1, 3, 4]


def test_kill_of_the_first_moves_the_head_past_tombstones() -> None:
    view = view_of(["a", "b", "c", "d", "e"])
    kill(view, [2, 3])
    kill(view, [1])
    assert view.first_seq == 4
    assert view.tombstones() == set()
    assert view.msgs == 2


def test_killing_the_last_message_of_a_subject_forgets_the_subject() -> None:
    view = view_of(["a", "b", "a"])
    kill(view, [2])
    assert view.num_subjects == 1
    assert view.subject_record("b") is None
    assert view.subjects_matching("") == {"a": 2}
    # The subject comes back with a new message.
    extend(view, ["b"])
    assert view.subjects_matching("") == {"a": 2, "b": 1}
    assert view.last_for("b") == 4


def test_subject_records_count_exactly_and_bound_first_and_last() -> None:
    view = view_of(["a", "b", "a", "a", "b"])
    assert view.subjects_matching("") == {"a": 3, "b": 2}
    kill(view, [1, 4])
    assert view.subjects_matching("") == {"a": 1, "b": 2}
    record = view.subject_record("a")
    assert record is not None and record.count == 1
    # Deleting the first moved its bound past it; the last stays a bound above the last live.
    assert record.first <= 3 <= record.last
    assert view.last_for("a") == 3


def test_last_for_gives_the_last_live_message_of_a_subject() -> None:
    view = view_of(["a", "b", "a", "b"])
    assert view.last_for("a") == 3
    kill(view, [3])
    assert view.last_for("a") == 1
    kill(view, [1])
    assert view.last_for("a") == 0
    assert view.last_for("never") == 0


def test_live_seqs_with_start_and_filters() -> None:
    view = view_of(["s.a", "s.b"], ["s.a", "t.c", "s.b"])
    kill(view, [3])
    assert list(view.live_seqs(2)) == [2, 4, 5]
    assert list(view.live_seqs(0, "s.b")) == [2, 5]
    assert list(view.live_seqs(3, "s.b")) == [5]
    assert list(view.live_seqs(0, "s.*")) == [1, 2, 5]
    assert list(view.live_seqs(0, ">")) == [1, 2, 4, 5]
    assert list(view.live_seqs(0, "nope")) == []


def test_counts_after_a_sequence() -> None:
    view = view_of(["s.a", "s.b"], ["s.a", "t.c", "s.b"], ["s.a"])
    kill(view, [3])
    assert view.count_after(0, []) == 5
    assert view.count_after(2, []) == 3
    assert view.count_after(0, ["s.a"]) == 2
    assert view.count_after(1, ["s.a"]) == 1
    assert view.count_after(0, ["s.*"]) == 4
    assert view.count_after(0, ["t.c", "s.b"]) == 3
    assert view.count_after(6, ["s.a"]) == 0


def test_subjects_matching_a_wildcard() -> None:
    view = view_of(["s.a", "s.b", "t.a", "s.a"])
    assert view.subjects_matching("s.*") == {"s.a": 2, "s.b": 1}
    assert view.subjects_matching("*.a") == {"s.a": 2, "t.a": 1}


def test_sequence_from_time() -> None:
    view = empty_view()
    extend(view, ["a", "b"], ts=100)  # 100, 101
    extend(view, ["c"], ts=200)  # 200
    extend(view, ["d", "e"], ts=300)  # 300, 301
    assert [view.seq_from_time(t) for t in (0, 100, 101, 102, 200, 250, 301, 302)] == [
        1,
        1,
        2,
        3,
        3,
        4,
        5,
        6,
    ]


def test_deleting_the_head_drops_dead_sections() -> None:
    view = view_of(["a", "b"], ["c", "d"], ["e"])
    kill(view, [4])
    kill(view, range(1, 4))
    assert (view.first_seq, view.msgs) == (5, 1)
    assert [s.first for s in view.sections_from(view.first_seq)] == [5]
    assert view.tombstones() == set()


# -- what a view does not hold ----------------------------------------------------------------


def bare_view(**state: int) -> StreamView:
    """A view of a stream of 100 messages as an agent opens it: its state alone."""
    fields = {"first_seq": 1, "last_seq": 100, "msgs": 100, "num_deleted": 0}
    fields.update(state)
    return StreamView(StreamState(uid="u", subject_records=1, **fields), 7)


def need_of(question: Callable[[], Any]) -> Any:
    with pytest.raises(Missing) as missing:
        question()
    return missing.value.need


def test_an_opened_view_reads_nothing_until_asked() -> None:
    view = bare_view()
    # From the state alone: the range, and (with none deleted) that every message is live.
    assert view.is_live(50) and not view.is_live(101)
    assert list(view.live_seqs(99)) == [99, 100]
    assert view.count_after(90, []) == 10
    assert need_of(lambda: view.segment_for(50)) == SectionAt(50)
    assert need_of(lambda: view.subject_record("a")) == Subjects(("a",))
    assert need_of(lambda: view.subject_records(["a", "b"])) == Subjects(("a", "b"))
    assert need_of(lambda: view.subjects_matching("s.>")) == SubjectsMatching("s.>")
    assert need_of(lambda: bare_view(num_deleted=3).is_live(5)) == Tombstones()
    # Subject records that an agent of an earlier version may have left behind are not used.
    stale = StreamView(StreamState(uid="u", first_seq=1, last_seq=5, msgs=5), 1)
    assert need_of(lambda: stale.subject_record("a")) == AllSubjects()


def test_the_cache_budget_drops_what_was_used_least_recently() -> None:
    cache = IndexCache()
    views = []
    for _ in range(3):
        view = empty_view()
        view.cache.forget_owner(view)
        view.cache = cache
        views.append(view)
        for i in range(10):
            extend(view, [f"s.{i}.{j}" for j in range(20)])
    held = cache.used
    # The budget shrinks to a third: whatever was used least recently goes first.
    cache.budget = held // 3
    views[-1].add_segment(views[-1].segment_for(views[-1].last_seq))  # type: ignore[arg-type]
    assert cache.used <= cache.budget and cache.evictions > 0
    last = views[-1]
    assert last.segment_for(last.last_seq) is not None
    assert isinstance(need_of(lambda: views[0].segment_for(1)), SectionAt | Details)
    # A view that is dropped takes what it held out of the cache.
    before = cache.used
    last.close()
    assert cache.used < before


def test_an_agents_own_commits_fill_pages_of_bounded_size() -> None:
    # The page a writer appends its commits to closes when full: no page, and no charge of
    # one to the cache, grows with what the agent has written.
    view = empty_view()
    for i in range(2 * PAGE_ENTRIES + 5):
        extend(view, [f"s.{i % 7}"])
    pages = view.pages.pages
    assert [len(p.sections) for p in pages] == [PAGE_ENTRIES, PAGE_ENTRIES, 5]
    assert [p.hi for p in pages] == [PAGE_ENTRIES, 2 * PAGE_ENTRIES, OPEN]
    assert all(view.segment_for(seq) is not None for seq in range(1, view.last_seq + 1))


def test_a_hold_keeps_what_an_operation_loaded() -> None:
    cache = IndexCache(budget=1_000)

    class Owner:
        def __init__(self) -> None:
            self.dropped: list[Any] = []

        def evict(self, key: Any) -> None:
            self.dropped.append(key)

    owner = Owner()
    cache.charge(owner, "old", 600)
    with cache.hold():
        cache.charge(owner, "a", 600)  # over budget: "old" goes, "a" stays
        cache.charge(owner, "b", 600)  # still over budget, but both are held
        assert owner.dropped == ["old"] and cache.used == 1_200
    cache.charge(owner, "c", 100)  # the hold is over: room is made again, oldest first
    assert owner.dropped == ["old", "a"] and cache.used == 700


# -- the budget, whatever the number of subjects ----------------------------------------------


def encoded_entry(first: int, n: int, subjects: int) -> bytes:
    """A stored index entry of `n` records from `first`, record i of subject i % subjects:
    decoded in a test, its strings are new, as an agent's are when it reads one."""
    ids = array("I", (i % subjects for i in range(n)))
    entry = IndexEntry(
        obj="obj",
        offset=0,
        length=10 * n,
        first_seq=first,
        ts=1,
        subjects=[f"orders.{first + i}" for i in range(min(n, subjects))],
        subject_ids=ids.tobytes(),
        lengths=array("I", [10] * n).tobytes(),
        sizes=array("I", [10] * n).tobytes(),
    )
    return msgspec.msgpack.encode(entry)


def decode_segment(key: str, raw: bytes) -> Segment:
    return Segment.from_entry(key, msgspec.msgpack.decode(raw, type=IndexEntry))


def traced(build: Callable[[], Any]) -> tuple[Any, int]:
    """What `build` returns, and the bytes it left allocated."""
    tracemalloc.start()
    try:
        made = build()
        return made, tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("subjects", [16, 2_000])
def test_a_segment_is_charged_what_it_takes(subjects: int) -> None:
    # Its subjects' strings count: a section with as many subjects as records takes four
    # times what one of 16 subjects does.
    raws = [encoded_entry(1 + 2_000 * k, 2_000, subjects) for k in range(10)]
    segs, took = traced(lambda: [decode_segment(f"k{k}", r) for k, r in enumerate(raws)])
    charged = sum(seg.cost() for seg in segs)
    assert 0.85 * took <= charged <= 1.25 * took


@pytest.mark.parametrize("subjects", [16, 100_000])
def test_a_page_of_sections_is_charged_what_it_takes(subjects: int) -> None:
    # Over 16 subjects an entry names them; over more, it holds a filter instead.
    summary = summarize([f"orders.{i % subjects}" for i in range(3_484)])
    raws = [
        msgspec.msgpack.encode(
            SectionEntry(
                obj=f"objects/{k:020d}",
                offset=0,
                length=130_000,
                plain_length=130_000,
                dir_length=20_000,
                records=3_484,
                first_seq=1 + 3_484 * k,
                last_seq=3_484 * (k + 1),
                count=3_484,
                size=200_000,
                ts=10**18,
                last_ts=10**18 + 3_483,
                names=list(summary.names),
                counts=list(summary.counts),
                bloom=summary.bloom,
                bloom_k=summary.k,
            )
        )
        for k in range(100)
    ]

    def read_all() -> Page:
        entries = [msgspec.msgpack.decode(r, type=SectionEntry) for r in raws]
        return Page(1, 348_400, [section_of(f"i/{k}", e)[0] for k, e in enumerate(entries)])

    page, took = traced(read_all)
    assert 0.85 * took <= page.cost() <= 1.25 * took


def stored_entries(first_seqs: list[int], count: int) -> tuple[list[str], list[bytes]]:
    """The keys and stored values of sections of `count` sequences starting at `first_seqs`."""
    keys = records.StreamKeys("g", "s")
    summary = summarize([f"orders.{i % 16}" for i in range(count)])
    values = [
        msgspec.msgpack.encode(
            SectionEntry(
                obj=f"objects/{first:020d}",
                offset=0,
                length=130_000,
                plain_length=130_000,
                dir_length=20_000,
                records=count,
                first_seq=first,
                last_seq=first + count - 1,
                count=count,
                size=200_000,
                ts=10**18 + first,
                last_ts=10**18 + first + count - 1,
                names=list(summary.names),
                counts=list(summary.counts),
                bloom=summary.bloom,
                bloom_k=summary.k,
            )
        )
        for first in first_seqs
    ]
    return [keys.index(first) for first in first_seqs], values


def test_a_page_kept_as_stored_is_charged_what_it_takes() -> None:
    keys, values = stored_entries([1 + 3_484 * k for k in range(PAGE_ENTRIES + 1)], 3_484)

    def read() -> Page:
        # Copies, as a metadata read makes them.
        copied = [(k + "-")[:-1] for k in keys], [bytes(bytearray(v)) for v in values]
        return Page.stored(1, OPEN, *copied)

    page, took = traced(read)
    assert not page.decoded
    assert 0.85 * took <= page.cost() <= 1.25 * took


def test_a_page_of_the_one_entry_a_lookup_reads_is_charged_what_it_takes() -> None:
    keys, values = stored_entries([1 + 3_484 * k for k in range(500)], 3_484)

    def read() -> list[Page]:
        return [
            Page.stored(1 + 3_484 * i, 3_484 * (i + 1), [(k + "-")[:-1]], [bytes(bytearray(v))])
            for i, (k, v) in enumerate(zip(keys, values, strict=True))
        ]

    pages, took = traced(read)
    assert 0.85 * took <= sum(p.cost() for p in pages) <= 1.25 * took


def test_a_page_kept_as_stored_finds_what_its_decoded_sections_hold() -> None:
    # Sections of 10 sequences with gaps between them (deleted sections, compaction).
    keys, values = stored_entries([5, 20, 31, 60, 75], 10)
    stored = Page.stored(1, 100, keys, values)
    decoded = Page.stored(1, 100, keys, values)
    assert decoded.sections and decoded.decoded

    def held(section: Any) -> tuple[str, int, int] | None:
        return None if section is None else (section.key, section.first, section.last)

    found = [held(stored.find(seq)) for seq in range(0, 102)]
    assert found == [held(decoded.find(seq)) for seq in range(0, 102)]
    assert found[5] == (keys[0], 5, 14) and found[40] == (keys[2], 31, 40)
    assert found[4] is found[15] is found[41] is found[85] is None
    assert not stored.decoded


def test_a_walk_over_a_stored_page_decodes_it_and_charges_it_again() -> None:
    cache = IndexCache()
    state = StreamState(uid="u", first_seq=1, last_seq=50, msgs=50, subject_records=1)
    view = StreamView(state, 7, cache)
    keys, values = stored_entries([1, 11, 21, 31, 41], 10)
    page = Page.stored(1, OPEN, keys, values)
    view.add_page(page)
    stored_cost = cache.used
    assert stored_cost == page.cost()
    section = view.section_at(25)
    assert section is not None and (section.first, section.last) == (21, 30)
    assert cache.used == stored_cost and not page.decoded
    assert [s.first for s in view.sections_from(15)] == [11, 21, 31, 41]
    assert page.decoded and cache.used == page.cost() > stored_cost


def test_segments_of_many_subjects_stay_within_the_budget() -> None:
    cache = IndexCache(budget=1_000_000)
    state = StreamState(uid="u", first_seq=1, last_seq=80_000, msgs=80_000, subject_records=1)
    view = StreamView(state, 7, cache)
    raws = [encoded_entry(1 + 2_000 * k, 2_000, 2_000) for k in range(40)]

    def read_all() -> Segment:
        first = decode_segment("k0", raws[0])
        view.add_segment(first)
        for k, raw in enumerate(raws[1:], 1):
            view.add_segment(decode_segment(f"k{k}", raw))
        return first

    first, held = traced(read_all)
    assert cache.used <= cache.budget and cache.evictions > 0
    # Held unbounded, the 40 sections' details would take six times the budget.
    assert held <= 1.25 * cache.budget
    # The first section's detail was dropped: asked for, it is missing; read again, it answers.
    section = summary_of(first)
    assert need_of(lambda: view.segment_of(section)) == Details((section,))
    view.add_segment(decode_segment("k0", raws[0]))
    assert view.segment_of(section).subjects[5] == "orders.6"


def test_subject_records_of_many_subjects_stay_within_the_budget() -> None:
    cache = IndexCache(budget=500_000)
    state = StreamState(uid="u", first_seq=1, last_seq=20_000, msgs=20_000, subject_records=1)
    view = StreamView(state, 7, cache)
    raws = [
        msgspec.msgpack.encode({f"orders.{i}": SubjectRecord(i, i, 1) for i in range(k, k + 1_000)})
        for k in range(1, 20_001, 1_000)
    ]

    def read_all() -> None:
        # As a commit over many subjects reads them: a thousand records at a time.
        for raw in raws:
            view.add_records(msgspec.msgpack.decode(raw, type=dict[str, SubjectRecord | None]))

    _, held = traced(read_all)
    assert cache.used <= cache.budget and cache.evictions > 0
    # Held unbounded, the 20,000 records would take twenty times the budget.
    assert held <= 1.25 * cache.budget
    assert view.subject_record("orders.20000") == SubjectRecord(20_000, 20_000, 1)
    # The first records were dropped: asked for, one is missing; read again, it answers.
    assert need_of(lambda: view.subject_record("orders.1")) == Subjects(("orders.1",))
    view.add_records({"orders.1": SubjectRecord(1, 1, 1)})
    assert view.subject_record("orders.1") == SubjectRecord(1, 1, 1)


# -- the view after commits equals a fresh load -----------------------------------------------

GROUP = "g"


@pytest.fixture
async def meta(tmp_path: Path) -> AsyncIterator[SqliteMetadataStore]:
    store = SqliteMetadataStore(tmp_path / "meta.db")
    yield store
    await store.close()


async def make_stream(meta: SqliteMetadataStore, name: str, **config: Any) -> Catalog:
    cfg = normalize(StreamConfig(name=name, **config))
    catalog = Catalog(meta, GROUP)
    keys = catalog.keys(name)
    first = cfg.first_seq or 1
    result = await meta.txn(
        [],
        [
            Put(keys.config, records.encode(StreamRecord(config=cfg, created_ns=1, uid="uid1"))),
            Put(
                keys.state,
                records.encode(StreamState(uid="uid1", first_seq=first, last_seq=first - 1)),
            ),
            Put(catalog_key(GROUP), b"1"),
        ],
    )
    assert result.succeeded
    await catalog.refresh(force=True)
    return catalog


class Writer:
    """Commits batches the way the write buffer does, with made-up object locations."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.committer = Committer(catalog.meta, catalog)
        self.objects = 0

    async def publish(
        self, stream: str, subjects: list[str], headers: list[dict[str, str] | None] | None = None
    ) -> list[Any]:
        publishes = []
        for i, subject in enumerate(subjects):
            hdr = headers[i] if headers else None
            raw = encode_headers(hdr) if hdr else None
            publishes.append(Publish(subject, raw, 3, 20 + len(subject) + i, "reply"))
        self.objects += 1
        section = SectionWrite(stream, f"obj{self.objects}", 0, 1000, publishes)
        outcomes = await self.committer.commit_sections([section])
        return outcomes[stream]

    async def change(self, stream: str, planner: Any) -> Any:
        return await self.committer.change_stream(stream, planner)


def summary(view: StreamView) -> dict[str, Any]:
    """Everything a view answers about its stream (a question of views: see `answered`)."""
    live = list(view.live_seqs())
    per_subject = view.subjects_matching("")
    return {
        "uid": view.uid,
        "first_seq": view.first_seq,
        "last_seq": view.last_seq,
        "msgs": view.msgs,
        "bytes": view.bytes,
        "num_subjects": view.num_subjects,
        "tombs": sorted(t for t in view.tombstones() if view.first_seq <= t <= view.last_seq),
        "live": live,
        "per_subject": per_subject,
        "last_for": {s: view.last_for(s) for s in per_subject},
        "records": [(s, view.subject_of(s), view.size_of(s), view.ts_of(s)) for s in live],
        "sections": [(s.key, s.first, s.last) for s in view.sections_from(view.first_seq)],
        "first_ts": view.first_ts,
        "state": view.state,
    }


async def answered(catalog: Catalog, view: StreamView) -> dict[str, Any]:
    return await catalog.answer(lambda: summary(view))


async def fresh_load(catalog: Catalog, stream: str) -> dict[str, Any]:
    """What a view built afresh from metadata alone (another agent's) answers."""
    other = Catalog(catalog.meta, GROUP)
    await other.refresh(force=True)
    view = await other.view(stream)
    assert view is not None
    return await answered(other, view)


async def assert_records_exact(catalog: Catalog, stream: str, facts: dict[str, Any]) -> None:
    """The stream's subject records in metadata: one per live subject, its count exact, its
    first and last bounds around its live messages."""
    keys = catalog.keys(stream)
    stored = {
        i.key[len(keys.subject_prefix) :]: decode_subject(i.value)
        for i in await catalog.meta.range(keys.subject_prefix)
    }
    assert {s: r.count for s, r in stored.items()} == facts["per_subject"]
    for subject, record in stored.items():
        seqs = [seq for seq, subj, *_ in facts["records"] if subj == subject]
        assert record.first <= seqs[0] and seqs[-1] <= record.last, subject


async def assert_view_matches_metadata(catalog: Catalog, stream: str) -> StreamView:
    kept = catalog.cached_view(stream)
    assert kept is not None
    facts = await answered(catalog, kept)
    assert facts == await fresh_load(catalog, stream)
    await assert_records_exact(catalog, stream, facts)
    state = kept.state
    assert (state.first_seq, state.last_seq, state.msgs, state.bytes, state.num_subjects) == (
        kept.first_seq,
        kept.last_seq,
        kept.msgs,
        kept.bytes,
        kept.num_subjects,
    )
    assert state.num_deleted == kept.last_seq - kept.first_seq + 1 - kept.msgs
    return kept


def deleting(*seqs: int) -> Any:
    def planner(_entry: Any, changes: Changes) -> None:
        for seq in seqs:
            assert changes.kill(seq), seq

    return planner


def purging(filter_subject: str = "", up_to: int = 0, keep: int = 0) -> Any:
    return lambda _entry, changes: purge(changes, filter_subject, up_to, keep)


async def test_view_after_publishes_equals_a_fresh_load(meta: SqliteMetadataStore) -> None:
    catalog = await make_stream(meta, "S", subjects=["s.>"])
    writer = Writer(catalog)
    outcomes = await writer.publish("S", ["s.a", "s.b", "s.a"])
    assert [o.seq for o in outcomes] == [1, 2, 3]
    outcomes = await writer.publish("S", ["s.c", "s.a"])
    assert [o.seq for o in outcomes] == [4, 5]
    view = await assert_view_matches_metadata(catalog, "S")
    assert (view.msgs, view.last_seq, view.num_subjects) == (5, 5, 3)


async def test_view_after_refused_publishes_equals_a_fresh_load(meta: SqliteMetadataStore) -> None:
    catalog = await make_stream(meta, "S", subjects=["s.>"], max_msg_size=100)
    writer = Writer(catalog)
    headers: list[dict[str, str] | None] = [
        None,
        {"Nats-Msg-Id": "one"},
        {"Nats-Msg-Id": "one"},
        {"Nats-Expected-Last-Sequence": "9"},
        None,
    ]
    outcomes = await writer.publish("S", ["s.a", "s.b", "s.c", "s.d", "s.e"], headers)
    assert [(o.seq, o.duplicate, o.error is None) for o in outcomes] == [
        (1, False, True),
        (2, False, True),
        (2, True, True),
        (0, False, False),
        (3, False, True),
    ]
    view = await assert_view_matches_metadata(catalog, "S")
    assert [view.subject_of(s) for s in (1, 2, 3)] == ["s.a", "s.b", "s.e"]


async def test_view_after_deletes_equals_a_fresh_load(meta: SqliteMetadataStore) -> None:
    catalog = await make_stream(meta, "S", subjects=["s.>"])
    writer = Writer(catalog)
    await writer.publish("S", ["s.a", "s.b", "s.a", "s.c"])
    await writer.publish("S", ["s.b", "s.a"])
    await writer.change("S", deleting(3, 5))
    view = await assert_view_matches_metadata(catalog, "S")
    assert view.tombs == {3, 5}
    # Deleting the head moves it past the tombstone at 3.
    await writer.change("S", deleting(1, 2))
    view = await assert_view_matches_metadata(catalog, "S")
    assert (view.first_seq, view.msgs) == (4, 2)


async def test_view_after_purges_equals_a_fresh_load(meta: SqliteMetadataStore) -> None:
    catalog = await make_stream(meta, "S", subjects=["s.>"])
    writer = Writer(catalog)
    for _ in range(3):
        await writer.publish("S", ["s.a", "s.b", "s.c"])
    assert await writer.change("S", purging("s.b")) == 3
    await assert_view_matches_metadata(catalog, "S")
    assert await writer.change("S", purging(keep=4)) == 2
    await assert_view_matches_metadata(catalog, "S")
    assert await writer.change("S", purging("s.a", up_to=7)) == 1
    await assert_view_matches_metadata(catalog, "S")
    assert await writer.change("S", purging(up_to=50)) == 3
    view = await assert_view_matches_metadata(catalog, "S")
    assert (view.first_seq, view.last_seq) == (50, 49)
    # Every index entry went with the purge, and every subject record.
    keys = catalog.keys("S")
    assert await meta.range(keys.index_prefix) == await meta.range(keys.subject_prefix) == []
    outcomes = await writer.publish("S", ["s.z"])
    assert outcomes[0].seq == 50
    await assert_view_matches_metadata(catalog, "S")


async def test_view_after_limits_and_rollups_equals_a_fresh_load(meta: SqliteMetadataStore) -> None:
    catalog = await make_stream(
        meta, "S", subjects=["s.>"], max_msgs=6, max_msgs_per_subject=2, allow_rollup_hdrs=True
    )
    writer = Writer(catalog)
    await writer.publish("S", ["s.a", "s.a", "s.a", "s.b", "s.c", "s.d", "s.e"])
    view = await assert_view_matches_metadata(catalog, "S")
    assert view.subjects_matching("") == {"s.a": 2, "s.b": 1, "s.c": 1, "s.d": 1, "s.e": 1}
    await writer.publish("S", ["s.b", "s.f"], [{"Nats-Rollup": "sub"}, None])
    view = await assert_view_matches_metadata(catalog, "S")
    assert view.subjects_matching("s.b") == {"s.b": 1}
    await writer.publish("S", ["s.g", "s.h"], [None, {"Nats-Rollup": "all"}])
    view = await assert_view_matches_metadata(catalog, "S")
    assert (view.msgs, view.first_seq, view.last_seq) == (1, 11, 11)


async def test_lowered_limits_applied_by_update_equal_a_fresh_load(
    meta: SqliteMetadataStore,
) -> None:
    catalog = await make_stream(meta, "S", subjects=["s.>"])
    writer = Writer(catalog)
    await writer.publish("S", [f"s.{i % 3}" for i in range(10)])
    await writer.change("S", deleting(5))
    lowered = normalize(StreamConfig(name="S", subjects=["s.>"], max_msgs_per_subject=2))
    keys = catalog.keys("S")
    record = StreamRecord(config=lowered, created_ns=1, uid="uid1")
    assert (
        await meta.txn(
            [], [Put(keys.config, records.encode(record)), Put(catalog_key(GROUP), b"2")]
        )
    ).succeeded
    await catalog.refresh()
    await writer.change("S", enforce_limits)
    view = await assert_view_matches_metadata(catalog, "S")
    assert view.subjects_matching("") == {"s.0": 2, "s.1": 2, "s.2": 2}


async def test_another_agent_catches_up_to_the_same_view(
    meta: SqliteMetadataStore, tmp_path: Path
) -> None:
    catalog = await make_stream(meta, "S", subjects=["s.>"])
    writer = Writer(catalog)
    await writer.publish("S", ["s.a", "s.b", "s.c"])
    # A second agent, with its own store handle, reads the stream now...
    other_meta = SqliteMetadataStore(tmp_path / "meta.db")
    try:
        other = Catalog(other_meta, GROUP)
        await other.refresh(force=True)
        stale = await other.view("S")
        assert stale is not None and stale.msgs == 3
        # ...and again after the first agent published, deleted and purged more.
        await writer.publish("S", ["s.a", "s.d", "s.b"])
        await writer.change("S", deleting(5))
        await writer.change("S", purging("s.a"))
        await writer.publish("S", ["s.e"])
        # A view of what it knew, brought up to date by the state alone: it reads again
        # whatever the commits it missed may have changed.
        caught_up = await other.view("S")
        assert caught_up is stale
        mine = await assert_view_matches_metadata(catalog, "S")
        assert await answered(other, caught_up) == await answered(catalog, mine)
    finally:
        await other_meta.close()


async def test_a_recreated_stream_is_loaded_afresh(meta: SqliteMetadataStore) -> None:
    catalog = await make_stream(meta, "S", subjects=["s.>"])
    writer = Writer(catalog)
    await writer.publish("S", ["s.a", "s.b"])
    old = catalog.cached_view("S")
    assert old is not None
    keys = catalog.keys("S")
    fresh_state = StreamState(uid="uid2", first_seq=1, last_seq=0)
    assert (await meta.txn([], [Put(keys.state, records.encode(fresh_state))])).succeeded
    for item in await meta.range(keys.index_prefix, keys_only=True):
        assert (await meta.txn([], [Delete(item.key)])).succeeded
    state_item = await meta.get(keys.state)
    assert state_item is not None
    view = catch_up(old, state_item)
    assert (view.uid, view.msgs, view.last_seq) == ("uid2", 0, 0)
    assert await catalog.answer(lambda: list(view.sections_from(1))) == []


async def test_load_then_catch_up_equals_a_fresh_load(meta: SqliteMetadataStore) -> None:
    # Another agent loads the view, then this one commits before the other catches up.
    catalog = await make_stream(meta, "S", subjects=["s.>"])
    writer = Writer(catalog)
    await writer.publish("S", ["s.a", "s.b", "s.c"])
    other = Catalog(meta, GROUP)
    await other.refresh(force=True)
    view = await other.view("S")
    assert view is not None
    await other.answer(lambda: summary(view))
    await writer.publish("S", ["s.a", "s.d"])
    assert await other.view("S") is view
    assert await answered(other, view) == await fresh_load(catalog, "S")
    assert (view.msgs, view.last_seq) == (5, 5)


async def test_load_then_a_purge_catches_up(meta: SqliteMetadataStore) -> None:
    # Between the other agent's load and its catch-up, this one purges the head away.
    catalog = await make_stream(meta, "S", subjects=["s.>"])
    writer = Writer(catalog)
    await writer.publish("S", ["s.a", "s.b", "s.c"])
    await writer.publish("S", ["s.a", "s.d", "s.e"])
    other = Catalog(meta, GROUP)
    await other.refresh(force=True)
    view = await other.view("S")
    assert view is not None
    await other.answer(lambda: summary(view))
    assert await writer.change("S", purging(up_to=4)) == 3
    assert await other.view("S") is view
    assert await answered(other, view) == await fresh_load(catalog, "S")
    assert (view.first_seq, view.msgs) == (4, 3)


async def test_two_agents_committing_at_once_keep_their_views_right(tmp_path: Path) -> None:
    meta_a = SqliteMetadataStore(tmp_path / "shared.db")
    meta_b = SqliteMetadataStore(tmp_path / "shared.db")
    try:
        catalog_a = await make_stream(meta_a, "S", subjects=["s.>"])
        catalog_b = Catalog(meta_b, GROUP)
        await catalog_b.refresh(force=True)
        writer_a, writer_b = Writer(catalog_a), Writer(catalog_b)

        async def agent_a() -> None:
            for i in range(40):
                await writer_a.publish("S", [f"s.a{i % 3}", "s.x"])
                if i % 4 == 3:
                    await writer_a.change("S", purging(keep=5))

        async def agent_b() -> None:
            for i in range(40):
                await writer_b.publish("S", [f"s.b{i % 2}"])
                if i % 6 == 5:
                    await writer_b.change("S", purging("s.x"))

        await asyncio.gather(agent_a(), agent_b())
        for catalog in (catalog_a, catalog_b):
            view = await catalog.view("S")
            assert view is not None
            facts = await answered(catalog, view)
            assert facts == await fresh_load(catalog, "S")
            await assert_records_exact(catalog, "S", facts)
            assert view.msgs == len(facts["live"])
            assert view.state.msgs == view.msgs
    finally:
        await meta_a.close()
        await meta_b.close()


def delete_two_live(rng: random.Random) -> Any:
    def planner(_entry: Any, changes: Changes) -> None:
        live = [s for s in range(changes.first_seq, changes.last_seq + 1) if changes.is_live(s)]
        for seq in rng.sample(live, min(2, len(live))):
            changes.kill(seq)

    return planner


@pytest.mark.parametrize("seed", range(4))
async def test_three_agents_doing_everything_at_once_keep_their_views_right(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    stores = [SqliteMetadataStore(tmp_path / "shared.db") for _ in range(3)]
    try:
        first = await make_stream(
            stores[0], "S", subjects=["s.>"], max_msgs=30, max_msgs_per_subject=4
        )
        catalogs = [first]
        for store in stores[1:]:
            catalog = Catalog(store, GROUP)
            await catalog.refresh(force=True)
            catalogs.append(catalog)
        writers = [Writer(c) for c in catalogs]

        async def agent(writer: Writer) -> None:
            for _ in range(30):
                roll = rng.random()
                if roll < 0.6:
                    subjects = [f"s.{rng.randint(0, 6)}" for _ in range(rng.randint(1, 4))]
                    await writer.publish("S", subjects)
                elif roll < 0.75:
                    await writer.change("S", delete_two_live(rng))
                elif roll < 0.85:
                    await writer.change("S", purging(keep=rng.randint(0, 8)))
                elif roll < 0.92:
                    await writer.change("S", purging(f"s.{rng.randint(0, 6)}"))
                else:
                    await writer.change("S", purging(up_to=rng.randint(1, 200)))

        await asyncio.gather(*(agent(w) for w in writers))
        for catalog in catalogs:
            view = await catalog.view("S")
            assert view is not None
            facts = await answered(catalog, view)
            assert facts == await fresh_load(catalog, "S")
            await assert_records_exact(catalog, "S", facts)
            assert view.state.msgs == view.msgs == len(facts["live"])
    finally:
        for store in stores:
            await store.close()
