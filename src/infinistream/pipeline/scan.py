"""`infinistream pipeline scan`: list the stored messages whose records are damaged.

Agents notice a damaged record only when someone reads it. The scan reads every live message
of every stream (or of the streams named) straight from object storage, checking each record
as an agent's reader does (`stream.reader`: its own checksum, its length against the index, its
object there and long enough), one Spark task per index entry. It changes nothing.

Each damaged message is printed as a line (or a JSON object with `--json`), with the stream,
sequence, object, offset and reason; a summary goes to stderr. The exit code says what was
found: 0 nothing damaged, 4 damaged messages (listed), 1 the scan could not finish (a store
that fails is a failure, never reported as damage), 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from infinistream.pipeline.arguments import add_streams_argument, stopped
from infinistream.pipeline.options import StoreError, StoreOptions
from infinistream.pipeline.snapshot import run, stream_names
from infinistream.pipeline.spark import SparkUnavailable, spark_session, use_workers_python
from infinistream.storage import CorruptObjectError, ObjectNotFoundError, SectionCache
from infinistream.stream.damage import Damage, DamageLog
from infinistream.stream.loader import StreamSnapshot, read_stream
from infinistream.stream.reader import MessageReader
from infinistream.stream.records import decode_entry, encode
from infinistream.stream.sections import Segment, read_segment, section_of

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXIT_CLEAN = 0
EXIT_FAILED = 1
EXIT_DAMAGED = 4

# Bytes of records checked per GET: a compacted section can be far larger.
WINDOW_BYTES = 8 * 1024 * 1024


class ScanError(Exception):
    """The scan could not finish."""


@dataclass(frozen=True)
class SectionTask:
    """One index entry to check, and which of its sequences are live (picklable)."""

    stream: str
    key: str
    entry: bytes
    first_seq: int
    last_seq: int
    tombstones: tuple[int, ...]


@dataclass
class SectionResult:
    checked: int = 0
    damaged: list[Damage] = field(default_factory=list)


@dataclass
class ScanReport:
    streams: int = 0
    sections: int = 0
    checked: int = 0
    damaged: list[Damage] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"scan: {self.streams} streams, {self.sections} index entries,"
            f" {self.checked} messages checked: {len(self.damaged)} damaged"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_streams_argument(parser, "scan")
    parser.add_argument(
        "--json", action="store_true", help="one JSON object per damaged message on stdout"
    )


def main(
    args: argparse.Namespace, options: StoreOptions, *, spark: SparkSession | None = None
) -> int:
    try:
        session = spark or spark_session(getattr(args, "master", "local[*]"), "infinistream-scan")
        report = scan(session, options, args.streams)
    except (ScanError, StoreError, SparkUnavailable) as exc:
        return stopped(f"infinistream pipeline scan: {exc}", EXIT_FAILED)
    for damage in report.damaged:
        if args.json:
            print(json.dumps(asdict(damage)))
        else:
            print(
                f"damaged: stream {damage.stream} seq {damage.seq} object {damage.obj}"
                f" offset {damage.offset}: {damage.reason}"
            )
    print(report.summary(), file=sys.stderr)
    return EXIT_DAMAGED if report.damaged else EXIT_CLEAN


def scan(spark: SparkSession, options: StoreOptions, streams: list[str]) -> ScanReport:
    """Check every live message of `streams` (all when empty); what was found."""
    snapshots = run(_snapshots(options, streams))
    tasks = [task for snap in snapshots for task in section_tasks(snap)]
    report = ScanReport(streams=len(snapshots), sections=len(tasks))
    if not tasks:
        return report
    use_workers_python(spark)
    sc = spark.sparkContext
    slices = min(len(tasks), max(1, sc.defaultParallelism * 2))
    try:
        results: list[SectionResult] = (
            sc.parallelize(tasks, slices).mapPartitions(partial(scan_sections, options)).collect()
        )
    except Exception as exc:
        raise ScanError(f"reading objects failed: {_first_line(exc)}") from exc
    for result in results:
        report.checked += result.checked
        report.damaged += result.damaged
    report.damaged.sort(key=lambda d: (d.stream, d.seq))
    return report


async def _snapshots(options: StoreOptions, streams: list[str]) -> list[StreamSnapshot]:
    await options.check_exist()
    async with options.open() as stores:
        try:
            names = streams or await stream_names(stores.meta, options.group)
            found = [(name, await read_stream(stores.meta, options.group, name)) for name in names]
        except StoreError:
            raise
        except Exception as exc:
            raise ScanError(f"metadata store {options.metadata}: {_first_line(exc)}") from exc
    missing = [name for name, snap in found if snap is None]
    if missing:
        raise ScanError(f"no stream {missing[0]!r} in group {options.group!r}")
    return [snap for _, snap in found if snap is not None]


def section_tasks(snap: StreamSnapshot) -> Iterator[SectionTask]:
    first, last = snap.state.first_seq, snap.state.last_seq
    for ref in snap.entries:
        section = ref.section()
        if not section.count or section.last < first or section.first > last:
            continue
        lo, hi = max(section.first, first), min(section.last, last)
        yield SectionTask(
            stream=snap.name,
            key=ref.key,
            entry=encode(ref.entry),
            first_seq=first,
            last_seq=last,
            tombstones=tuple(t for t in snap.tombstones if lo <= t <= hi),
        )


def scan_sections(options: StoreOptions, tasks: Iterable[SectionTask]) -> Iterator[SectionResult]:
    """Spark executor side: check the live records of each task's index entry."""
    return iter(run(_scan_sections(options, list(tasks))))


