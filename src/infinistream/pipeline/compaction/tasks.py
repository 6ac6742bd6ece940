"""Compaction, step two (a Spark task per chunk): read, verify, keep the live, write one object.

A task reads each source entry's section with one ranged GET (neighbouring sections of one
object are merged into one GET; with it, the section's record directory when it has one),
checks every record's checksum and that the records match their index entry or directory
(count, lengths, subjects), keeps the records that were live in the snapshot with their
sequence and timestamp, and writes them as one new write-once object.

The object holds a section per slice of at most `entry_bytes` and `entry_records` of the live
records, each with its record directory (sequences and timestamps listed when they are not
simply consecutive) and described by one new `SectionEntry`: a cold read of one message fetches
its section whole with one GET, and metadata keeps a few hundred bytes a section whatever it
holds. Index entries written before record directories are rewritten this way too, which is
how compaction moves a store onto them.

A stream with compression (the chunk's `codec`, from its config when planned) has its new
sections stored compressed. Source sections stored compressed are decoded after their GET;
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
    RecordDirectory,
    SectionRef,
    decode_records,
    decode_stored,
    open_section_directory,
    record_length,
)
from infinistream.storage.layout import compacted_key
from infinistream.stream import records
from infinistream.stream.records import Entry, SectionEntry
from infinistream.stream.sections import Segment
from infinistream.stream.summary import summarize

# Bits a record that a compacted section's subject filter may take: compacted sections are
# large, and their filter must keep metadata per message far below 0.05 bytes.
COMPACTED_FILTER_BITS = 0.25

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
    # (first_seq, encoded SectionEntry) of the new entries, in sequence order.
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
    headers: list[int] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)


@dataclass
class _Read:
    """A source section as read: its plain records, and its record directory if it has one."""

    records: bytes
    directory: RecordDirectory | None = None


def compact_chunk(
    chunk: Chunk, options: StoreOptions, entry_bytes: int, entry_records: int
) -> ChunkResult:
    """The Spark task: never raises, so one bad chunk does not fail the others."""
    started = time.monotonic()
    objects: ObjectStore | None = None
    try:
        # A task writes an object or two and is gone: a pack of its own for each would cost
        # every reader of the directory one more file to open (ObjectStore.from_url).
        objects = options.open_objects(packed=False)
        keys = options.encryption()
        result = asyncio.run(_compact(chunk, objects, entry_bytes, entry_records, keys))
    except Exception as exc:
        where = objects.url if objects is not None else options.objects
        result = ChunkResult(chunk.id, error=f"{chunk.describe()}: {where}: {exc}")
    if objects is not None:
        result.bytes_read = objects.stats.bytes_got
        objects.close()
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
    # moves what it rewrites off older keys), its directories too.
    codec = chunk.codec if keys is None else chunk.codec | CODEC_SEALED
    builder = ObjectBuilder(None if keys is None else keys.sealer())
    refs: list[SectionRef] = []
    for start, end in slices:
        directory = _directory(live, start, end)
        refs.append(builder.add_section(chunk.stream, live.raw[start:end], codec, directory))
    data = builder.finish()
    written = time.time_ns()
    key = compacted_key(chunk.group, chunk.level, written, secrets.token_hex(6))
    await objects.put(key, data)
    result.obj, result.obj_bytes = key, len(data)
    new = [
        _entry(key, ref, live, start, end) for (start, end), ref in zip(slices, refs, strict=True)
    ]
    result.entries = [(e.first_seq, records.encode(e)) for e in new]
    return result


async def _read_sections(
    chunk: Chunk, objects: ObjectStore, result: ChunkResult, keys: Encryption | None
) -> dict[str, _Read]:
    """Each source entry's record bytes (decoded when the section is stored compressed) and
    record directory, one ranged GET per object (close ranges are merged)."""
    by_object: dict[str, list[tuple[Source, Entry]]] = defaultdict(list)
    for source in chunk.sources:
        entry = source.index_entry()
        by_object[entry.obj].append((source, entry))
    limit = asyncio.Semaphore(GET_CONCURRENCY)
    out: dict[str, _Read] = {}

    async def fetch(obj: str, items: list[tuple[Source, Entry]]) -> None:
        async with limit:
            try:
                blobs = await objects.get_ranges(obj, [_stored_range(e) for _, e in items])
            except ObjectNotFoundError as exc:
                for source, _ in items:
                    result.corrupt.append(Problem(source.key, obj, str(exc)))
                return
        for (source, entry), blob in zip(items, blobs, strict=True):
            try:
                out[source.key] = _decoded(entry, blob, obj, keys)
            except CorruptObjectError as exc:
                result.corrupt.append(Problem(source.key, obj, f"{objects.url}: {exc}"))

    await asyncio.gather(*(fetch(obj, items) for obj, items in by_object.items()))
    return out


def _stored_range(entry: Entry) -> tuple[int, int]:
    """The bytes of the object a source entry's section (and its directory) take."""
    if isinstance(entry, SectionEntry):
        return entry.offset, entry.dir_offset + entry.dir_length
    return entry.offset, entry.offset + entry.length


