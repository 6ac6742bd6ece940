"""Reading a stream as Arrow record batches straight from object storage: the code that both
the Spark data source and the export job run.

The driver plans (`plan_read`): from a `StreamSnapshot` it cuts the live sequences asked for
into `Piece`s, each one contiguous byte range of one object section, and groups runs of pieces
into `ReadTask`s of about `partition_bytes` each (one Spark partition per task). A piece
carries everything an executor needs about its records (subject, offset, length, sequence and
timestamp of each, and the tombstoned sequences among them), so executors never touch the
metadata store: they read each piece with one ranged GET (`read_task`), a few pieces at a
time, and turn it into a `pyarrow.RecordBatch` with the columns of `SCHEMA_DDL`.

Deleted messages (tombstones, or below the stream's first sequence) are never read: messages
erased with MSG.DELETE are gone from every read and export from the moment the delete commits,
even while their bytes still sit in an object that compaction has not rewritten yet.

A section stored compressed (a stream with compression) has no byte ranges for its records: its
piece is the whole section, fetched with one GET of its stored bytes and decoded on the
executor, whatever part of it is asked for; the section is never cut into several pieces.

A section whose detail is in its record directory (`SectionEntry`) is a piece of its own too:
the driver plans from what its entry says (sequence and time bounds, subject summary, bytes)
and reads no directory, so planning costs the number of sections, not of messages; the
executor fetches the section with its directory in one GET and picks the records to return.

A record whose checksum does not match is reported (object, index
entry and sequences, through `on_problem`) and skipped; with `fail_on_corrupt` it fails the
read instead. A missing object is not skipped: it usually means compaction and the janitor
moved the messages since the plan was made, and a new read finds them.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

from infinistream import storage
from infinistream.jetstream.subjects import matches
from infinistream.metadata.kv import MetadataStore
from infinistream.pipeline.options import StoreError, StoreOptions
from infinistream.protocol import parse_headers
from infinistream.stream import records
from infinistream.stream.loader import StreamSnapshot, read_stream
from infinistream.stream.records import (
    SectionEntry,
    StreamKeys,
    StreamState,
    decode_state,
)
from infinistream.stream.sections import Segment, entry_summary

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = [
    "COLUMNS",
    "SCHEMA_DDL",
    "Piece",
    "Problem",
    "ReadError",
    "ReadSpec",
    "ReadTask",
    "StreamNotFoundError",
    "arrow_schema",
    "load_snapshot",
    "load_state",
    "parse_time",
    "plan_read",
    "read_task",
    "spark_schema",
]

COLUMNS = ("stream", "seq", "subject", "time", "headers", "data")
SCHEMA_DDL = (
    "stream string, seq bigint, subject string, time timestamp, "
    "headers map<string,array<string>>, data binary"
)

DEFAULT_PARTITION_BYTES = 32 * 1024 * 1024
"""Bytes of records a Spark partition reads: runs of small (L0) sections are grouped up to
this, and a larger (compacted) section is split into pieces of at most this."""
MIN_SPLIT_BYTES = 1024 * 1024
"""Tasks are not made smaller than this just to have more of them."""
DEFAULT_MIN_PARTITIONS = 8
"""The data source's default: enough tasks to keep a small cluster (or local[*]) busy."""
DEFAULT_CONCURRENCY = 8
"""Ranged GETs a task keeps in flight: object stores reward parallel requests."""

T = TypeVar("T")


class ReadError(Exception):
    """A read cannot be planned or done: the message says what and where."""


class StreamNotFoundError(ReadError):
    def __init__(self, stream: str, group: str, metadata_url: str) -> None:
        super().__init__(
            f"stream {stream!r} not found in group {group!r} of metadata store {metadata_url}"
        )
        self.stream = stream


# --- what to read ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadSpec:
    """Which messages: a subject filter (wildcards allowed), sequence bounds (both inclusive)
    and time bounds (start inclusive, end exclusive; nanoseconds since the epoch, UTC)."""

    subject: str = ""
    start_seq: int = 0
    end_seq: int | None = None
    start_ns: int | None = None
    end_ns: int | None = None

    def matches_time(self, lo_ns: int, hi_ns: int) -> bool:
        """Whether some time in [lo_ns, hi_ns] passes the time bounds."""
        if self.start_ns is not None and hi_ns < self.start_ns:
            return False
        return self.end_ns is None or lo_ns < self.end_ns


