"""Compaction, step two (a Spark task per chunk): read, verify, keep the live, write one object.

A task reads each source entry's section with one ranged GET (neighbouring sections of one
object are merged into one GET), checks every record's checksum and that the records match the
index entry (count, lengths, subjects), keeps the records that were live in the snapshot with
their sequence and timestamp, and writes them as one new write-once object with one section.

The object is described by one or more new index entries, each covering a slice of the
section of at most `entry_bytes` and `entry_records`: readers fetch an entry's bytes whole and
cache them, and an entry's per-record arrays stay small in metadata. Sequences and timestamps
are listed only when they are not simply consecutive.

A stream with compression (the chunk's `codec`, from its config when planned) gets a section
per new index entry instead, each stored compressed: a compressed section has no record ranges
and is read whole, so each entry must be a section of its own to stay one GET of at most about
`entry_bytes` of records. Source sections stored compressed are decoded after their GET;
either way every record's checksum is checked on the plain bytes.

Nothing is deleted or overwritten here, and nothing in metadata changes: the driver swaps the
index entries afterwards, or leaves the new object to the janitor.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import pairwise

from infinistream.pipeline.compaction.plan import Chunk, Source
from infinistream.pipeline.options import StoreOptions
from infinistream.storage import (
    CODEC_NONE,
    CODEC_SEALED,
    CorruptObjectError,
    Encryption,
    ObjectBuilder,
    ObjectNotFoundError,
    ObjectStore,
    decode_records,
    decode_stored,
    record_length,
)
from infinistream.storage.layout import compacted_key
from infinistream.stream import records
from infinistream.stream.records import IndexEntry
from infinistream.stream.sections import Segment

# Ranged GETs in flight per task.
GET_CONCURRENCY = 16


@dataclass
class Problem:
    """A source entry that could not be read: corrupt bytes or a missing object."""

    key: str  # the index entry's metadata key
    obj: str
    detail: str


@dataclass
class ChunkResult:
    chunk_id: int
    obj: str = ""  # the new object; "" when none was written
    obj_bytes: int = 0
    # (first_seq, encoded IndexEntry) of the new entries, in sequence order.
    entries: list[tuple[int, bytes]] = field(default_factory=list)
    records_in: int = 0
    records_out: int = 0
    bytes_read: int = 0
    corrupt: list[Problem] = field(default_factory=list)
    error: str = ""  # any other failure (the store could not be reached, ...)
    seconds: float = 0.0


@dataclass
class _Live:
    seqs: array[int] = field(default_factory=lambda: array("Q"))
    stamps: array[int] = field(default_factory=lambda: array("Q"))
    subjects: list[str] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)


def compact_chunk(
    chunk: Chunk, options: StoreOptions, entry_bytes: int, entry_records: int
) -> ChunkResult:
    """The Spark task: never raises, so one bad chunk does not fail the others."""
    started = time.monotonic()
    objects: ObjectStore | None = None
    try:
        objects = options.open_objects()
        keys = options.encryption()
        result = asyncio.run(_compact(chunk, objects, entry_bytes, entry_records, keys))
    except Exception as exc:
        where = objects.url if objects is not None else options.objects
        result = ChunkResult(chunk.id, error=f"{chunk.describe()}: {where}: {exc}")
    if objects is not None:
        result.bytes_read = objects.stats.bytes_got
    result.seconds = time.monotonic() - started
    return result


async def _compact(
    chunk: Chunk,
    objects: ObjectStore,
    entry_bytes: int,
    entry_records: int,
    keys: Encryption | None = None,
) -> ChunkResult:
    result = ChunkResult(chunk.id)
    sections = await _read_sections(chunk, objects, result, keys)
    if result.corrupt:
        return result
    live = _Live()
    for source in chunk.sources:
        try:
            result.records_in += _keep_live(chunk, source, sections[source.key], live)
        except CorruptObjectError as exc:
            entry = source.index_entry()
            result.corrupt.append(Problem(source.key, entry.obj, f"{objects.url}: {exc}"))
    if result.corrupt:
        return result
    _check_order(chunk, live.seqs)
    result.records_out = len(live.seqs)
    if not live.seqs:
        return result  # every record is dead: the swap only deletes the old entries
    slices = _slices(live, entry_bytes, entry_records)
    # With encryption on, the new object is sealed (under the current key: compaction also
    # moves what it rewrites off older keys), a section per entry as for compression.
    codec = chunk.codec if keys is None else chunk.codec | CODEC_SEALED
    builder = ObjectBuilder(None if keys is None else keys.sealer())
    placed: list[tuple[int, int]] = []  # (offset, length) in the object of each slice
    if codec == CODEC_NONE:
        # One section; each entry covers a slice of it.
        offset = builder.add_section(chunk.stream, live.raw).offset
        for start, end in slices:
            size = sum(map(len, live.raw[start:end]))
            placed.append((offset, size))
            offset += size
    else:
        for start, end in slices:
            ref = builder.add_section(chunk.stream, live.raw[start:end], codec)
            placed.append((ref.offset, ref.length))
    data = builder.finish()
    written = time.time_ns()
    key = compacted_key(chunk.group, chunk.level, written, secrets.token_hex(6))
    await objects.put(key, data)
    result.obj, result.obj_bytes = key, len(data)
    new = [
        _entry(key, offset, length, live, start, end, codec)
        for (start, end), (offset, length) in zip(slices, placed, strict=True)
    ]
    result.entries = [(e.first_seq, records.encode(e)) for e in new]
    return result


async def _read_sections(
    chunk: Chunk, objects: ObjectStore, result: ChunkResult, keys: Encryption | None
) -> dict[str, bytes]:
    """Each source entry's record bytes, one ranged GET per object (close ranges are merged),
    decoded when the section is stored compressed."""
    by_object: dict[str, list[tuple[Source, IndexEntry]]] = defaultdict(list)
    for source in chunk.sources:
        entry = source.index_entry()
        by_object[entry.obj].append((source, entry))
    limit = asyncio.Semaphore(GET_CONCURRENCY)
    out: dict[str, bytes] = {}

    async def fetch(obj: str, items: list[tuple[Source, IndexEntry]]) -> None:
        async with limit:
            try:
                blobs = await objects.get_ranges(
                    obj, [(e.offset, e.offset + e.length) for _, e in items]
                )
            except ObjectNotFoundError as exc:
                for source, _ in items:
                    result.corrupt.append(Problem(source.key, obj, str(exc)))
                return
        for (source, entry), blob in zip(items, blobs, strict=True):
            if entry.codec == CODEC_NONE:
                out[source.key] = blob
                continue
            try:
                out[source.key] = decode_stored(
                    blob,
                    entry.codec,
                    entry.plain_length(),
                    key=obj,
                    offset=entry.offset,
                    keys=keys,
                )
            except CorruptObjectError as exc:
                result.corrupt.append(Problem(source.key, obj, f"{objects.url}: {exc}"))

    await asyncio.gather(*(fetch(obj, items) for obj, items in by_object.items()))
    return out


def _keep_live(chunk: Chunk, source: Source, section: bytes, live: _Live) -> int:
    """Verify one entry's section and append its live records; returns the records read."""
    entry = source.index_entry()
    lengths = entry.length_array()
    ids = entry.subject_id_array()
    # `section` holds the plain records: entry.length bytes, or decoded to their full length.
    if len(ids) != len(lengths) or sum(lengths) != len(section):
        raise CorruptObjectError(
            f"index entry {source.key} disagrees with its section "
            f"({len(lengths)} records, {sum(lengths)} of {len(section)} bytes)",
            key=entry.obj,
            offset=entry.offset,
        )
    decoded = decode_records(
        section, len(lengths), verify=True, key=entry.obj, base_offset=entry.offset
    )
    names = entry.subjects
    for i, rec in enumerate(decoded):
        size = record_length(len(rec.subject.encode()), len(rec.headers), len(rec.data))
        if size != lengths[i] or ids[i] >= len(names) or rec.subject != names[ids[i]]:
            raise CorruptObjectError(
                f"record {i} does not match index entry {source.key}",
                key=entry.obj,
                offset=entry.offset,
            )
    seg = Segment.from_entry(source.key, entry)
    view = memoryview(section)
    for pos in range(len(seg.subjects)):
        seq = seg.seq_at(pos)
        if not chunk.is_live(seq):
            continue
        start = seg.offsets[pos]
        live.seqs.append(seq)
        live.stamps.append(seg.ts_at(pos))
        live.subjects.append(seg.subjects[pos])
        live.raw.append(bytes(view[start : start + seg.lengths[pos]]))
    return len(decoded)


