"""Compaction planning on the driver: which index entries of a snapshot are rewritten, in
which chunks. Snapshots are built by hand: no store, no Spark."""

from __future__ import annotations

from array import array
from dataclasses import replace
from typing import Any

from infinistream.jetstream.api import StreamConfig
from infinistream.pipeline.compaction.plan import CompactSettings, plan_stream
from infinistream.stream.loader import EntryRef, StreamSnapshot
from infinistream.stream.records import IndexEntry, StreamKeys, StreamState

SETTINGS = CompactSettings(min_age_ns=0, target_bytes=3 * 1024, entry_bytes=1024)


NOW = 2_000_000_000 * 10**9
MIN = 60 * 10**9


def l0_entry(
    first: int, n: int, *, size: int = 100, level: int = 0, age: int = 2 * MIN
) -> IndexEntry:
    """`n` records of `size` bytes, alone in an object of that level and age."""
    written = NOW - age
    return IndexEntry(
        obj=f"default/objects/l{level}/{written:020d}-a-{first:08d}.iso",
        offset=8,
        length=n * size,
        first_seq=first,
        ts=written,
        subjects=["s.x"],
        subject_ids=array("I", [0] * n).tobytes(),
        lengths=array("I", [size] * n).tobytes(),
    )


def snapshot_of(
    entries: list[IndexEntry], *, tombs: frozenset[int] = frozenset(), first: int = 1, **cfg: Any
) -> StreamSnapshot:
    keys = StreamKeys("default", "P")
    last = max(e.first_seq + len(e.length_array()) - 1 for e in entries)
    state = StreamState(uid="u", first_seq=first, last_seq=last, tomb_rev=1 if tombs else 0)
    return StreamSnapshot(
        name="P",
        keys=keys,
        config=StreamConfig(name="P", subjects=["s.>"], **cfg),
        created_ns=0,
        state=state,
        state_revision=1,
        entries=[EntryRef(keys.index(e.first_seq), i + 2, e) for i, e in enumerate(entries)],
        tombstones=tombs,
    )


def chunk_firsts(snap: StreamSnapshot, **settings: Any) -> list[list[int]]:
    plan = plan_stream(snap, "default", replace(SETTINGS, **settings), NOW)
    return [[s.index_entry().first_seq for s in c.sources] for c in plan.chunks]


def test_plan_cuts_runs_of_old_entries_into_chunks() -> None:
    # Ten L0 entries of 1000 live bytes; the last two are too young.
    entries = [l0_entry(1 + 10 * i, 10, age=(2 if i < 8 else 0) * MIN) for i in range(10)]
    snap = snapshot_of(entries)
    assert chunk_firsts(snap, target_bytes=3000, min_age_ns=MIN) == [
        [1, 11, 21],
        [31, 41, 51],
        [61, 71],
    ]
    # The swap's transaction size bounds a chunk too: old entries plus new ones.
    limits = {"target_bytes": 10**6, "entry_bytes": 10**6, "max_entries": 5}
    assert chunk_firsts(snap, min_age_ns=MIN, **limits) == [[1, 11, 21], [31, 41, 51], [61, 71]]
    # A young entry splits runs; tombstones and a moved head shrink what is live.
    tombs = frozenset(range(11, 21))
    snap = snapshot_of(entries, tombs=tombs, first=6)
    plan = plan_stream(snap, "default", replace(SETTINGS, target_bytes=2000, min_age_ns=MIN), NOW)
    assert [c.live_bytes for c in plan.chunks] == [1500, 2000, 2000, 1000]
    assert plan.chunks[0].tombstones == tombs and plan.chunks[1].tombstones == frozenset()
    # Entries of a max_age stream that expire within the margin are left to expiry.
    snap = snapshot_of(entries, max_age=4 * MIN)
    assert chunk_firsts(snap, min_age_ns=MIN, expiry_margin_ns=3 * MIN) == []
    assert chunk_firsts(snap, min_age_ns=MIN, expiry_margin_ns=MIN) == [
        [1, 11, 21],
        [31, 41, 51],
        [61, 71],
    ]


