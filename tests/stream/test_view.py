"""StreamView on its own, and the view an agent keeps after its commits against a fresh load.

The second half drives the real Committer against a SqliteMetadataStore in a temporary directory
(no object storage: a commit only records where sections are) and checks that the view each
commit leaves in the catalog is the view the loader builds from metadata alone (invariant 4).
"""

from __future__ import annotations

import asyncio
import random
from array import array
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import pytest

from infinistream.jetstream.api import StreamConfig
from infinistream.metadata import Delete, Put, SqliteMetadataStore
from infinistream.protocol import encode_headers
from infinistream.stream import records
from infinistream.stream.catalog import Catalog
from infinistream.stream.changes import Changes
from infinistream.stream.committer import Committer, SectionWrite
from infinistream.stream.config import normalize
from infinistream.stream.limits import enforce_limits
from infinistream.stream.loader import catch_up, load_view
from infinistream.stream.publish_rules import Publish
from infinistream.stream.purge import purge
from infinistream.stream.records import IndexEntry, StreamRecord, StreamState, catalog_key
from infinistream.stream.view import Segment, StreamView

# -- helpers ----------------------------------------------------------------------------------


def index_entry(
    first_seq: int,
    subjects: list[str],
    sizes: list[int] | None = None,
    *,
    skipped: Iterable[int] = (),
    ts: int = 1_000,
    obj: str = "obj",
) -> IndexEntry:
    """An index entry for a section whose records have these subjects (skipped ones included)."""
    names: dict[str, int] = {}
    ids = array("I", (names.setdefault(s, len(names)) for s in subjects))
    lengths = array("I", sizes if sizes is not None else [10] * len(subjects))
    return IndexEntry(
        obj=obj,
        offset=0,
        length=sum(lengths),
        first_seq=first_seq,
        ts=ts,
        subjects=list(names),
        subject_ids=ids.tobytes(),
        lengths=lengths.tobytes(),
        skipped=list(skipped),
    )


def segment(
    first_seq: int, subjects: list[str], sizes: list[int] | None = None, **kw: Any
) -> Segment:
    entry = index_entry(first_seq, subjects, sizes, **kw)
    return Segment.from_entry(f"key-{first_seq}", entry)


def empty_view(first_seq: int = 1) -> StreamView:
    return StreamView(StreamState(uid="u", first_seq=first_seq, last_seq=first_seq - 1), 1)


def view_of(*subject_runs: list[str]) -> StreamView:
    """A view with one segment per run, sequences from 1, every record 10 bytes."""
    view = empty_view()
    for run in subject_runs:
        view.add_segment(segment(view.last_seq + 1, run))
    return view


# -- building ---------------------------------------------------------------------------------


def test_segment_gives_consecutive_sequences() -> None:
    view = view_of(["a", "b", "a"], ["c"])
    assert (view.first_seq, view.last_seq) == (1, 4)
    assert [view.subject_of(s) for s in range(1, 5)] == ["a", "b", "a", "c"]
    assert (view.msgs, view.bytes, view.num_subjects) == (4, 40, 3)


def test_sizes_and_stamps_follow_the_entry() -> None:
    view = empty_view()
    view.add_segment(segment(1, ["a", "b", "c"], [5, 7, 9], ts=500))
    assert [view.size_of(s) for s in (1, 2, 3)] == [5, 7, 9]
    assert [view.ts_of(s) for s in (1, 2, 3)] == [500, 501, 502]
    assert view.first_ts == 500
    assert view.bytes == 21


def test_skipped_records_take_no_sequence() -> None:
    seg = segment(1, ["a", "x", "b", "y"], [5, 6, 7, 8], skipped=[1, 3])
    assert (seg.first, seg.last) == (1, 2)
    assert seg.subjects == ["a", "b"]
    # Offsets still point at the right records inside the section.
    assert list(seg.offsets) == [0, 11]
    assert list(seg.lengths) == [5, 7]
    view = empty_view()
    view.add_segment(seg)
    assert (view.msgs, view.bytes, view.last_seq) == (2, 12, 2)


