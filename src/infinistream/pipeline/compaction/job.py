"""`infinistream pipeline compact`: plan, write and swap chunks (see the package docstring).

Chunks run in waves of a few per Spark core; each wave's chunks are swapped as soon as it
ends, and a progress line is printed. A chunk with a corrupt (or missing) section is reported
and left alone, and the rest of its run is tried again without that entry. `--report` replays
the streams before and after and prints the GETs per MB it took.

Exit codes: 0 done (chunks skipped because their range changed meanwhile are normal), 1 the
job failed or found corrupt objects or could not write some chunks, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, TextIO

from infinistream.metadata import MetadataStore
from infinistream.pipeline.arguments import (
    EXIT_FAILED,
    EXIT_FENCE_LOST,
    EXIT_OK,
    EXIT_USAGE,
    add_streams_argument,
    nonnegative_duration,
)
from infinistream.pipeline.compaction.plan import (
    DEFAULT_ENTRY_BYTES,
    DEFAULT_ENTRY_RECORDS,
    Chunk,
    CompactSettings,
    MiB,
    StreamPlan,
    default_max_entries,
    plan_stream,
)
from infinistream.pipeline.compaction.report import MB, Replay, replay
from infinistream.pipeline.compaction.swap import Swap, SwapOutcome, swap_chunk
from infinistream.pipeline.compaction.tasks import ChunkResult, compact_chunk
from infinistream.pipeline.lease import (
    Fence,
    FenceLost,
    add_fence_arguments,
    fence_from_args,
    fenced,
)
from infinistream.pipeline.options import StoreError, StoreOptions
from infinistream.pipeline.snapshot import run, stream_names
from infinistream.pipeline.spark import SparkUnavailable, spark_session, use_workers_python
from infinistream.storage import ObjectStore
from infinistream.storage.layout import objects_prefix, written_ns_of
from infinistream.stream.loader import StreamSnapshot, read_stream

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class CompactionError(Exception):
    """The job cannot run: a store is missing or unreachable, a stream does not exist."""


# -- arguments --------------------------------------------------------------------------------


def parse_size(text: str) -> int:
    """Bytes from `67108864`, `64MiB`, `64M`, `512KiB`, `1GB` (powers of 1024)."""
    value = text.strip().upper().replace("IB", "").removesuffix("B")
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    try:
        n = int(float(value[:-1]) * units[value[-1]]) if value[-1:] in units else int(value)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (e.g. 64MiB)") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}")
    return n


def parse_age(text: str) -> int:
    """Nanoseconds from a Go duration (`1m`, `30s`, `0`)."""
    return int(nonnegative_duration(text) * 1e9)


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--min-age",
        type=parse_age,
        default=60 * 10**9,
        help="compact only objects at least this old (default 1m)",
    )
    add(
        "--target-size",
        type=parse_size,
        default=64 * MiB,
        help="live bytes per new object (default 64MiB)",
    )
    add(
        "--entry-size",
        type=parse_size,
        default=DEFAULT_ENTRY_BYTES,
        help="bytes of one new section (an index entry each); a cold read fetches a section"
        " whole (default 1MiB)",
    )
    add(
        "--entry-records",
        type=_positive,
        default=DEFAULT_ENTRY_RECORDS,
        help=f"messages one new section holds at most (default {DEFAULT_ENTRY_RECORDS})",
    )
    add(
        "--max-entries",
        type=_positive,
        default=None,
        help="index entries one swap transaction replaces and writes "
        "(default 1000; on etcd its max_txn_ops less 8, 120 by default)",
    )
    add_streams_argument(parser, "compact")
    add(
        "--no-recompact",
        dest="recompact",
        action="store_false",
        help="leave compacted objects alone (no L1 -> L2 merging of small ones)",
    )
    add(
        "--upgrade-index",
        action="store_true",
        help="also rewrite compacted objects whose index entries are of the form written "
        "before record directories (after upgrading every agent)",
    )
    add(
        "--report",
        action="store_true",
        help="replay the streams before and after, print GETs per MB and object counts",
    )
    add("--dry-run", action="store_true", help="print the plan, write nothing")
    add_fence_arguments(parser)


def settings_from_args(args: argparse.Namespace, options: StoreOptions) -> CompactSettings:
    max_entries = args.max_entries or default_max_entries(options.metadata)
    if args.entry_size > args.target_size:
        raise ValueError("--entry-size must not exceed --target-size")
    return CompactSettings(
        min_age_ns=args.min_age,
        target_bytes=args.target_size,
        entry_bytes=args.entry_size,
        entry_records=args.entry_records,
        max_entries=max_entries,
        recompact=args.recompact,
        upgrade_index=args.upgrade_index,
    )


# -- the summary -------------------------------------------------------------------------------


@dataclass
class Summary:
    streams: int = 0
    streams_compacted: int = 0
    chunks_planned: int = 0
    chunks_swapped: int = 0
    chunks_skipped: int = 0  # their range changed meanwhile, or the stream went
    chunks_corrupt: int = 0
    chunks_failed: int = 0
    objects_read: int = 0
    sections_read: int = 0
    objects_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    entries_before: int = 0
    entries_after: int = 0
    objects_before: int = 0  # distinct objects the streams reference
    objects_after: int = 0
    seconds: float = 0.0
    corrupt: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    report_before: Replay | None = None
    report_after: Replay | None = None

    @property
    def ok(self) -> bool:
        return not (self.corrupt or self.failures)

    def line(self) -> str:
        return (
            f"compact: done in {self.seconds:.1f}s: {self.streams} streams "
            f"({self.streams_compacted} compacted); chunks {self.chunks_swapped} swapped, "
            f"{self.chunks_skipped} skipped, {self.chunks_corrupt} corrupt, "
            f"{self.chunks_failed} failed; read {self.objects_read} objects "
            f"({self.sections_read} sections, {self.bytes_read / MB:.2f} MB, "
            f"{self.messages_read} messages); wrote {self.objects_written} objects "
            f"({self.bytes_written / MB:.2f} MB, {self.messages_written} messages); "
            f"index entries {self.entries_before} -> {self.entries_after}, "
            f"objects referenced {self.objects_before} -> {self.objects_after}"
        )


class Progress:
    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.out = out
        self.err = err

    def info(self, text: str) -> None:
        print(text, file=self.out or sys.stdout, flush=True)

    def error(self, text: str) -> None:
        print(text, file=self.err or sys.stderr, flush=True)


def stopped_by(progress: Progress, command: str, exc: Exception) -> int:
    """The exit code of `infinistream pipeline <command>` stopped by `exc`, said on `progress`:
    a lost lease (the job commits nothing more), or a failure."""
    if isinstance(exc, FenceLost):
        progress.error(
            f"infinistream pipeline {command}: lease lost, nothing more committed: {exc}"
        )
        return EXIT_FENCE_LOST
    progress.error(f"infinistream pipeline {command}: {exc}")
    return EXIT_FAILED


# -- the steps --------------------------------------------------------------------------------


@dataclass
class Plan:
    group: str
    settings: CompactSettings
    snapshots: dict[str, StreamSnapshot]
    streams: list[StreamPlan]
    chunks: list[Chunk]


async def read_snapshots(
    meta: MetadataStore, options: StoreOptions, streams: Sequence[str]
) -> dict[str, StreamSnapshot]:
    try:
        names = list(streams) or await stream_names(meta, options.group)
        out: dict[str, StreamSnapshot] = {}
        for name in names:
            snap = await read_stream(meta, options.group, name)
            if snap is None:
                if streams:
                    raise CompactionError(
                        f"stream {name!r} does not exist in group {options.group!r} "
                        f"of metadata store {options.metadata}"
                    )
                continue  # deleted since it was listed
            out[name] = snap
    except CompactionError:
        raise
    except Exception as exc:
        raise CompactionError(f"metadata store {options.metadata}: {exc}") from exc
    return out


async def plan_compaction(
    options: StoreOptions,
    settings: CompactSettings,
    streams: Sequence[str] = (),
    *,
    now_ns: int | None = None,
) -> Plan:
    """Snapshot the streams and plan their chunks (reads metadata, HEADs odd objects)."""
    async with options.open() as stores:
        await _probe(stores.objects, options.group)
        snapshots = await read_snapshots(stores.meta, options, streams)
        ages = await _ages_of_unnamed(stores.objects, snapshots.values())
    now = time.time_ns() if now_ns is None else now_ns
    plans: list[StreamPlan] = []
    chunks: list[Chunk] = []
    for snap in snapshots.values():
        sp = plan_stream(snap, options.group, settings, now, ages=ages, first_id=len(chunks))
        plans.append(sp)
        chunks += sp.chunks
    return Plan(options.group, settings, snapshots, plans, chunks)


async def _probe(objects: ObjectStore, group: str) -> None:
    """One LIST request: a store that cannot be reached fails here, named, not in a task."""
    try:
        async for _ in objects.iter_list(objects_prefix(group)):
            break
    except Exception as exc:
        raise CompactionError(f"object store {objects.url} cannot be read: {exc}") from exc


async def _ages_of_unnamed(
    objects: ObjectStore, snapshots: Iterable[StreamSnapshot]
) -> dict[str, int]:
    """Ages of referenced objects whose names carry no time, from their last-modified time."""
    unnamed = {
        ref.entry.obj
        for snap in snapshots
        for ref in snap.entries
        if written_ns_of(ref.entry.obj) is None
    }
    now = time.time()
    ages: dict[str, int] = {}
    for obj in sorted(unnamed):
        try:
            info = await objects.head(obj)
        except Exception as exc:
            raise CompactionError(f"object store {objects.url}: {exc}") from exc
        ages[obj] = int((now - info.last_modified.timestamp()) * 1e9)
    return ages


def run_chunks(
    spark: SparkSession, options: StoreOptions, settings: CompactSettings, chunks: list[Chunk]
) -> list[ChunkResult]:
    """Write the chunks' new objects on Spark executors; one result per chunk, in order."""
    if not chunks:
        return []
    use_workers_python(spark)
    task = partial(
        compact_chunk,
        options=options,
        entry_bytes=settings.entry_bytes,
        entry_records=settings.entry_records,
    )
    rdd = spark.sparkContext.parallelize(chunks, numSlices=len(chunks))
    results: list[ChunkResult] = rdd.map(task).collect()
    return results


