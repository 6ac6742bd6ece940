"""The erase job's plan: which objects hold erased bytes, and which index entries (of every
stream) are rewritten so those objects can go."""

from __future__ import annotations

from array import array
from dataclasses import replace

from infinistream.jetstream.api import StreamConfig
from infinistream.pipeline.compaction.plan import Chunk, CompactSettings
from infinistream.pipeline.erase.plan import Pending, plan_erase
from infinistream.stream.erase import EraseRequest
from infinistream.stream.loader import EntryRef, StreamSnapshot
from infinistream.stream.records import IndexEntry, StreamKeys, StreamState

SETTINGS = CompactSettings()


def name(obj: str) -> str:
    """`l0/f1` -> an object key of that level: `default/objects/l0/{time}-f1.iso`."""
    level, tail = obj.split("/")
    return f"default/objects/{level}/{1_700_000_000 * 10**9:020d}-{tail}.iso"


def entry(obj: str, first: int, n: int, size: int = 100) -> IndexEntry:
    return IndexEntry(
        obj=name(obj),
        offset=8,
        length=n * size,
        first_seq=first,
        ts=1,
        subjects=["s.x"],
        subject_ids=array("I", [0] * n).tobytes(),
        lengths=array("I", [size] * n).tobytes(),
    )


def snapshot(stream: str, entries: list[IndexEntry]) -> StreamSnapshot:
    keys = StreamKeys("default", stream)
    last = max(e.first_seq + len(e.length_array()) - 1 for e in entries)
    return StreamSnapshot(
        name=stream,
        keys=keys,
        config=StreamConfig(name=stream, subjects=[f"{stream.lower()}.>"]),
        created_ns=0,
        state=StreamState(uid=f"uid-{stream}", first_seq=1, last_seq=last),
        state_revision=1,
        entries=[EntryRef(keys.index(e.first_seq), i + 2, e) for i, e in enumerate(entries)],
        tombstones=frozenset(),
    )


def pending(
    stream: str, seqs: list[tuple[int, int]], holders: list[str] = (), uid: str = ""
) -> Pending:  # type: ignore[assignment]
    request = EraseRequest(
        stream=stream,
        uid=uid or f"uid-{stream}",
        ranges=seqs,
        requested_ns=1,
        kind="delete",
        holders=[name(h) for h in holders],
    )
    return Pending(f"default/erase/{stream}/{len(seqs)}", 1, request)


def rewritten(plan_chunks: list[Chunk], stream: str) -> list[list[int]]:
    return [
        [s.index_entry().first_seq for s in c.sources] for c in plan_chunks if c.stream == stream
    ]


def test_every_stream_with_entries_in_a_holding_object_is_rewritten() -> None:
    # Two flushes (L0 objects shared by A and B) and a compacted object of A.
    a = snapshot("A", [entry("l0/f1", 1, 10), entry("l0/f2", 11, 10), entry("l1/c", 21, 50)])
    b = snapshot("B", [entry("l0/f1", 1, 5), entry("l0/f2", 6, 5)])
    plan = plan_erase([a, b], [pending("A", [(3, 3)])], "default", SETTINGS)
    assert plan.targets == {name("l0/f1")}
    # A's entry in f1 and B's entry in f1; f2 and the compacted object stay as they are.
    assert rewritten(plan.chunks, "A") == [[1]]
    assert rewritten(plan.chunks, "B") == [[1]]
    (chunk_a,) = [c for c in plan.chunks if c.stream == "A"]
    assert not chunk_a.is_live(3) and chunk_a.is_live(4)
    (chunk_b,) = [c for c in plan.chunks if c.stream == "B"]
    assert chunk_b.is_live(3)  # sequence 3 of B is not erased: only A's is
    assert [c.id for c in plan.chunks] == list(range(len(plan.chunks)))


def test_compacted_objects_and_runs_of_consecutive_entries() -> None:
    # Sequences 30..75 erased: the compacted object holds them, and two L0 entries after it.
    a = snapshot(
        "A",
        [
            entry("l0/f1", 1, 20),
            entry("l1/c", 21, 50),
            entry("l0/f3", 71, 10),
            entry("l0/f4", 81, 10),
        ],
    )
    plan = plan_erase([a], [pending("A", [(30, 75)])], "default", SETTINGS)
    assert plan.targets == {name("l1/c"), name("l0/f3")}
    assert rewritten(plan.chunks, "A") == [[21, 71]]
    (chunk,) = plan.chunks
    assert chunk.level == 2  # not all L0
    assert not any(chunk.is_live(s) for s in range(30, 76)) and chunk.is_live(76)


def test_holders_found_earlier_and_gone_streams() -> None:
    a = snapshot("A", [entry("l0/f1", 1, 10), entry("l0/f2", 11, 10)])
    # A request of a stream since deleted: its holder is still referenced by A (a shared L0
    # object), so A's entry there is rewritten too.
    gone = pending("OLD", [(1, 5)], holders=("l0/f2", "l0/unreferenced"))
    # A request of A's earlier incarnation: its sequences mean nothing in this one.
    before = pending("A", [(1, 1)], uid="uid-earlier")
    plan = plan_erase([a], [gone, before], "default", SETTINGS)
    assert plan.targets == {name("l0/f2")}
    assert rewritten(plan.chunks, "A") == [[11]]
    assert plan.found[gone.key] == {name("l0/f2")}
    assert plan.found[before.key] == set()
    (chunk,) = plan.chunks
    assert chunk.is_live(11) and chunk.is_live(1 + 10)


def test_a_run_is_cut_to_stay_one_swap_transaction() -> None:
    a = snapshot("A", [entry(f"l0/f{i}", 1 + 10 * i, 10) for i in range(10)])
    settings = replace(SETTINGS, max_entries=6)  # old entries + new ones per swap, at most
    # One message of each entry: each chunk's live records make one new entry (and one more
    # counted for the record limit), so at most four old ones go per swap.
    erased = [(1 + 10 * i, 1 + 10 * i) for i in range(10)]
    plan = plan_erase([a], [pending("A", erased)], "default", settings)
    runs = rewritten(plan.chunks, "A")
    assert [s for run in runs for s in run] == [1 + 10 * i for i in range(10)]
    assert [len(run) for run in runs] == [4, 4, 2]