def test_segment_for_finds_the_right_segment() -> None:
    view = view_of(["a", "a"], ["b"], ["c", "c", "c"])
    assert view.segment_for(1) is view.segments[0]
    assert view.segment_for(3) is view.segments[1]
    assert view.segment_for(6) is view.segments[2]
    assert view.segment_for(0) is None
    assert view.segment_for(7) is None


# -- kills ------------------------------------------------------------------------------------


def test_kill_inside_the_range_leaves_a_tombstone() -> None:
    view = view_of(["a", "b", "a", "c"])
    view.kill(2)
    assert not view.is_live(2)
    assert view.tombs == {2}
    assert (view.first_seq, view.last_seq, view.msgs, view.bytes) == (1, 4, 3, 30)
    assert list(view.live_seqs()) == [1, 3, 4]


def test_kill_of_the_first_moves_the_head_past_tombstones() -> None:
    view = view_of(["a", "b", "c", "d", "e"])
    view.kill(2)
    view.kill(3)
    view.kill(1)
    assert view.first_seq == 4
    assert view.tombs == set()
    assert view.msgs == 2


def test_kill_of_a_dead_message_changes_nothing() -> None:
    view = view_of(["a", "b", "c"])
    view.kill(2)
    view.kill(2)
    view.kill(99)
    assert (view.msgs, view.bytes, view.tombs) == (2, 20, {2})


def test_killing_the_last_message_of_a_subject_forgets_the_subject() -> None:
    view = view_of(["a", "b", "a"])
    view.kill(2)
    assert view.num_subjects == 1
    assert "b" not in view.by_subject
    assert view.subjects_matching("") == {"a": 2}
    # The subject comes back with a new message.
    view.add_segment(segment(4, ["b"]))
    assert view.subjects_matching("") == {"a": 2, "b": 1}
    assert view.last_for("b") == 4


def test_per_subject_counts_follow_kills() -> None:
    view = view_of(["a", "b", "a", "a", "b"])
    assert view.subjects_matching("") == {"a": 3, "b": 2}
    view.kill(1)
    view.kill(4)
    assert view.subjects_matching("") == {"a": 1, "b": 2}
    assert view.by_subject["a"].live == 1


def test_subject_head_skips_dead_sequences() -> None:
    view = view_of(["a", "a", "a", "b"])
    view.kill(1)
    view.kill(2)
    ss = view.by_subject["a"]
    assert ss.seqs[ss.head] == 3


def test_last_for_gives_the_last_live_message_of_a_subject() -> None:
    view = view_of(["a", "b", "a", "b"])
    assert view.last_for("a") == 3
    view.kill(3)
    assert view.last_for("a") == 1
    view.kill(1)
    assert view.last_for("a") == 0
    assert view.last_for("never") == 0


def test_live_seqs_with_start_and_filters() -> None:
    view = view_of(["s.a", "s.b"], ["s.a", "t.c", "s.b"])
    view.kill(3)
    assert list(view.live_seqs(2)) == [2, 4, 5]
    assert list(view.live_seqs(0, "s.b")) == [2, 5]
    assert list(view.live_seqs(3, "s.b")) == [5]
    assert list(view.live_seqs(0, "s.*")) == [1, 2, 5]
    assert list(view.live_seqs(0, ">")) == [1, 2, 4, 5]
    assert list(view.live_seqs(0, "nope")) == []


def test_subjects_matching_a_wildcard() -> None:
    view = view_of(["s.a", "s.b", "t.a", "s.a"])
    assert view.subjects_matching("s.*") == {"s.a": 2, "s.b": 1}
    assert view.subjects_matching("*.a") == {"s.a": 2, "t.a": 1}


def test_kill_below_deletes_the_head_and_drops_dead_segments() -> None:
    view = view_of(["a", "b"], ["c", "d"], ["e"])
    view.kill(4)
    view.kill_below(4)
    assert (view.first_seq, view.msgs) == (5, 1)
    assert [seg.first for seg in view.segments] == [5]
    assert view.tombs == set()


def test_kill_below_past_the_end_moves_the_end_too() -> None:
    view = view_of(["a", "b"])
    view.kill_below(10)
    assert (view.first_seq, view.last_seq, view.msgs, view.bytes) == (10, 9, 0, 0)
    assert view.segments == []
    assert view.num_subjects == 0