def _check_order(chunk: Chunk, seqs: array[int]) -> None:
    for a, b in pairwise(seqs):
        if b <= a:
            raise ValueError(f"{chunk.describe()}: sequences out of order ({a} then {b})")


def _slices(live: _Live, entry_bytes: int, entry_records: int) -> list[tuple[int, int]]:
    """The live records cut into runs ``[start, end)`` for one index entry each, within the
    byte and record limits (at least one record each)."""
    out: list[tuple[int, int]] = []
    n = len(live.seqs)
    start = 0
    while start < n:
        end = start + 1
        size = len(live.raw[start])
        while end < n and end - start < entry_records and size + len(live.raw[end]) <= entry_bytes:
            size += len(live.raw[end])
            end += 1
        out.append((start, end))
        start = end
    return out


def _entry(
    obj: str, offset: int, length: int, live: _Live, start: int, end: int, codec: int
) -> IndexEntry:
    """The index entry of live records start..end-1, stored at offset..offset+length."""
    names: dict[str, int] = {}
    ids = array("I")
    for subject in live.subjects[start:end]:
        sid = names.get(subject)
        if sid is None:
            sid = names[subject] = len(names)
        ids.append(sid)
    lengths = array("I", (len(r) for r in live.raw[start:end]))
    seqs = live.seqs[start:end]
    stamps = live.stamps[start:end]
    first, ts = seqs[0], stamps[0]
    # Consecutive sequences and stamps are derived from first_seq and ts: list them only if not.
    contiguous = seqs[-1] - first == len(seqs) - 1
    plain_stamps = all(s == ts + i for i, s in enumerate(stamps))
    return IndexEntry(
        obj=obj,
        offset=offset,
        length=length,
        first_seq=first,
        ts=ts,
        subjects=list(names),
        subject_ids=ids.tobytes(),
        lengths=lengths.tobytes(),
        seqs=b"" if contiguous else seqs.tobytes(),
        timestamps=b"" if plain_stamps else stamps.tobytes(),
        codec=codec,
    )