async def swap_all(
    options: StoreOptions,
    chunks: Sequence[Chunk],
    results: Sequence[ChunkResult],
    fence: Fence | None = None,
) -> list[Swap | None]:
    """Swap every written chunk (None for chunks with problems, which are left alone).

    With a `fence` (the jobs role's lease), every swap also compares it, so a run whose lease
    was taken over commits nothing (FenceLost).
    """
    async with options.open() as stores:
        meta = fenced(stores.meta, fence)
        out: list[Swap | None] = []
        for chunk, result in zip(chunks, results, strict=True):
            if result.error or result.corrupt:
                out.append(None)
                continue
            out.append(await swap_chunk(meta, chunk, result, stores.objects))
        return out


# -- the job -----------------------------------------------------------------------------------


def compact(
    spark: SparkSession | Callable[[], SparkSession],
    options: StoreOptions,
    settings: CompactSettings,
    streams: Sequence[str] = (),
    *,
    report: bool = False,
    dry_run: bool = False,
    progress: Progress | None = None,
    fence: Fence | None = None,
) -> Summary:
    """The whole job. `spark` may be a session or a function that starts one (called only
    when there is something to compact). Raises CompactionError, StoreError or SparkUnavailable."""
    progress = progress or Progress()
    started = time.monotonic()
    summary = Summary()
    run(options.check_exist())
    if report:
        summary.report_before = run(_replay(options, streams))
        progress.info(f"compact: before: {summary.report_before.line()}")
    plan = run(plan_compaction(options, settings, streams))
    summary.streams = len(plan.snapshots)
    summary.chunks_planned = len(plan.chunks)
    summary.entries_before = sum(len(s.entries) for s in plan.snapshots.values())
    summary.objects_before = len({r.entry.obj for s in plan.snapshots.values() for r in s.entries})
    live = sum(c.live_bytes for c in plan.chunks)
    progress.info(
        f"compact: {options.objects}: {summary.streams} streams, {summary.entries_before} "
        f"index entries in {summary.objects_before} objects; planned {len(plan.chunks)} "
        f"chunks of {sum(len(c.sources) for c in plan.chunks)} entries "
        f"({live / MB:.2f} MB live) in {sum(1 for p in plan.streams if p.chunks)} streams"
    )
    if dry_run:
        for chunk in plan.chunks:
            progress.info(f"compact: would rewrite {chunk.describe()}")
    elif plan.chunks:
        session = spark if not callable(spark) else spark()
        _execute(session, options, plan, summary, progress, fence)
    summary.entries_after, summary.objects_after = run(_index_totals(options, plan))
    if report:
        summary.report_after = run(_replay(options, streams))
        progress.info(f"compact: after: {summary.report_after.line()}")
    summary.seconds = time.monotonic() - started
    progress.info(summary.line())
    return summary