_TIME_RE = re.compile(r"^-?\d+$")


def parse_time(value: str, what: str = "time") -> int:
    """Nanoseconds since the epoch from an integer (nanoseconds) or an ISO 8601 time (UTC
    unless it names an offset)."""
    text = value.strip()
    if _TIME_RE.match(text):
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{what} {value!r} is neither nanoseconds since the epoch nor an ISO 8601 time"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    delta = when - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


# --- the plan -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    """A contiguous byte range of one object section and the records in it to return.

    `offsets` are relative to `offset` (the absolute start of the range in the object); the
    per-record arrays are packed `array` bytes: u32 offsets and lengths, u64 seqs and stamps.

    A piece of a compressed section (`codec`) is the whole stored section (`offset`,
    `length`), `section_length` bytes of records once decoded; its records are the `span`
    bytes from `base` of those, and `offsets` are relative to `base`.
    """

    stream: str
    key: str  # the index entry, for messages
    obj: str
    offset: int
    length: int
    subjects: list[str]
    offsets: bytes
    lengths: bytes
    seqs: bytes
    stamps: bytes
    tombs: frozenset[int] = frozenset()
    codec: int = storage.CODEC_NONE
    section_length: int = 0
    base: int = 0
    span: int = 0
    # A whole section with its record directory (the encoded SectionEntry; the per-record
    # arrays above are then empty, worked out from the directory by the executor), and the
    # sequences wanted of it.
    entry: bytes = b""
    first_seq: int = 0
    last_seq: int = 0
    # A part of a plain section (by sequences) too large for one task: its directory is read
    # first, then only the records it wants; `estimate` is their bytes, as planned.
    part: bool = False
    estimate: int = 0

    @property
    def records_bytes(self) -> int:
        """Bytes of the records this piece covers, as they are once read."""
        if self.entry:
            return self.estimate if self.part else self.section_length
        return self.length if self.codec == storage.CODEC_NONE else self.span

    def arrays(self) -> tuple[array[int], array[int], array[int], array[int]]:
        offsets, lengths, seqs, stamps = array("I"), array("I"), array("Q"), array("Q")
        offsets.frombytes(self.offsets)
        lengths.frombytes(self.lengths)
        seqs.frombytes(self.seqs)
        stamps.frombytes(self.stamps)
        return offsets, lengths, seqs, stamps

    def describe(self) -> str:
        first, last = self.first_seq, self.last_seq
        if not self.entry:
            seqs = array("Q")
            seqs.frombytes(self.seqs)
            first, last = seqs[0], seqs[-1]
        return (
            f"object {self.obj!r} bytes {self.offset}..{self.offset + self.length} "
            f"(index entry {self.key}, seqs {first}..{last})"
        )


@dataclass(frozen=True)
class ReadTask:
    """One Spark partition's work: pieces read in order, all with the same filters."""

    options: StoreOptions
    spec: ReadSpec
    pieces: list[Piece] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return sum(p.records_bytes for p in self.pieces)


async def load_snapshot(
    options: StoreOptions, stream: str, lo: int = 0, hi: int | None = None
) -> StreamSnapshot:
    """The stream's snapshot, or a `ReadError` naming the stream and the store.

    With `lo`/`hi`, only the index entries and tombstones that can hold sequences lo..hi are
    read: an incremental export or a micro-batch costs what is new, not the whole index.
    """
    if not stream:
        raise ReadError("say which stream to read: option 'stream'")
    snapshot = await _read_metadata(
        options, stream, lambda meta: read_stream(meta, options.group, stream, lo, hi)
    )
    if snapshot is None:
        raise StreamNotFoundError(stream, options.group, options.metadata)
    return snapshot


async def load_state(options: StoreOptions, stream: str) -> StreamState:
    """The stream's state alone (one metadata read), or a `StreamNotFoundError`."""
    item = await _read_metadata(
        options, stream, lambda meta: meta.get(StreamKeys(options.group, stream).state)
    )
    if item is None:
        raise StreamNotFoundError(stream, options.group, options.metadata)
    return decode_state(item.value)


