"""Compaction, step one (on the driver): which index entries to rewrite, in which chunks.

A chunk is a run of consecutive index entries of one stream whose records go into one new
object. Entries qualify when their object is old enough (`min_age_ns`, from the time in the
object's key) and either still L0 (a flush's object, shared by many streams) or a compacted
object that is small (`target/4`) or mostly dead: those are merged again into L2. Entries of
a max_age stream that expire within `expiry_margin_ns` are left to expiry. Runs are cut into
chunks of about `target_bytes` of live records whose swap touches at most `max_entries` index
keys (old and new), so that it stays one metadata transaction a store accepts (etcd refuses
more than `--max-txn-ops` operations, 128 by default). A chunk is written only if it helps:
it holds L0 entries, merges two objects or more, or drops at least as much as it keeps.

Everything a Spark task needs travels in the `Chunk` itself (plain data, picklable): the
entries as encoded, their revisions for the swap, and the tombstones and live range of the
stream as the snapshot had them. The driver plans from what entries say of their sections
(counts, bytes, sequence and time bounds): it reads no record directory, so planning a stream
costs its number of sections, not of messages; the tasks read the directories with the
records.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from infinistream.storage.layout import level_of, written_ns_of
from infinistream.stream import records
from infinistream.stream.compression import section_codec
from infinistream.stream.loader import EntryRef, StreamSnapshot
from infinistream.stream.records import Entry, IndexEntry, decode_entry
from infinistream.stream.sections import Segment
from infinistream.stream.view import FIRST_REACH

KiB = 1024
MiB = 1024 * KiB

DEFAULT_TARGET_BYTES = 64 * MiB
DEFAULT_MIN_AGE_NS = 60 * 10**9
# Each new section (one index entry each, its record directory after it) holds about this
# much: a cold read of one message fetches its section whole with one GET, and metadata keeps
# a few hundred bytes a section whatever its records, well under 0.05 bytes a message.
DEFAULT_ENTRY_BYTES = 1 * MiB
# ... and at most this many records (a section's directory and an agent's detail of it grow
# with its records): no more than a fresh view's first read of the index looks back, so that
# read finds the entry of any compacted section of consecutive messages (one metadata read
# for a cold get, a second where deleted messages stretch a section's span). At 16,384
# messages a section's few hundred bytes of metadata are still under 0.05 bytes a message.
DEFAULT_ENTRY_RECORDS = FIRST_REACH
# Index keys one swap transaction replaces and writes (etcd: --max-txn-ops, 128 by default).
DEFAULT_MAX_ENTRIES = 1000
ETCD_MAX_ENTRIES = 120


@dataclass(frozen=True)
class CompactSettings:
    min_age_ns: int = DEFAULT_MIN_AGE_NS
    target_bytes: int = DEFAULT_TARGET_BYTES
    entry_bytes: int = DEFAULT_ENTRY_BYTES
    entry_records: int = DEFAULT_ENTRY_RECORDS
    max_entries: int = DEFAULT_MAX_ENTRIES
    recompact: bool = True
    # Rewrite every old enough index entry of the form written before record directories,
    # compacted or not, into sections with directories (an upgraded store's older data).
    upgrade_index: bool = False
    # Entries of max_age streams whose messages all expire within this margin are left alone.
    expiry_margin_ns: int = 10 * 60 * 10**9

    @property
    def small_bytes(self) -> int:
        """A compacted object with less live data than this is merged again (L1 -> L2)."""
        return max(1, self.target_bytes // 4)


def default_max_entries(metadata_url: str) -> int:
    """Entries replaced per swap transaction: etcd caps operations per transaction."""
    if metadata_url.lower().startswith("etcd"):
        m = re.search(r"max_txn_ops=(\d+)", metadata_url)
        if m:
            return max(2, int(m.group(1)) - 8)
        return ETCD_MAX_ENTRIES
    return DEFAULT_MAX_ENTRIES


@dataclass(frozen=True)
class Source:
    """One index entry a chunk replaces, as the snapshot read it."""

    key: str
    revision: int
    entry: bytes  # encoded index entry (either form)

    def index_entry(self) -> Entry:
        return decode_entry(self.entry)

    def ref(self) -> EntryRef:
        return EntryRef(self.key, self.revision, self.index_entry())


@dataclass(frozen=True)
class Chunk:
    """A run of index entries of one stream to rewrite as one object (see module docstring)."""

    id: int
    group: str
    stream: str
    uid: str
    level: int
    sources: tuple[Source, ...]
    # The live range and tombstones (within the chunk's sequences) at snapshot time.
    first_seq: int
    last_seq: int
    tombstones: frozenset[int]
    live_records: int
    live_bytes: int
    dead_bytes: int
    # How the new object's sections are stored: the stream's compression when planned.
    codec: int = 0

    def is_live(self, seq: int) -> bool:
        return self.first_seq <= seq <= self.last_seq and seq not in self.tombstones

    @property
    def objects(self) -> set[str]:
        return {s.index_entry().obj for s in self.sources}

    def describe(self) -> str:
        first = decode_entry(self.sources[0].entry).first_seq
        return (
            f"stream {self.stream!r} chunk {self.id} ({len(self.sources)} entries from seq "
            f"{first}, {self.live_records} live messages, -> L{self.level})"
        )

    def without(self, keys: Iterable[str], next_id: int) -> list[Chunk]:
        """The runs of this chunk left when the entries `keys` are taken out (corrupt ones),
        as new chunks of the same snapshot: those still worth compacting."""
        drop = set(keys)
        runs: list[list[Source]] = [[]]
        for s in self.sources:
            if s.key in drop:
                runs.append([])
            else:
                runs[-1].append(s)
        tombs = sorted(self.tombstones)
        out: list[Chunk] = []
        for run in runs:
            infos = [entry_info(s.ref(), self.first_seq, self.last_seq, tombs) for s in run]
            if infos and _worth_rewriting(infos):
                out.append(self._with(next_id + len(out), infos))
        return out

    def _with(self, chunk_id: int, infos: list[EntryInfo]) -> Chunk:
        return replace(
            self,
            id=chunk_id,
            level=1 if all(i.level == 0 for i in infos) else 2,
            sources=_sources(infos),
            live_records=sum(i.live_records for i in infos),
            live_bytes=sum(i.live_bytes for i in infos),
            dead_bytes=sum(i.dead_bytes for i in infos),
        )


@dataclass
class EntryInfo:
    ref: EntryRef
    level: int
    time_ns: int | None
    live_records: int
    live_bytes: int
    dead_bytes: int
    last_ts: int  # of the entry's last message


@dataclass
class StreamPlan:
    stream: str
    chunks: list[Chunk] = field(default_factory=list)


def entry_info(
    ref: EntryRef, first_seq: int, last_seq: int, tombs: Sequence[int] = ()
) -> EntryInfo:
    """Live and dead records of one entry of a stream whose live range is first_seq..last_seq
    less the tombstones `tombs` (sorted). Exact for an entry that holds its records' detail;
    for one whose detail is in its record directory, from its counts when all its records
    are live, else estimated (the dead ones at its average record size)."""
    entry = ref.entry
    obj = entry.obj
    if isinstance(entry, IndexEntry):
        seg = ref.segment()
        live_records, live_bytes = _live_in(seg, first_seq, last_seq, tombs)
        # Dead records, and those refused at commit, take the rest of the section (in plain
        # bytes, as live ones are counted, whether or not the section is stored compressed).
        dead_bytes = seg.plain_length - live_bytes
        last_ts = seg.ts_at(len(seg.lengths) - 1) if len(seg.lengths) else 0
    else:
        lo, hi = bisect_left(tombs, entry.first_seq), bisect_right(tombs, entry.last_seq)
        below = max(0, min(first_seq, entry.last_seq + 1) - entry.first_seq)
        above = max(0, entry.last_seq - max(last_seq, entry.first_seq - 1))
        dead = min(entry.count, hi - lo + below + above)
        live_records = entry.count - dead
        live_bytes = entry.size * live_records // entry.count if entry.count else 0
        dead_bytes = entry.plain_length - live_bytes
        last_ts = entry.last_ts
    return EntryInfo(
        ref, level_of(obj), written_ns_of(obj), live_records, live_bytes, dead_bytes, last_ts
    )


def _live_in(seg: Segment, first_seq: int, last_seq: int, tombs: Sequence[int]) -> tuple[int, int]:
    """(records, bytes) of `seg` live in first_seq..last_seq less the tombstones `tombs`."""
    lengths = seg.lengths
    lo, hi = bisect_left(tombs, seg.first), bisect_right(tombs, seg.last)
    if first_seq <= seg.first and seg.last <= last_seq and lo == hi:
        return len(lengths), sum(lengths)  # the usual case, all live
    dead = set(tombs[lo:hi])
    live_records = live_bytes = 0
    for pos in range(len(seg.subjects)):
        seq = seg.seq_at(pos)
        if first_seq <= seq <= last_seq and seq not in dead:
            live_records += 1
            live_bytes += lengths[pos]
    return live_records, live_bytes


def plan_stream(
    snap: StreamSnapshot,
    group: str,
    settings: CompactSettings,
    now_ns: int,
    *,
    ages: dict[str, int] | None = None,
    first_id: int = 0,
) -> StreamPlan:
    """The chunks to compact in one stream. `ages` gives the age of objects whose names carry
    no time (looked up with HEAD by the caller); such objects are otherwise left alone."""
    tombs = sorted(snap.tombstones)
    state = snap.state
    infos = [entry_info(ref, state.first_seq, state.last_seq, tombs) for ref in snap.entries]
    plan = StreamPlan(snap.name)
    # Per compacted object: live and dead bytes over all its entries (one stream per object).
    totals: dict[str, list[int]] = {}
    for info in infos:
        t = totals.setdefault(info.ref.entry.obj, [0, 0])
        t[0] += info.live_bytes
        t[1] += info.dead_bytes

    max_age = snap.config.max_age
    expires_before = now_ns - max_age + settings.expiry_margin_ns if max_age > 0 else 0

    def eligible(info: EntryInfo) -> bool:
        obj = info.ref.entry.obj
        if info.time_ns is not None:
            age = now_ns - info.time_ns
        elif ages is not None and obj in ages:
            age = ages[obj]
        else:
            return False
        if age < settings.min_age_ns:
            return False
        if info.last_ts < expires_before:
            return False  # max_age deletes it soon: not worth rewriting, and its swap would lose
        if info.level == 0 or (settings.upgrade_index and _old_form(info)):
            return True
        if not settings.recompact:
            return False
        live, dead = totals[obj]
        return live < settings.small_bytes or dead >= live

    runs: list[list[EntryInfo]] = [[]]
    for info in infos:
        if eligible(info):
            runs[-1].append(info)
        elif runs[-1]:
            runs.append([])
    next_id = first_id
    for run in runs:
        for group_infos in _cut(run, settings):
            if not _worth_rewriting(group_infos, settings.upgrade_index):
                continue
            plan.chunks.append(_chunk(snap, group, next_id, group_infos))
            next_id += 1
    return plan


def _cut(run: Sequence[EntryInfo], settings: CompactSettings) -> list[list[EntryInfo]]:
    chunks: list[list[EntryInfo]] = []
    current: list[EntryInfo] = []
    size = count = 0
    for info in run:
        if current and (
            size + info.live_bytes > settings.target_bytes
            or _keys(settings, len(current) + 1, size + info.live_bytes, count + info.live_records)
            > settings.max_entries
        ):
            chunks.append(current)
            current, size, count = [], 0, 0
        current.append(info)
        size += info.live_bytes
        count += info.live_records
    if current:
        chunks.append(current)
    # A short tail is folded into the chunk before it when the two still fit one target.
    if len(chunks) >= 2:
        tail, before = chunks[-1], chunks[-2]
        both = before + tail
        size = sum(i.live_bytes for i in both)
        count = sum(i.live_records for i in both)
        if (
            size <= settings.target_bytes * 5 // 4
            and _keys(settings, len(both), size, count) <= settings.max_entries
        ):
            chunks[-2:] = [both]
    return chunks


def _keys(settings: CompactSettings, entries: int, live_bytes: int, live_records: int) -> int:
    """Index keys a chunk's swap touches, at most: the old entries and the new ones."""
    new = -(-live_bytes // settings.entry_bytes) + -(-live_records // settings.entry_records)
    return entries + new


def _old_form(info: EntryInfo) -> bool:
    return isinstance(info.ref.entry, IndexEntry)


def _worth_rewriting(infos: Sequence[EntryInfo], upgrade_index: bool = False) -> bool:
    """L0 entries always (their objects are shared by many streams and small); compacted ones
    only if at least two objects merge or half the bytes are dead, or, upgrading the index,
    if any is of the form written before record directories."""
    if any(i.level == 0 for i in infos):
        return True
    if upgrade_index and any(map(_old_form, infos)):
        return True
    if len({i.ref.entry.obj for i in infos}) >= 2:
        return True
    dead = sum(i.dead_bytes for i in infos)
    return dead > 0 and dead >= sum(i.live_bytes for i in infos)


def _sources(infos: Sequence[EntryInfo]) -> tuple[Source, ...]:
    return tuple(Source(i.ref.key, i.ref.revision, records.encode(i.ref.entry)) for i in infos)


def _chunk(snap: StreamSnapshot, group: str, chunk_id: int, infos: list[EntryInfo]) -> Chunk:
    sections = [i.ref.section() for i in infos]
    lo, hi = min(s.first for s in sections), max(s.last for s in sections)
    return Chunk(
        id=chunk_id,
        group=group,
        stream=snap.name,
        uid=snap.state.uid,
        level=1 if all(i.level == 0 for i in infos) else 2,
        sources=_sources(infos),
        first_seq=snap.state.first_seq,
        last_seq=snap.state.last_seq,
        tombstones=frozenset(t for t in snap.tombstones if lo <= t <= hi),
        live_records=sum(i.live_records for i in infos),
        live_bytes=sum(i.live_bytes for i in infos),
        dead_bytes=sum(i.dead_bytes for i in infos),
        codec=section_codec(snap.config),
    )