def test_dead_segments_below_names_wholly_dead_segments() -> None:
    view = view_of(["a", "b"], ["c", "d"])
    assert [s.first for s in view.dead_segments_below(3)] == [1]
    assert [s.first for s in view.dead_segments_below(4)] == [1]
    assert [s.first for s in view.dead_segments_below(5)] == [1, 3]


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
    live = list(view.live_seqs())
    return {
        "uid": view.uid,
        "first_seq": view.first_seq,
        "last_seq": view.last_seq,
        "msgs": view.msgs,
        "bytes": view.bytes,
        "num_subjects": view.num_subjects,
        "tombs": sorted(t for t in view.tombs if view.first_seq <= t <= view.last_seq),
        "live": live,
        "per_subject": view.subjects_matching(""),
        "last_for": {s: view.last_for(s) for s in view.by_subject},
        "records": [(s, view.subject_of(s), view.size_of(s), view.ts_of(s)) for s in live],
        "segments": [
            (seg.key, seg.first, seg.last) for seg in view.segments if seg.last >= view.first_seq
        ],
        "first_ts": view.first_ts,
        "state": view.state,
    }


async def fresh_load(catalog: Catalog, stream: str) -> StreamView:
    return await load_view(catalog.meta, catalog.keys(stream))


async def assert_view_matches_metadata(catalog: Catalog, stream: str) -> StreamView:
    kept = catalog.cached_view(stream)
    assert kept is not None
    loaded = await fresh_load(catalog, stream)
    assert summary(kept) == summary(loaded)
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


def kill(*seqs: int) -> Any:
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
    await writer.change("S", kill(3, 5))
    view = await assert_view_matches_metadata(catalog, "S")
    assert view.tombs == {3, 5}
    # Deleting the head moves it past the tombstone at 3.
    await writer.change("S", kill(1, 2))
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
    assert (view.first_seq, view.last_seq, view.segments) == (50, 49, [])
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
    await writer.change("S", kill(5))
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
        await writer.change("S", kill(5))
        await writer.change("S", purging("s.a"))
        await writer.publish("S", ["s.e"])
        caught_up = await catch_up(other_meta, other.keys("S"), stale)
        mine = await assert_view_matches_metadata(catalog, "S")
        assert summary(caught_up) == summary(mine)
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
    view = await catch_up(meta, keys, old)
    assert view is not old
    assert (view.uid, view.msgs, view.last_seq) == ("uid2", 0, 0)


async def state_item_of(catalog: Catalog, stream: str) -> Any:
    item = await catalog.meta.get(catalog.keys(stream).state)
    assert item is not None
    return item


async def test_load_then_catch_up_equals_a_fresh_load(meta: SqliteMetadataStore) -> None:
    # Another agent loads the view, then this one commits before the other catches up.
    catalog = await make_stream(meta, "S", subjects=["s.>"])
    writer = Writer(catalog)
    await writer.publish("S", ["s.a", "s.b", "s.c"])
    keys = catalog.keys("S")
    view = await load_view(meta, keys)
    await writer.publish("S", ["s.a", "s.d"])
    view = await catch_up(meta, keys, view)
    assert summary(view) == summary(await fresh_load(catalog, "S"))
    assert (view.msgs, view.last_seq) == (5, 5)


async def test_load_then_a_purge_catches_up(meta: SqliteMetadataStore) -> None:
    # Between the other agent's load and its catch-up, this one purges the head away.
    catalog = await make_stream(meta, "S", subjects=["s.>"])
    writer = Writer(catalog)
    await writer.publish("S", ["s.a", "s.b", "s.c"])
    await writer.publish("S", ["s.a", "s.d", "s.e"])
    keys = catalog.keys("S")
    view = await load_view(meta, keys)
    assert await writer.change("S", purging(up_to=4)) == 3
    view = await catch_up(meta, keys, view)
    assert summary(view) == summary(await fresh_load(catalog, "S"))
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
            loaded = await fresh_load(catalog, "S")
            assert summary(view) == summary(loaded)
            assert view.msgs == len(list(view.live_seqs()))
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
            assert summary(view) == summary(await fresh_load(catalog, "S"))
            assert view.state.msgs == view.msgs == len(list(view.live_seqs()))
    finally:
        for store in stores:
            await store.close()
