"""The erase job, step one (on the driver): which objects still hold erased bytes, and the
chunks that rewrite every index entry pointing at them.

An object holds erased bytes when one of its sections, as some index entry describes it, has a
record of a sequence an erase request names (in the request's own stream incarnation), or when
a request listed it as a holder and some index entry still points at it. Every index entry of
every stream of the group that points at such an object is rewritten, not only the erased
stream's: an L0 object is shared by the streams of one flush, and it can be deleted only once
nothing references it.

The rewrite is compaction's (the same `Chunk`, task and swap): a run of consecutive entries
of one stream becomes one new per-stream object holding the live records, so a chunk never
spans entries it does not replace (index entries must not overlap). The erased sequences are
deleted already (tombstones, or below the stream's head); they are added to the chunk's
tombstones all the same, so a record erased after the snapshot was read is dropped too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from infinistream.pipeline.compaction.plan import (
    Chunk,
    CompactSettings,
    EntryInfo,
    Source,
    entry_info,
)
from infinistream.storage import Encryption, ObjectStore
from infinistream.storage.layout import level_of
from infinistream.stream import records
from infinistream.stream.compression import section_codec
from infinistream.stream.erase import EraseRequest, SeqRanges, entry_holds, merge_ranges
from infinistream.stream.loader import EntryRef, StreamSnapshot
from infinistream.stream.records import SectionEntry
from infinistream.stream.sections import Segment, read_segment


@dataclass
class Pending:
    """An erase request not yet rewritten, with its metadata key and revision."""

    key: str
    revision: int
    request: EraseRequest


@dataclass
class ErasePlan:
    # Objects that hold erased bytes and are still referenced by some index entry.
    targets: set[str] = field(default_factory=set)
    # Per request key: the holders found now (added to the request's own list).
    found: dict[str, set[str]] = field(default_factory=dict)
    chunks: list[Chunk] = field(default_factory=list)


def erased_in(snapshot: StreamSnapshot, pending: Iterable[Pending]) -> SeqRanges:
    """The sequences of `snapshot`'s incarnation that pending requests erase."""
    ranges = [
        r
        for p in pending
        if p.request.stream == snapshot.name and p.request.uid == snapshot.state.uid
        for r in p.request.ranges
    ]
    return SeqRanges(merge_ranges(ranges))


async def explicit_details(
    snapshots: Sequence[StreamSnapshot],
    pending: Sequence[Pending],
    objects: ObjectStore,
    keys: Encryption | None,
) -> dict[str, Segment]:
    """The detail of the sections whose record directories list their sequences (compacted
    ones, with gaps) and whose bounds overlap an erased range: what `entry_holds` needs to
    tell whether they hold an erased record. Read from their objects, by key."""
    by_name = {snap.name: snap for snap in snapshots}
    wanted: dict[str, EntryRef] = {}
    for p in pending:
        snap = by_name.get(p.request.stream)
        if snap is None or snap.state.uid != p.request.uid:
            continue
        ranges = SeqRanges(p.request.ranges)
        for ref in snap.entries:
            entry = ref.entry
            if (
                isinstance(entry, SectionEntry)
                and entry.explicit
                and ranges.overlaps(entry.first_seq, entry.last_seq)
            ):
                wanted[ref.key] = ref
    segs = await asyncio.gather(
        *(read_segment(objects, ref.key, ref.entry, keys) for ref in wanted.values())
    )
    return {seg.key: seg for seg in segs}


def plan_erase(
    snapshots: Sequence[StreamSnapshot],
    pending: Sequence[Pending],
    group: str,
    settings: CompactSettings,
    details: Mapping[str, Segment] | None = None,
) -> ErasePlan:
    plan = ErasePlan()
    referenced = {ref.entry.obj for snap in snapshots for ref in snap.entries}
    for p in pending:
        plan.found[p.key] = {obj for obj in p.request.holders if obj in referenced}
    by_name = {snap.name: snap for snap in snapshots}
    for p in pending:
        snap = by_name.get(p.request.stream)
        if snap is None or snap.state.uid != p.request.uid:
            continue  # the stream is gone: its entries went with it, the holders remain
        ranges = SeqRanges(p.request.ranges)
        plan.found[p.key] |= {
            ref.entry.obj
            for ref in snap.entries
            if entry_holds(ref.key, ref.entry, ranges, details)
        }
    for objs in plan.found.values():
        plan.targets |= objs
    chunks: list[Chunk] = []
    for snap in snapshots:
        chunks += _chunks_of(snap, plan.targets, erased_in(snap, pending), group, settings)
    plan.chunks = [replace(chunk, id=i) for i, chunk in enumerate(chunks)]
    return plan


def _chunks_of(
    snap: StreamSnapshot,
    targets: set[str],
    erased: SeqRanges,
    group: str,
    settings: CompactSettings,
) -> list[Chunk]:
    """Runs of consecutive entries of `snap` pointing at a target, cut to stay one swap
    transaction each."""
    tombs = sorted(snap.tombstones)
    state = snap.state
    runs: list[list[EntryRef]] = [[]]
    for ref in snap.entries:
        if ref.entry.obj in targets:
            runs[-1].append(ref)
        elif runs[-1]:
            runs.append([])
    out: list[Chunk] = []
    for run in runs:
        current: list[EntryInfo] = []
        for ref in run:
            info = entry_info(ref, state.first_seq, state.last_seq, tombs)
            if current and _swap_keys(settings, [*current, info]) > settings.max_entries:
                out.append(_chunk(snap, group, current, erased))
                current = []
            current.append(info)
        if current:
            out.append(_chunk(snap, group, current, erased))
    return out


def _swap_keys(settings: CompactSettings, infos: Sequence[EntryInfo]) -> int:
    """Index keys a chunk's swap touches at most: its old entries and the new ones (a new one
    per `entry_bytes` or `entry_records` of live records, whichever cuts more)."""
    live_bytes = sum(i.live_bytes for i in infos)
    live_records = sum(i.live_records for i in infos)
    new = -(-live_bytes // settings.entry_bytes) + -(-live_records // settings.entry_records)
    return len(infos) + new


def _chunk(snap: StreamSnapshot, group: str, infos: list[EntryInfo], erased: SeqRanges) -> Chunk:
    sections = [i.ref.section() for i in infos]
    lo, hi = min(s.first for s in sections), max(s.last for s in sections)
    # Every erased sequence in the chunk's span is dropped (a sequence no section holds is
    # dropped all the same: nothing is lost by naming it).
    dropped = {seq for a, b in erased.ranges for seq in range(max(a, lo), min(b, hi) + 1)}
    return Chunk(
        id=0,
        group=group,
        stream=snap.name,
        uid=snap.state.uid,
        level=1 if all(level_of(i.ref.entry.obj) == 0 for i in infos) else 2,
        sources=tuple(
            Source(i.ref.key, i.ref.revision, records.encode(i.ref.entry)) for i in infos
        ),
        first_seq=snap.state.first_seq,
        last_seq=snap.state.last_seq,
        tombstones=frozenset(t for t in snap.tombstones if lo <= t <= hi) | dropped,
        live_records=sum(i.live_records for i in infos),
        live_bytes=sum(i.live_bytes for i in infos),
        dead_bytes=sum(i.dead_bytes for i in infos),
        codec=section_codec(snap.config),
    )