def _execute(
    spark: SparkSession,
    options: StoreOptions,
    plan: Plan,
    summary: Summary,
    progress: Progress,
    fence: Fence | None,
) -> None:
    pending = list(plan.chunks)
    next_id = len(plan.chunks)  # ids for the parts of chunks split later
    wave_size = max(4, spark.sparkContext.defaultParallelism * 4)
    compacted: set[str] = set()
    objects_read: set[str] = set()
    done = 0
    while pending:
        wave, pending = pending[:wave_size], pending[wave_size:]
        results = run_chunks(spark, options, plan.settings, wave)
        swaps = run(swap_all(options, wave, results, fence))
        for chunk, result, swap in zip(wave, results, swaps, strict=True):
            summary.bytes_read += result.bytes_read
            summary.sections_read += len(chunk.sources)
            summary.messages_read += result.records_in
            objects_read |= chunk.objects
            if result.obj:
                summary.objects_written += 1
                summary.bytes_written += result.obj_bytes
            if result.error:
                summary.chunks_failed += 1
                summary.failures.append(result.error)
                progress.error(f"compact: error: {result.error}")
            elif result.corrupt:
                summary.chunks_corrupt += 1
                for problem in result.corrupt:
                    text = (
                        f"stream {chunk.stream!r}: index entry {problem.key} left as it is: "
                        f"{problem.detail}"
                    )
                    summary.corrupt.append(text)
                    progress.error(f"compact: corrupt: {text}")
                parts = chunk.without((p.key for p in result.corrupt), next_id)
                next_id += len(parts)
                pending += parts
            elif swap is not None and swap.outcome is SwapOutcome.SWAPPED:
                summary.chunks_swapped += 1
                summary.messages_written += result.records_out
                compacted.add(chunk.stream)
            elif swap is not None:
                summary.chunks_skipped += 1
                text = f"{chunk.describe()}: skipped ({swap.outcome.value}: {swap.detail})"
                summary.skipped.append(text)
                progress.info(f"compact: {text}")
        done += len(wave)
        summary.objects_read = len(objects_read)
        progress.info(
            f"compact: {done}/{done + len(pending)} chunks: {summary.chunks_swapped} swapped, "
            f"{summary.chunks_skipped} skipped, {summary.chunks_corrupt} corrupt, "
            f"{summary.chunks_failed} failed; {summary.objects_written} objects written "
            f"({summary.bytes_written / MB:.2f} MB)"
        )
    summary.streams_compacted = len(compacted)