def _decoded(entry: Entry, blob: bytes, obj: str, keys: Encryption | None) -> _Read:
    """A source section's plain records and directory from its stored bytes."""
    if isinstance(entry, SectionEntry):
        stored, plain_length = blob[: entry.length], entry.plain_length
        directory = open_section_directory(
            blob[entry.length :], key=obj, offset=entry.dir_offset, keys=keys
        )
    else:
        stored, plain_length, directory = blob, entry.plain_length(), None
    if entry.codec == CODEC_NONE:
        return _Read(stored, directory)
    plain = decode_stored(
        stored, entry.codec, plain_length, key=obj, offset=entry.offset, keys=keys
    )
    return _Read(plain, directory)


def _keep_live(chunk: Chunk, source: Source, section: _Read, live: _Live) -> int:
    """Verify one entry's section and append its live records; returns the records read."""
    entry = source.index_entry()
    seg = _checked(source.key, entry, section)
    view = memoryview(section.records)
    for pos in range(len(seg.subjects)):
        seq = seg.seq_at(pos)
        if not chunk.is_live(seq):
            continue
        start = seg.offsets[pos]
        raw = bytes(view[start : start + seg.lengths[pos]])
        live.seqs.append(seq)
        live.stamps.append(seg.ts_at(pos))
        live.subjects.append(seg.subjects[pos])
        live.headers.append(int.from_bytes(raw[2:6], "little"))
        live.raw.append(raw)
    return len(seg.subjects) + len(entry.skipped)


def _checked(key: str, entry: Entry, section: _Read) -> Segment:
    """The detail of a source section whose records all check against their checksums and
    against what its entry or directory says of them (count, lengths, subjects)."""
    if isinstance(entry, SectionEntry):
        if section.directory is None:
            raise CorruptObjectError(f"index entry {key}: no record directory", key=entry.obj)
        subjects = [section.directory.subject_at(i) for i in range(len(section.directory))]
        lengths = section.directory.lengths
    else:
        ids, names = entry.subject_id_array(), entry.subjects
        lengths = entry.length_array()
        if any(i >= len(names) for i in ids):
            raise CorruptObjectError(f"index entry {key} names no such subject", key=entry.obj)
        subjects = [names[i] for i in ids]
    # The plain records: entry.length bytes, or decoded to their full length.
    if len(subjects) != len(lengths) or sum(lengths) != len(section.records):
        raise CorruptObjectError(
            f"index entry {key} disagrees with its section "
            f"({len(lengths)} records, {sum(lengths)} of {len(section.records)} bytes)",
            key=entry.obj,
            offset=entry.offset,
        )
    decoded = decode_records(
        section.records, len(lengths), verify=True, key=entry.obj, base_offset=entry.offset
    )
    for i, rec in enumerate(decoded):
        size = record_length(len(rec.subject.encode()), len(rec.headers), len(rec.data))
        if size != lengths[i] or rec.subject != subjects[i]:
            raise CorruptObjectError(
                f"record {i} does not match index entry {key}",
                key=entry.obj,
                offset=entry.offset,
            )
    if isinstance(entry, SectionEntry):
        assert section.directory is not None
        try:
            return Segment.from_directory(key, entry, section.directory)
        except ValueError as exc:
            raise CorruptObjectError(str(exc), key=entry.obj, offset=entry.offset) from None
    return Segment.from_entry(key, entry)


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


def _directory(live: _Live, start: int, end: int) -> RecordDirectory:
    """The record directory of live records start..end-1: their sequences and stamps listed
    only when they are not consecutive from the first."""
    seqs = live.seqs[start:end]
    stamps = live.stamps[start:end]
    explicit = not _consecutive(seqs) or not _consecutive(stamps)
    return RecordDirectory.of(
        live.subjects[start:end],
        [len(r) for r in live.raw[start:end]],
        live.headers[start:end],
        seqs if explicit else None,
        stamps if explicit else None,
    )


def _consecutive(values: array[int]) -> bool:
    return values[-1] - values[0] == len(values) - 1 and all(
        b == a + 1 for a, b in pairwise(values)
    )


def _entry(obj: str, ref: SectionRef, live: _Live, start: int, end: int) -> SectionEntry:
    """The index entry of live records start..end-1, stored as the section `ref`."""
    seqs = live.seqs[start:end]
    stamps = live.stamps[start:end]
    subjects = live.subjects[start:end]
    summary = summarize(subjects, COMPACTED_FILTER_BITS)
    count = end - start
    return SectionEntry(
        obj=obj,
        offset=ref.offset,
        length=ref.length,
        codec=ref.codec,
        plain_length=ref.records_length,
        dir_length=ref.index_length,
        records=count,
        first_seq=seqs[0],
        last_seq=seqs[-1],
        count=count,
        size=sum(len(r) for r in live.raw[start:end]),
        hdrs=sum(1 for h in live.headers[start:end] if h),
        ts=stamps[0],
        last_ts=stamps[-1],
        explicit=not _consecutive(seqs) or not _consecutive(stamps),
        names=summary.names,
        counts=summary.counts,
        bloom=summary.bloom,
        bloom_k=summary.k,
        dir_crc=ref.index_checksum,
    )
