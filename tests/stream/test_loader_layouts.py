"""Where a view finds the index entry holding a sequence, over stream layouts that make a
lookup's read of the index look near or far: sections of one message, many small sections
before a long one, a section longer than any window a read looks through at once, gaps, and
commits that land between a view's state and its read. Each answer is checked against the
layout itself, alone and as a page, and the pages a view holds never overlap.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from infinistream.metadata import open_metadata
from infinistream.metadata.kv import MetadataStore, Op, Put, Read, Snapshot
from infinistream.pipeline.compaction.plan import DEFAULT_ENTRY_RECORDS
from infinistream.stream import records
from infinistream.stream.loader import load_view
from infinistream.stream.records import SectionEntry, StreamKeys, StreamState
from infinistream.stream.sections import OPEN
from infinistream.stream.view import StreamView
from support.committers import Forwarding
from support.streamviews import answer

GROUP = "g"
KEYS = StreamKeys(GROUP, "S")
T = TypeVar("T")
# Longer than any window a lookup reads at once: the lookup must still find its start.
LONG = 1 << 25


class Counted(Forwarding):
    """A metadata store that counts its snapshots and can commit `ops` just before the next."""

    def __init__(self, inner: MetadataStore) -> None:
        super().__init__(inner)
        self.snapshots = 0
        self.before_read: list[Op] = []

    async def snapshot(self, reads: list[Read]) -> Snapshot:
        self.snapshots += 1
        ops, self.before_read = self.before_read, []
        if ops:
            await self.inner.txn([], ops)
        return await self.inner.snapshot(reads)


def state(last: int) -> bytes:
    return records.encode(StreamState(uid="u1", first_seq=1, last_seq=last, msgs=last))


def spanning(first: int, last: int) -> SectionEntry:
    """The entry of a section holding sequences first..last, its detail in its directory."""
    return SectionEntry(
        obj=f"{GROUP}/objects/l0/{first:020d}-a-00000001-aaaaaa.iso",
        offset=8,
        length=100,
        plain_length=100,
        dir_length=40,
        records=last - first + 1,
        first_seq=first,
        last_seq=last,
        count=last - first + 1,
        size=100,
        ts=first,
        last_ts=last,
        names=("orders.eu", "orders.us"),
        counts=(5, 5),
    )


async def opened(ops: list[Op]) -> tuple[Counted, Callable[[], Awaitable[StreamView]]]:
    store = Counted(open_metadata("sqlite://:memory:"))
    await store.inner.txn([], ops)

    async def view() -> StreamView:
        item = await store.get(KEYS.state)
        assert item is not None
        return load_view(KEYS, item)

    return store, view


async def lookups(layout: list[tuple[int, int]], last: int, seqs: list[int]) -> None:
    """Fresh views of a stream of sections `layout` (first, last) up to `last` look up each of
    `seqs`, alone and then as pages; every answer is checked against the layout."""
    ops: list[Op] = [Put(KEYS.state, state(last))]
    ops += [Put(KEYS.index(a), records.encode(spanning(a, b))) for a, b in layout]
    store, fresh = await opened(ops)
    for lone in (True, False):
        view = await fresh()
        for seq in seqs:
            held = [a for a, b in layout if a <= seq <= b]
            section = await answer(store, view, partial(view.section_at, seq, lone=lone))
            assert (section and section.first) == (held[0] if held else None), (lone, seq)
        spans = [(p.lo, p.hi) for p in view.pages.pages]
        assert all(hi < lo for (_, hi), (lo, _) in itertools.pairwise(spans)), spans
    await store.close()


async def test_a_section_longer_than_a_lookup_looks_at_once_is_found() -> None:
    layout = [(1, 10), (11, 11 + LONG)]
    await lookups(layout, 11 + LONG, [5, 11, 12 + LONG // 2, 11 + LONG])


async def test_many_small_sections_before_a_long_one_are_told_apart() -> None:
    layout = [*((a, a) for a in range(1, 40)), (40, 100_000)]
    await lookups(layout, 100_000, [39, 40, 41, 90_000, 100_000, 1, 20])


async def test_gaps_hold_nothing_at_the_start_between_sections_and_after_the_last() -> None:
    layout = [(50, 60), (70, 75), (5_000, 5_001), (90_000, 90_009)]
    seqs = [1, 49, 50, 65, 75, 76, 5_001, 19_000, 90_005, 95_000, 100_000]
    await lookups(layout, 100_000, seqs)


async def test_sections_of_one_message_each() -> None:
    await lookups([(a, a) for a in range(1, 2_000)], 1_999, [1, 2, 1_000, 1_998, 1_999])


async def test_a_lookup_near_the_end_leaves_what_others_committed_since_to_be_read() -> None:
    # The view knows messages 1..100; another agent commits 101..200 just before its lookup
    # of 50: the page of 50 must not claim 101..200 for the section at 1.
    store, fresh = await opened(
        [Put(KEYS.state, state(100)), Put(KEYS.index(1), records.encode(spanning(1, 100)))]
    )
    view = await fresh()
    store.before_read = [
        Put(KEYS.state, state(200)),
        Put(KEYS.index(101), records.encode(spanning(101, 200))),
    ]
    section = await answer(store, view, partial(view.section_at, 50, lone=True))
    assert section is not None and section.first == 1
    section = await answer(store, view, partial(view.section_at, 150, lone=True))
    assert section is not None and section.first == 101
    spans = [(p.lo, p.hi) for p in view.pages.pages]
    assert spans[-1][1] == OPEN and all(
        hi < lo for (_, hi), (lo, _) in itertools.pairwise(spans)
    ), spans
    await store.close()


async def test_a_fresh_view_finds_a_compacted_section_in_one_read() -> None:
    # Sections as long as compaction writes them: a cold get's lookup anywhere in one, by a
    # view that has read nothing yet, takes one read of the index (one metadata round trip).
    span = DEFAULT_ENTRY_RECORDS
    layout = [(1 + i * span, (i + 1) * span) for i in range(8)]
    last = layout[-1][1]
    ops: list[Op] = [Put(KEYS.state, state(last))]
    ops += [Put(KEYS.index(a), records.encode(spanning(a, b))) for a, b in layout]
    store, fresh = await opened(ops)
    for first, end in layout[1:]:
        for seq in (first, first + span // 2, end):
            view = await fresh()
            before = store.snapshots
            section = await answer(store, view, partial(view.section_at, seq, lone=True))
            assert section is not None and section.first == first, seq
            assert store.snapshots - before == 1, (seq, store.snapshots - before)
    await store.close()