async def _read_metadata(
    options: StoreOptions, stream: str, read: Callable[[MetadataStore], Awaitable[T]]
) -> T:
    """`read` from the metadata store, opened for it and closed after; a `ReadError` naming
    the stream and the store if that fails."""
    try:
        async with options.open() as stores:
            return await read(stores.meta)
    except StoreError as exc:
        raise ReadError(str(exc)) from exc
    except Exception as exc:
        raise ReadError(
            f"cannot read stream {stream!r} from metadata store {options.metadata}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def plan_read(
    snapshot: StreamSnapshot,
    options: StoreOptions,
    spec: ReadSpec,
    *,
    partition_bytes: int = DEFAULT_PARTITION_BYTES,
    min_partitions: int = 1,
) -> list[ReadTask]:
    """Cut the live messages that `spec` asks for into tasks of at most `partition_bytes`,
    smaller if that makes at least `min_partitions` tasks (but not below `MIN_SPLIT_BYTES`)."""
    state = snapshot.state
    lo = max(spec.start_seq, state.first_seq, 1)
    hi = state.last_seq if spec.end_seq is None else min(spec.end_seq, state.last_seq)
    if lo > hi:
        return []
    tombs = sorted(t for t in snapshot.tombstones if lo <= t <= hi)
    runs: list[tuple[Segment, int, int] | Piece] = []
    total = 0
    for ref in snapshot.entries:
        entry = ref.entry
        if isinstance(entry, SectionEntry):
            piece = _section_piece(snapshot.name, ref.key, entry, lo, hi, tombs, spec)
            if piece is not None:
                runs.append(piece)
                total += piece.records_bytes
            continue
        if spec.subject and not any(matches(spec.subject, s) for s in entry.subjects):
            continue
        seg = ref.segment()
        if seg.last < lo or seg.first > hi or not seg.subjects:
            continue
        start = seg.positions_from(lo).start
        stop = _positions_through(seg, hi)
        if start >= stop:
            continue
        if (spec.start_ns is not None or spec.end_ns is not None) and not _time_overlaps(
            seg, start, stop, spec
        ):
            continue
        runs.append((seg, start, stop))
        total += seg.offsets[stop - 1] + seg.lengths[stop - 1] - seg.offsets[start]
    target = max(1, partition_bytes)
    if min_partitions > 1:
        target = min(target, max(MIN_SPLIT_BYTES, -(-total // min_partitions)))
    tasks: list[ReadTask] = []
    current: list[Piece] = []
    current_bytes = 0
    for run in runs:
        pieces: Iterable[Piece]
        if isinstance(run, Piece):
            pieces = _parts(run, target)
        else:
            pieces = _cut(snapshot.name, *run, tombs, target)
        for piece in pieces:
            if current and current_bytes + piece.records_bytes > target:
                tasks.append(ReadTask(options, spec, current))
                current, current_bytes = [], 0
            current.append(piece)
            current_bytes += piece.records_bytes
    if current:
        tasks.append(ReadTask(options, spec, current))
    return tasks


def _section_piece(
    stream: str,
    key: str,
    entry: SectionEntry,
    lo: int,
    hi: int,
    tombs: Sequence[int],
    spec: ReadSpec,
) -> Piece | None:
    """The piece of a section whose detail is in its record directory, if it may hold a
    message the read wants (by its bounds and subject summary alone)."""
    first, last = max(lo, entry.first_seq), min(hi, entry.last_seq)
    if first > last or not spec.matches_time(entry.ts, entry.last_ts):
        return None
    summary = entry_summary(entry)
    if spec.subject and not summary.may_match(spec.subject):
        return None
    dead = frozenset(tombs[bisect_left(tombs, first) : bisect_right(tombs, last)])
    return Piece(
        stream=stream,
        key=key,
        obj=entry.obj,
        offset=entry.offset,
        length=entry.length + entry.dir_length,
        subjects=[],
        offsets=b"",
        lengths=b"",
        seqs=b"",
        stamps=b"",
        tombs=dead,
        codec=entry.codec,
        section_length=entry.plain_length,
        entry=records.encode(entry),
        first_seq=first,
        last_seq=last,
    )


def _parts(piece: Piece, target: int) -> list[Piece]:
    """A plain section's piece cut by sequences into parts of about `target` bytes, planned
    from its entry alone (bytes spread evenly over its sequences); a compressed section, or
    one that fits, stays whole."""
    if piece.codec != storage.CODEC_NONE or piece.section_length <= target:
        return [piece]
    n = piece.last_seq - piece.first_seq + 1
    parts = min(n, -(-piece.section_length // target))
    if parts <= 1:
        return [piece]
    step = -(-n // parts)
    out: list[Piece] = []
    for first in range(piece.first_seq, piece.last_seq + 1, step):
        last = min(piece.last_seq, first + step - 1)
        estimate = piece.section_length * (last - first + 1) // n
        dead = frozenset(t for t in piece.tombs if first <= t <= last)
        out.append(
            replace(piece, first_seq=first, last_seq=last, tombs=dead, part=True, estimate=estimate)
        )
    return out


def _positions_through(seg: Segment, hi: int) -> int:
    """The end of the positions holding sequences <= hi."""
    if seg.seqs is None:
        return max(0, min(len(seg.subjects), hi - seg.first + 1))
    return bisect_right(seg.seqs, hi)


def _time_overlaps(seg: Segment, start: int, stop: int, spec: ReadSpec) -> bool:
    if seg.stamps is None:
        return spec.matches_time(seg.ts + start, seg.ts + stop - 1)
    window = seg.stamps[start:stop]
    return spec.matches_time(min(window), max(window))


def _cut(
    stream: str, seg: Segment, start: int, stop: int, tombs: Sequence[int], max_bytes: int
) -> Iterator[Piece]:
    """Positions start..stop-1 of `seg` as pieces of at most `max_bytes` (at least one record);
    of a compressed section, one piece (it is read whole however it is cut)."""
    offsets, lengths = seg.offsets, seg.lengths
    pos = start
    while pos < stop:
        if seg.codec:
            end = stop
        else:
            # The first position whose record would end past the budget starts the next piece.
            end = bisect_right(offsets, offsets[pos] + max_bytes - 1, pos + 1, stop)
            while end > pos + 1 and offsets[end - 1] + lengths[end - 1] - offsets[pos] > max_bytes:
                end -= 1
        base = offsets[pos]
        span_end = offsets[end - 1] + lengths[end - 1]
        rel = array("I", (o - base for o in offsets[pos:end]))
        if seg.seqs is None:
            seqs = array("Q", range(seg.first + pos, seg.first + end))
        else:
            seqs = seg.seqs[pos:end]
        if seg.stamps is None:
            stamps = array("Q", range(seg.ts + pos, seg.ts + end))
        else:
            stamps = seg.stamps[pos:end]
        first_seq, last_seq = seqs[0], seqs[-1]
        dead = frozenset(tombs[bisect_left(tombs, first_seq) : bisect_right(tombs, last_seq)])
        # A compressed section is fetched whole; a plain one from the piece's first record.
        stored = (seg.offset, seg.length) if seg.codec else (seg.offset + base, span_end - base)
        yield Piece(
            stream=stream,
            key=seg.key,
            obj=seg.obj,
            offset=stored[0],
            length=stored[1],
            subjects=list(seg.subjects[pos:end]),
            offsets=rel.tobytes(),
            lengths=lengths[pos:end].tobytes(),
            seqs=seqs.tobytes(),
            stamps=stamps.tobytes(),
            tombs=dead,
            codec=seg.codec,
            section_length=seg.plain_length if seg.codec else 0,
            base=base if seg.codec else 0,
            span=span_end - base if seg.codec else 0,
        )
        pos = end


# --- reading on executors -------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """A piece, or records of it, that could not be read and were skipped."""

    obj: str
    key: str
    first_seq: int
    last_seq: int
    detail: str

    def __str__(self) -> str:
        seqs = (
            f"seq {self.first_seq}"
            if self.first_seq == self.last_seq
            else f"seqs {self.first_seq}..{self.last_seq}"
        )
        return f"object {self.obj!r} ({seqs}, index entry {self.key}): {self.detail}"


def _warn(problem: Problem) -> None:
    print(f"infinistream: skipped unreadable records: {problem}", file=sys.stderr, flush=True)


@cache
def arrow_schema() -> Any:
    """The Arrow schema of `SCHEMA`, exactly as Spark expects it from a data source."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema(), timezone="UTC")


def spark_schema() -> StructType:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("stream", StringType()),
            StructField("seq", LongType()),
            StructField("subject", StringType()),
            StructField("time", TimestampType()),
            StructField("headers", MapType(StringType(), ArrayType(StringType()))),
            StructField("data", BinaryType()),
        ]
    )


def read_task(
    task: ReadTask,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    on_problem: Callable[[Problem], None] = _warn,
    fail_on_corrupt: bool = False,
    with_date: bool = False,
) -> Iterator[Any]:
    """The task's messages as `pyarrow.RecordBatch`es (one per piece with rows), in order.

    With `with_date` each batch has a `date` column too (the UTC date of `time`), for
    partitioned writes.
    """
    if not task.pieces:
        return
    objects = task.options.open_objects()
    keys = task.options.encryption()
    step = max(1, concurrency)
    windows = [task.pieces[i : i + step] for i in range(0, len(task.pieces), step)]
    loop = asyncio.new_event_loop()
    pending: asyncio.Task[list[tuple[Piece, bytes] | storage.CorruptObjectError]] | None = None
    try:
        pending = loop.create_task(_fetch_all(objects, windows[0], keys))
        for k, window in enumerate(windows):
            fetching, pending = pending, None
            assert fetching is not None
            blobs = loop.run_until_complete(fetching)
            if k + 1 < len(windows):
                # Start the next window's GETs (obstore runs them on its own threads) while
                # this window is decoded.
                pending = loop.create_task(_fetch_all(objects, windows[k + 1], keys))
                loop.run_until_complete(_started())
            for asked, got in zip(window, blobs, strict=True):
                if isinstance(got, storage.CorruptObjectError):
                    # A compressed section that does not decode (or a record directory that
                    # does not open): none of its records can be.
                    if fail_on_corrupt:
                        raise got
                    first, last = _seq_bounds(asked)
                    on_problem(Problem(asked.obj, asked.key, first, last, got.detail))
                    continue
                piece, blob = got
                if not piece.subjects:
                    continue
                batch = _piece_batch(piece, blob, task.spec, on_problem, fail_on_corrupt)
                if batch is not None and batch.num_rows:
                    yield _add_date(batch) if with_date else batch
    finally:
        if pending is not None:
            pending.cancel()
            loop.run_until_complete(asyncio.gather(pending, return_exceptions=True))
        loop.close()
        objects.close()


def _seq_bounds(piece: Piece) -> tuple[int, int]:
    if piece.entry:
        return piece.first_seq, piece.last_seq
    _, _, seqs, _ = piece.arrays()
    return seqs[0], seqs[-1]


async def _started() -> None:
    """Let freshly created tasks run up to their first real wait."""
    for _ in range(3):
        await asyncio.sleep(0)


def _expanded(piece: Piece, blob: bytes, keys: storage.Encryption | None) -> tuple[Piece, bytes]:
    """A whole section with its directory, as the piece of its records from first_seq to
    last_seq (offsets from the first of them) and those records' bytes."""
    entry = records.decode_section(piece.entry)
    directory = storage.open_section_directory(
        blob[entry.length :], key=piece.obj, offset=entry.dir_offset, keys=keys
    )
    try:
        seg = Segment.from_directory(piece.key, entry, directory)
    except ValueError as exc:
        raise storage.CorruptObjectError(str(exc), key=piece.obj, offset=entry.dir_offset) from None
    stored = blob[: entry.length]
    plain = stored
    if entry.codec != storage.CODEC_NONE:
        plain = storage.decode_stored(
            stored, entry.codec, entry.plain_length, key=piece.obj, offset=entry.offset, keys=keys
        )
    chosen, lo, hi = _select(piece, entry, seg)
    return chosen, plain[lo:hi]


async def _part(
    objects: storage.ObjectStore, piece: Piece, keys: storage.Encryption | None
) -> tuple[Piece, bytes]:
    """A part of a plain section: its directory (one ranged GET), then the records it wants
    (another)."""
    entry = records.decode_section(piece.entry)
    try:
        directory = await storage.read_directory(
            objects, entry.obj, entry.dir_offset, entry.dir_length, keys=keys
        )
        seg = Segment.from_directory(piece.key, entry, directory)
    except ValueError as exc:
        raise storage.CorruptObjectError(str(exc), key=piece.obj, offset=entry.dir_offset) from None
    chosen, lo, hi = _select(piece, entry, seg)
    if lo >= hi:
        return chosen, b""
    return chosen, await objects.get_range(piece.obj, entry.offset + lo, entry.offset + hi)


def _select(piece: Piece, entry: SectionEntry, seg: Segment) -> tuple[Piece, int, int]:
    """The piece of the section's records from piece.first_seq to piece.last_seq, per the
    section's detail `seg`, and where their bytes are in the section's plain records."""
    start = seg.positions_from(piece.first_seq).start
    stop = _positions_through(seg, piece.last_seq)
    if start >= stop:
        return replace(piece, entry=b"", part=False), 0, 0
    base = seg.offsets[start]
    end = seg.offsets[stop - 1] + seg.lengths[stop - 1]
    seqs = (
        array("Q", range(seg.first + start, seg.first + stop))
        if seg.seqs is None
        else seg.seqs[start:stop]
    )
    stamps = (
        array("Q", range(seg.ts + start, seg.ts + stop))
        if seg.stamps is None
        else seg.stamps[start:stop]
    )
    expanded = replace(
        piece,
        offset=entry.offset + (base if entry.codec == storage.CODEC_NONE else 0),
        subjects=list(seg.subjects[start:stop]),
        offsets=array("I", (o - base for o in seg.offsets[start:stop])).tobytes(),
        lengths=seg.lengths[start:stop].tobytes(),
        seqs=seqs.tobytes(),
        stamps=stamps.tobytes(),
        entry=b"",
        part=False,
    )
    return expanded, base, end


async def _fetch_all(
    objects: storage.ObjectStore, pieces: list[Piece], keys: storage.Encryption | None
) -> list[tuple[Piece, bytes] | storage.CorruptObjectError]:
    return await asyncio.gather(*(_fetch(objects, piece, keys) for piece in pieces))


async def _fetch(
    objects: storage.ObjectStore, piece: Piece, keys: storage.Encryption | None
) -> tuple[Piece, bytes] | storage.CorruptObjectError:
    """The piece's record bytes (decoded, for a compressed or sealed section), or why they
    cannot be; a piece of a section with its record directory comes back as the piece of the
    records it wants, the directory having said where they are."""
    try:
        if piece.part:
            return await _part(objects, piece, keys)
        blob = await objects.get_range(piece.obj, piece.offset, piece.offset + piece.length)
        if piece.entry:
            return _expanded(piece, blob, keys)
        if piece.codec == storage.CODEC_NONE:
            return piece, blob
        plain = storage.decode_stored(
            blob, piece.codec, piece.section_length, key=piece.obj, offset=piece.offset, keys=keys
        )
        # What a ranged GET of a plain section would have returned for the same records.
        return piece, plain[piece.base : piece.base + piece.span]
    except storage.CorruptObjectError as exc:
        return exc
    except storage.ObjectNotFoundError as exc:
        raise ReadError(
            f"{piece.describe()} is gone from {objects.url}: compaction and the janitor may "
            "have moved these messages since the read was planned; read again"
        ) from exc
    except storage.ObjectStoreError as exc:
        raise ReadError(f"cannot read {piece.describe()} from {objects.url}: {exc}") from exc
    except storage.KeyRefusedError as exc:
        raise ReadError(f"cannot read {piece.describe()}: {exc}") from exc


def _piece_batch(
    piece: Piece,
    blob: bytes,
    spec: ReadSpec,
    on_problem: Callable[[Problem], None],
    fail_on_corrupt: bool,
) -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]

    offsets, lengths, seqs, stamps = piece.arrays()
    subjects = piece.subjects
    n = len(subjects)
    wanted = _wanted(piece, seqs, stamps, spec)
    if not wanted:
        return None
    buf = memoryview(blob)
    records: dict[int, storage.Record] = {}
    contiguous = len(wanted) * 2 >= n and offsets[-1] + lengths[-1] == sum(lengths)
    try:
        if contiguous:
            decoded = storage.decode_records(buf, n, key=piece.obj, base_offset=piece.offset)
            records = dict(enumerate(decoded))
        else:
            for i in wanted:
                at = offsets[i]
                records[i] = storage.decode_records(
                    buf[at : at + lengths[i]], 1, key=piece.obj, base_offset=piece.offset + at
                )[0]
    except storage.CorruptObjectError as exc:
        if fail_on_corrupt:
            raise
        records = _salvage(piece, buf, wanted, offsets, lengths, seqs, exc, on_problem)
    out_seq: list[int] = []
    out_subject: list[str] = []
    out_time: list[int] = []
    out_headers: list[list[tuple[str, list[str]]] | None] = []
    out_data: list[bytes] = []
    for i in wanted:
        record = records.get(i)
        if record is None:
            continue
        out_seq.append(seqs[i])
        out_subject.append(record.subject)
        out_time.append(stamps[i] // 1000)
        out_headers.append(_headers(record.headers))
        out_data.append(record.data)
    schema = arrow_schema()
    count = len(out_seq)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([piece.stream] * count, type=pa.string()),
            pa.array(out_seq, type=pa.int64()),
            pa.array(out_subject, type=pa.string()),
            pa.array(out_time, type=schema.field("time").type),
            pa.array(out_headers, type=schema.field("headers").type),
            pa.array(out_data, type=pa.binary()),
        ],
        schema=schema,
    )


def _wanted(piece: Piece, seqs: array[int], stamps: array[int], spec: ReadSpec) -> list[int]:
    """Positions of the piece that are live and pass the filters."""
    n = len(piece.subjects)
    positions: Sequence[int] = range(n)
    if piece.tombs:
        tombs = piece.tombs
        positions = [i for i in positions if seqs[i] not in tombs]
    if spec.subject:
        subjects = piece.subjects
        ok = {s: matches(spec.subject, s) for s in set(subjects)}
        positions = [i for i in positions if ok[subjects[i]]]
    if spec.start_ns is not None:
        start_ns = spec.start_ns
        positions = [i for i in positions if stamps[i] >= start_ns]
    if spec.end_ns is not None:
        end_ns = spec.end_ns
        positions = [i for i in positions if stamps[i] < end_ns]
    return list(positions)


def _salvage(
    piece: Piece,
    buf: memoryview,
    wanted: list[int],
    offsets: array[int],
    lengths: array[int],
    seqs: array[int],
    exc: storage.CorruptObjectError,
    on_problem: Callable[[Problem], None],
) -> dict[int, storage.Record]:
    """Decode record by record, skipping (and reporting runs of) the damaged ones."""
    records: dict[int, storage.Record] = {}
    bad: list[int] = []
    detail = exc.detail
    for i in wanted:
        at = offsets[i]
        try:
            records[i] = storage.decode_records(buf[at : at + lengths[i]], 1, key=piece.obj)[0]
        except storage.CorruptObjectError as one:
            bad.append(i)
            detail = one.detail
    if not bad:
        # The damage lies in records nobody asked for.
        return records
    runs: list[list[int]] = []
    for i in bad:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    for span in runs:
        on_problem(Problem(piece.obj, piece.key, seqs[span[0]], seqs[span[-1]], detail))
    return records


_HEADER_START = b"NATS/1.0\r\n"
_HEADER_END = b"\r\n\r\n"


def _headers(block: bytes) -> list[tuple[str, list[str]]] | None:
    """A NATS header block as (name, values) pairs in first-seen order; None for no headers."""
    if not block:
        return None
    # The usual block (no status line, no folded lines) without the general parser, which
    # would cost half the time of a read.
    if block.startswith(_HEADER_START) and block.endswith(_HEADER_END) and len(block) >= 12:
        try:
            text = block[10:-4].decode()
        except UnicodeDecodeError:
            return _slow_headers(block)
        if not text:
            return []
        grouped: dict[str, list[str]] = {}
        for line in text.split("\r\n"):
            name, colon, value = line.partition(":")
            if not colon or not name or name[0] in " \t":
                return _slow_headers(block)
            grouped.setdefault(name, []).append(value.strip(" \t"))
        return list(grouped.items())
    return _slow_headers(block)


def _slow_headers(block: bytes) -> list[tuple[str, list[str]]]:
    try:
        fields = parse_headers(block).items()
    except (ValueError, UnicodeDecodeError):
        fields = _lenient_headers(block)
    grouped: dict[str, list[str]] = {}
    for name, value in fields:
        grouped.setdefault(name, []).append(value)
    return list(grouped.items())


def _lenient_headers(block: bytes) -> list[tuple[str, str]]:
    """Whatever `Name: value` lines a malformed block holds (the agent stores blocks as sent)."""
    out = []
    for line in block.decode("utf-8", errors="replace").split("\r\n")[1:]:
        name, colon, value = line.partition(":")
        if colon and name.strip():
            out.append((name.strip(), value.strip()))
    return out


def _add_date(batch: Any) -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    # Timestamps are UTC; casting to date32 takes the UTC calendar date.
    time = batch.column("time").cast(pa.timestamp("us"))
    date = pc.cast(time, pa.date32())
    return pa.RecordBatch.from_arrays(
        [*batch.columns, date], schema=batch.schema.append(pa.field("date", pa.date32()))
    )