async def _index_totals(options: StoreOptions, plan: Plan) -> tuple[int, int]:
    """Index entries and distinct objects of the planned streams, as they are now."""
    async with options.open() as stores:
        snaps = [await read_stream(stores.meta, options.group, name) for name in plan.snapshots]
    entries = [r for s in snaps if s is not None for r in s.entries]
    return len(entries), len({r.entry.obj for r in entries})


async def _replay(options: StoreOptions, streams: Sequence[str]) -> Replay:
    async with options.open() as stores:
        snaps = await read_snapshots(stores.meta, options, streams)
        objects = stores.objects
        try:
            return await replay(objects, list(snaps.values()))
        except Exception as exc:
            raise CompactionError(f"object store {objects.url}: {exc}") from exc


def _session_factory(master: str) -> Callable[[], SparkSession]:
    return partial(spark_session, master, "infinistream-compact")


def main(
    args: argparse.Namespace, options: StoreOptions, *, spark: SparkSession | None = None
) -> int:
    """`infinistream pipeline compact`; `spark` lets a caller lend its own session."""
    progress = Progress()
    try:
        settings = settings_from_args(args, options)
        fence = fence_from_args(args)
    except ValueError as exc:
        progress.error(f"infinistream pipeline compact: {exc}")
        return EXIT_USAGE
    factory: SparkSession | Callable[[], SparkSession]
    factory = spark if spark is not None else _session_factory(getattr(args, "master", "local[*]"))
    try:
        summary = compact(
            factory,
            options,
            settings,
            args.streams,
            report=args.report,
            dry_run=args.dry_run,
            progress=progress,
            fence=fence,
        )
    except (FenceLost, CompactionError, StoreError, SparkUnavailable) as exc:
        return stopped_by(progress, "compact", exc)
    except KeyboardInterrupt:
        progress.error("infinistream pipeline compact: interrupted")
        return EXIT_FAILED
    if summary.report_before is not None and summary.report_after is not None:
        _print_report(progress, summary.report_before, summary.report_after)
    if not summary.ok:
        progress.error(
            f"infinistream pipeline compact: {len(summary.corrupt)} corrupt sections, "
            f"{len(summary.failures)} failed chunks (see above)"
        )
        return EXIT_FAILED
    return EXIT_OK


def _print_report(progress: Progress, before: Replay, after: Replay) -> None:
    progress.info(
        f"compact: report: GETs per MB replayed {before.gets_per_mb:.2f} -> "
        f"{after.gets_per_mb:.2f} ({before.gets} -> {after.gets} GETs for "
        f"{after.bytes / MB:.2f} MB); objects {before.objects} -> {after.objects}; "
        f"index entries {before.entries} -> {after.entries}"
    )