async def _scan_sections(options: StoreOptions, tasks: list[SectionTask]) -> list[SectionResult]:
    with options.open_objects() as objects:
        # The scan reports what it finds itself: no log line per record on the executors.
        reader = MessageReader(
            objects, SectionCache(0), DamageLog(announce=False), encryption=options.encryption()
        )
        return [await _scan_section(reader, task) for task in tasks]


async def _scan_section(reader: MessageReader, task: SectionTask) -> SectionResult:
    tombs = set(task.tombstones)

    def live(seq: int) -> bool:
        return task.first_seq <= seq <= task.last_seq and seq not in tombs

    result = SectionResult()
    entry = decode_entry(task.entry)
    try:
        seg = await read_segment(reader.objects, task.key, entry, reader.encryption)
    except (CorruptObjectError, ObjectNotFoundError, ValueError) as exc:
        # Without its record directory no record of the section can be told apart: each live
        # message it should hold is damaged (its object gone: as a read of a record says).
        if isinstance(exc, ObjectNotFoundError):
            reason = "object missing"
        else:
            reason = f"record directory unreadable ({exc})"
        section = section_of(task.key, entry)[0]
        seqs = [s for s in range(section.first, section.last + 1) if live(s)]
        result.checked += len(seqs)
        result.damaged += [Damage(task.stream, s, entry.obj, entry.offset, reason) for s in seqs]
        return result
    positions = [p for p in range(len(seg.subjects)) if live(seg.seq_at(p))]
    for run_positions in _windows(seg, positions):
        found: list[Damage] = []
        first, last = seg.seq_at(run_positions[0]), seg.seq_at(run_positions[-1])
        await reader.read_parts(seg, first, last, (), found)
        result.checked += len(run_positions)
        result.damaged += [d for d in found if live(d.seq)]
    return result


def _windows(seg: Segment, positions: list[int]) -> Iterator[list[int]]:
    """`positions` in runs of about WINDOW_BYTES of records."""
    run_positions: list[int] = []
    size = 0
    for p in positions:
        run_positions.append(p)
        size += seg.lengths[p]
        if size >= WINDOW_BYTES:
            yield run_positions
            run_positions, size = [], 0
    if run_positions:
        yield run_positions


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