def test_plan_merges_only_small_compacted_objects() -> None:
    big = [l0_entry(1 + 10 * i, 10, level=1) for i in range(3)]  # three L1 objects
    small = l0_entry(31, 2, level=1)
    young = l0_entry(33, 5, age=0)
    snap = snapshot_of([*big, small, young])
    # 1000-byte L1 objects are small for a 6000-byte target (< 1500) and merge into L2 ...
    plan = plan_stream(snap, "default", replace(SETTINGS, target_bytes=6000, min_age_ns=MIN), NOW)
    assert [(len(c.sources), c.level) for c in plan.chunks] == [(4, 2)]
    # ... not for a 3000-byte one (< 750): only the small one is, and alone it is not worth it.
    plan = plan_stream(snap, "default", replace(SETTINGS, target_bytes=3000, min_age_ns=MIN), NOW)
    assert plan.chunks == []
    # An L1 object that is mostly dead is rewritten alone; --no-recompact leaves it.
    snap = snapshot_of([*big, small], tombs=frozenset(range(11, 18)))
    plan = plan_stream(snap, "default", replace(SETTINGS, target_bytes=3000, min_age_ns=MIN), NOW)
    assert [[s.index_entry().first_seq for s in c.sources] for c in plan.chunks] == [[11]]
    assert chunk_firsts(snap, target_bytes=3000, min_age_ns=MIN, recompact=False) == []


def test_upgrading_the_index_rewrites_compacted_entries_of_the_old_form() -> None:
    # Three large L1 objects, each in the form of before record directories: left alone by
    # default, rewritten (each alone: none is worth merging) when upgrading the index.
    big = [l0_entry(1 + 10 * i, 10, level=1) for i in range(3)]
    snap = snapshot_of(big)
    assert chunk_firsts(snap, target_bytes=3000, min_age_ns=MIN) == []
    upgraded = chunk_firsts(snap, target_bytes=1000, min_age_ns=MIN, upgrade_index=True)
    assert upgraded == [[1], [11], [21]]
    # Too young is too young, upgrading or not.
    assert chunk_firsts(snap, min_age_ns=3 * MIN, upgrade_index=True) == []


def test_a_chunk_without_corrupt_entries_keeps_what_is_left_worth_rewriting() -> None:
    entries = [l0_entry(1 + 10 * i, 10) for i in range(6)]
    snap = snapshot_of(entries, tombs=frozenset({3, 14, 15, 27}), first=2)
    [chunk] = plan_stream(snap, "default", replace(SETTINGS, target_bytes=10**6), NOW).chunks
    assert (chunk.live_records, chunk.live_bytes, chunk.dead_bytes) == (55, 5500, 500)
    corrupt = StreamKeys("default", "P").index(31)
    before, after = chunk.without([corrupt], next_id=7)
    assert [s.index_entry().first_seq for s in before.sources] == [1, 11, 21]
    assert [s.index_entry().first_seq for s in after.sources] == [41, 51]
    # Live as the snapshot had it: below the head (seq 1) and tombstones (3, 14, 15, 27) dead.
    assert (before.id, before.live_records, before.live_bytes, before.dead_bytes) == (
        7,
        25,
        2500,
        500,
    )
    assert (after.id, after.live_records, after.live_bytes, after.dead_bytes) == (8, 20, 2000, 0)
    assert before.level == after.level == 1 and before.tombstones == chunk.tombstones
    # A compacted object alone with nothing dead is not worth rewriting again.
    l1 = snapshot_of([l0_entry(1, 10, level=1), l0_entry(11, 10, level=2)])
    [chunk] = plan_stream(l1, "default", replace(SETTINGS, target_bytes=10**6), NOW).chunks
    assert chunk.without([StreamKeys("default", "P").index(11)], next_id=0) == []
