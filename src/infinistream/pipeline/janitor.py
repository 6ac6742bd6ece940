"""The janitor: delete the objects nothing references any more; apply limits to idle streams.

Objects are write-once and only the janitor deletes them (invariant 3). What it deletes is
garbage of three kinds: objects compaction replaced, objects whose messages all expired or were
purged (or whose stream was deleted), and orphans of batches whose commit failed after the PUT.

How a run decides, and why it is safe:

1. Limits first. Streams nobody publishes to still have max_age (and the other limits) applied,
   by the same planner and committer the agents use, so retention holds with no agent running.
2. List `{group}/objects/` with Spark: the listing is split by level (`l0`, `l1`, ...) and, in
   each level, by ranges of the key's timestamp, one task each; the result is checkpointed
   (listed once, never re-listed behind our back).
3. Only then read, on the driver, which objects metadata references. An object that was listed
   and committed meanwhile is therefore seen as referenced; objects written after the listing
   are not listed at all.
4. Anti-join. An unreferenced object is deleted only when it is older than the grace period
   (by its store timestamp *and* the time in its key), so batches between their PUT and their
   commit are left alone, *and* has been seen unreferenced for a grace period: the first run
   that finds it marks it in metadata (`{group}/janitor/unreferenced/{key}`), a run at least a
   grace period later deletes it. That second condition covers in-flight reads: an agent that
   looked an index entry up just before compaction swapped it away still finds the object.
   With `--grace 0` both conditions hold at once (tests, emergencies).
5. Deletes run in executors, a partition per task; each task first checks the run's fence
   (when the jobs role gave it one) and deletes nothing if the lease was lost.

Before Spark starts, the stores are checked: a store that does not exist is an error (never
created empty), one that does not answer is an error naming it, and a bucket holding objects of
the group next to a metadata store that never held a stream of the group is refused (every
object would look unreferenced).

A dry run changes nothing (no limits committed, no marks written, no deletes) and reports what
would go, and how many bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec

from infinistream import natsconf
from infinistream.jetstream.api import StreamConfig
from infinistream.jetstream.errors import ApiError
from infinistream.metadata import MetadataError, MetadataStore
from infinistream.metadata.kv import Delete, Op, Put
from infinistream.pipeline.arguments import (
    EXIT_FAILED,
    EXIT_FENCE_LOST,
    EXIT_OK,
    EXIT_USAGE,
    stopped,
)
from infinistream.pipeline.erase.settle import record_completions
from infinistream.pipeline.lease import (
    Fence,
    FenceLost,
    add_fence_arguments,
    check_fence,
    fence_from_args,
    fenced,
)
from infinistream.pipeline.options import StoreError, StoreOptions
from infinistream.pipeline.snapshot import referenced_objects, run, stream_names
from infinistream.pipeline.spark import SparkUnavailable, spark_session, use_workers_python
from infinistream.storage import SectionCache
from infinistream.storage.layout import (
    is_objects_prefix,
    objects_prefix,
    time_floor,
    written_ns_of,
)
from infinistream.storage.objects import ObjectStore, ObjectStoreError
from infinistream.stream.catalog import Catalog, StreamEntry
from infinistream.stream.changes import Changes
from infinistream.stream.committer import CommitConflict, Committer
from infinistream.stream.damage import DamageLog
from infinistream.stream.limits import enforce_limits
from infinistream.stream.loader import DirectoryReader
from infinistream.stream.reader import MessageReader
from infinistream.stream.records import catalog_key
from infinistream.stream.view import StreamView

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEFAULT_GRACE = 600.0
# Metadata writes per transaction (etcd refuses more than --max-txn-ops, 128 by default).
_TXN_OPS = 100
_DELETE_CONCURRENCY = 32
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class JanitorError(Exception):
    """The run cannot go on: a store missing or unreachable, Spark not starting, ..."""


class UnreferencedMark(msgspec.Struct, kw_only=True):
    """When a janitor run first found an object unreferenced."""

    since_ns: int
    size: int


_encode_mark = msgspec.msgpack.Encoder().encode
_decode_mark = msgspec.msgpack.Decoder(UnreferencedMark).decode


def marks_prefix(group: str) -> str:
    return f"{group}/janitor/unreferenced/"


@dataclass(frozen=True)
class JanitorConfig:
    grace: float = DEFAULT_GRACE
    dry_run: bool = False
    fence: Fence | None = None
    # Listing tasks per level; None: twice Spark's default parallelism.
    partitions: int | None = None
    limits: bool = True


@dataclass
class JanitorReport:
    dry_run: bool = False
    grace: float = DEFAULT_GRACE
    streams: int = 0
    streams_with_limits: int = 0
    streams_limited: int = 0
    messages_removed: int = 0
    list_tasks: int = 0
    objects_listed: int = 0
    bytes_listed: int = 0
    objects_referenced: int = 0
    objects_unreferenced: int = 0
    objects_young: int = 0
    objects_waiting: int = 0
    objects_deletable: int = 0
    bytes_deletable: int = 0
    objects_deleted: int = 0
    bytes_deleted: int = 0
    delete_failures: int = 0
    erasures_complete: int = 0
    erasures_open: int = 0
    seconds: float = 0.0
    deletable_keys: list[str] = field(default_factory=list, repr=False)
    failures: list[str] = field(default_factory=list, repr=False)

    def summary(self) -> str:
        fields = {
            "streams": self.streams,
            "streams_limited": self.streams_limited,
            "messages_removed": self.messages_removed,
            "objects_listed": self.objects_listed,
            "bytes_listed": self.bytes_listed,
            "objects_referenced": self.objects_referenced,
            "objects_unreferenced": self.objects_unreferenced,
            "objects_young": self.objects_young,
            "objects_waiting": self.objects_waiting,
            "objects_deletable": self.objects_deletable,
            "bytes_deletable": self.bytes_deletable,
            "objects_deleted": self.objects_deleted,
            "bytes_deleted": self.bytes_deleted,
            "delete_failures": self.delete_failures,
            "erasures_complete": self.erasures_complete,
            "erasures_open": self.erasures_open,
            "objects_written": 0,
            "dry_run": "yes" if self.dry_run else "no",
            "grace_s": f"{self.grace:g}",
            "seconds": f"{self.seconds:.2f}",
        }
        return "janitor summary: " + " ".join(f"{k}={v}" for k, v in fields.items())


Progress = Callable[[str], None]


def _print_progress(message: str) -> None:
    print(f"janitor: {message}", flush=True)


# -- command line ------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--grace",
        default="10m",
        help="Delete only objects older than this and unreferenced for this long (default 10m;"
        " 0 is safe only while nothing writes)",
    )
    add("--dry-run", action="store_true", help="Report what would be deleted; change nothing")
    add("--partitions", type=int, help="Listing tasks per object level (default: 2 x cores)")
    add(
        "--no-limits",
        dest="limits",
        action="store_false",
        help="Do not apply stream limits (max_age, max_msgs, ...) to idle streams",
    )
    add_fence_arguments(parser)


def main(args: argparse.Namespace, options: StoreOptions) -> int:
    try:
        grace = natsconf.parse_duration(args.grace)
        if grace < 0:
            raise ValueError(f"--grace must not be negative, got {args.grace!r}")
        fence = fence_from_args(args)
        if args.partitions is not None and args.partitions < 1:
            raise ValueError("--partitions must be at least 1")
    except ValueError as exc:
        return stopped(f"infinistream pipeline janitor: {exc}", EXIT_USAGE)
    config = JanitorConfig(
        grace=grace,
        dry_run=args.dry_run,
        fence=fence,
        partitions=args.partitions,
        limits=args.limits,
    )
    try:
        if fence is not None:
            _print_progress(f"fenced by {fence}")
        # Stores that are missing, unreachable or mismatched fail here, before Spark starts.
        preflight(options, fence)
        try:
            spark = spark_session(args.master, "infinistream-janitor")
        except SparkUnavailable as exc:
            raise JanitorError(f"cannot start Spark (master {args.master}): {exc}") from exc
        report = run_janitor(spark, options, config)
    except FenceLost as exc:
        return stopped(f"janitor: stopped, nothing more deleted: {exc}", EXIT_FENCE_LOST)
    except (JanitorError, StoreError) as exc:
        return stopped(f"janitor: {exc}", EXIT_FAILED)
    print(report.summary(), flush=True)
    return EXIT_FAILED if report.delete_failures else EXIT_OK


# -- the run -----------------------------------------------------------------------------------


def preflight(options: StoreOptions, fence: Fence | None = None) -> None:
    """Check that the stores exist, answer, and belong together (and that the fence holds)."""
    run(_preflight(options, fence))


async def _preflight(options: StoreOptions, fence: Fence | None) -> None:
    await options.check_exist()
    async with options.open() as stores:
        try:
            await _survey(options, stores.objects, stores.meta, fence)
        except MetadataError as exc:
            raise JanitorError(f"metadata store {options.metadata}: {exc}") from exc


async def _survey(
    options: StoreOptions, objects: ObjectStore, meta: MetadataStore, fence: Fence | None
) -> tuple[list[str], list[tuple[str, str | None]]]:
    """The group's streams and object levels; refuses stores that do not belong together."""
    group = options.group
    names = await stream_names(meta, group)
    marker = await meta.get(catalog_key(group))
    if fence is not None:
        await check_fence(meta, fence)
    levels = await _probe_levels(objects, group)
    if marker is None and any(first is not None for _, first in levels):
        raise JanitorError(
            f"refusing to run: {objects.url} holds objects under {objects_prefix(group)}/ but "
            f"metadata store {options.metadata} never held a stream of group {group!r}; "
            "are --objects and --metadata the same deployment's?"
        )
    return names, levels


def run_janitor(
    spark: SparkSession,
    options: StoreOptions,
    config: JanitorConfig,
    progress: Progress = _print_progress,
) -> JanitorReport:
    """One janitor run against the stores `options` names; see the module docstring."""
    use_workers_python(spark)
    return run(_run(spark, options, config, progress))


async def _run(
    spark: SparkSession, options: StoreOptions, config: JanitorConfig, progress: Progress
) -> JanitorReport:
    started = time.monotonic()
    report = JanitorReport(dry_run=config.dry_run, grace=config.grace)
    async with options.open() as stores:
        try:
            await _janitor(spark, options, stores.objects, stores.meta, config, report, progress)
        except MetadataError as exc:
            raise JanitorError(f"metadata store {options.metadata}: {exc}") from exc
    report.seconds = time.monotonic() - started
    return report


async def _janitor(
    spark: SparkSession,
    options: StoreOptions,
    objects: ObjectStore,
    meta: MetadataStore,
    config: JanitorConfig,
    report: JanitorReport,
    progress: Progress,
) -> None:
    group = options.group
    names, levels = await _survey(options, objects, meta, config.fence)
    report.streams = len(names)
    writer = fenced(meta, config.fence)
    if config.limits:
        directories = MessageReader(
            objects, SectionCache(0), DamageLog(), encryption=options.encryption()
        ).segment
        await _apply_limits(writer, group, config.dry_run, report, progress, directories)

    partitions = config.partitions or max(1, 2 * spark.sparkContext.defaultParallelism)
    list_start = time.time_ns()
    parts = plan_list_parts(levels, partitions, list_start)
    report.list_tasks = len(parts)
    progress(f"listing {objects.url}/{objects_prefix(group)}/ in {len(parts)} tasks")
    listed = await asyncio.to_thread(_list_objects, spark, options, parts, report)
    progress(f"listed {report.objects_listed} objects, {report.bytes_listed} bytes")

    # Read only now: whatever was listed and committed meanwhile counts as referenced.
    referenced = await referenced_objects(meta, group)
    cutoff = list_start - _ns(config.grace)
    old = await asyncio.to_thread(_unreferenced, spark, listed, referenced, cutoff, report)
    report.objects_referenced = report.objects_listed - report.objects_unreferenced
    progress(
        f"{report.objects_unreferenced} unreferenced ({report.objects_young} younger than "
        f"the {config.grace:g}s grace), {len(referenced)} referenced by {len(names)} streams"
    )

    deletable = await _settle_marks(writer, group, old, config, report)
    report.objects_deletable = len(deletable)
    report.bytes_deletable = sum(size for _, size in deletable)
    report.deletable_keys = sorted(key for key, _ in deletable)
    if config.dry_run:
        progress(
            f"dry run: would delete {report.objects_deletable} objects "
            f"({report.bytes_deletable} bytes); {report.objects_waiting} waiting for the grace"
        )
        return
    if deletable:
        await _delete(spark, options, meta, writer, config, deletable, partitions, report, progress)
    # Erase requests complete when the last object holding their bytes is gone.
    standings = await record_completions(writer, objects, group, full=False)
    report.erasures_complete = sum(1 for s in standings if s.request.completed_ns)
    report.erasures_open = len(standings) - report.erasures_complete


async def _delete(
    spark: SparkSession,
    options: StoreOptions,
    meta: MetadataStore,
    writer: MetadataStore,
    config: JanitorConfig,
    deletable: list[tuple[str, int]],
    partitions: int,
    report: JanitorReport,
    progress: Progress,
) -> None:
    group = options.group
    progress(f"deleting {len(deletable)} objects ({report.bytes_deletable} bytes)")
    results = await asyncio.to_thread(
        _delete_objects, spark, options, config.fence, deletable, partitions
    )
    deleted: list[str] = []
    for key, size, error in results:
        if error is None:
            deleted.append(key)
            report.objects_deleted += 1
            report.bytes_deleted += size
        else:
            report.delete_failures += 1
            report.failures.append(f"{key}: {error}")
    for failure in report.failures[:5]:
        progress(f"delete failed: {failure}")
    if config.grace > 0:
        await _write_ops(writer, [Delete(marks_prefix(group) + key) for key in deleted])
    if config.fence is not None and report.delete_failures:
        # Tasks refuse to delete once the lease is gone: say so rather than report failures.
        await check_fence(meta, config.fence)


# -- limits ------------------------------------------------------------------------------------


def _has_limits(cfg: StreamConfig) -> bool:
    return cfg.max_age > 0 or cfg.max_msgs > 0 or cfg.max_bytes > 0 or cfg.max_msgs_per_subject > 0


def _plan_on(entry: StreamEntry, view: StreamView) -> int:
    """What applying the limits would remove from the stream `view` pictures."""
    return _limits_planner(entry, Changes(view))


def _limits_planner(entry: StreamEntry, changes: Changes) -> int:
    before = changes.msgs
    enforce_limits(entry, changes)
    return before - changes.msgs


async def _apply_limits(
    meta: MetadataStore,
    group: str,
    dry_run: bool,
    report: JanitorReport,
    progress: Progress,
    directories: DirectoryReader,
) -> None:
    """Apply each stream's limits, as an agent would on its next publish or expiry tick."""
    catalog = Catalog(meta, group, directories=directories)
    await catalog.refresh(force=True)
    committer = Committer(meta, catalog)
    for name, entry in sorted(catalog.streams.items()):
        # nats-server never removes messages of a sealed stream by its limits.
        if entry.config.sealed or not _has_limits(entry.config):
            continue
        report.streams_with_limits += 1
        try:
            if dry_run:
                view = await catalog.view(name)
                if view is None:
                    continue
                removed = await catalog.answer(partial(_plan_on, entry, view))
            else:
                removed = await committer.change_stream(name, _limits_planner)
        except ApiError:
            continue  # deleted meanwhile
        except CommitConflict as exc:
            progress(f"stream {name}: limits not applied: {exc}")
            continue
        if removed:
            report.streams_limited += 1
            report.messages_removed += removed
            verb = "would remove" if dry_run else "removed"
            progress(f"stream {name}: limits {verb} {removed} messages")


# -- marks: how long an object has been unreferenced --------------------------------------------


async def _settle_marks(
    meta: MetadataStore,
    group: str,
    old: list[tuple[str, int]],
    config: JanitorConfig,
    report: JanitorReport,
) -> list[tuple[str, int]]:
    """Of the old unreferenced objects, those unreferenced for a grace period already.

    Marks the others (first seen unreferenced now) and drops marks of objects that are gone.
    """
    prefix = marks_prefix(group)
    items = await meta.range(prefix)
    marks = {item.key[len(prefix) :]: _decode_mark(item.value) for item in items}
    if config.grace <= 0:
        # Everything old goes now: marks left by earlier runs with a grace are moot.
        if not config.dry_run:
            await _write_ops(meta, [Delete(prefix + key) for key in marks])
        return old
    now = time.time_ns()
    ripe = now - _ns(config.grace)
    deletable: list[tuple[str, int]] = []
    ops: list[Op] = []
    for key, size in old:
        mark = marks.pop(key, None)
        if mark is None:
            ops.append(Put(prefix + key, _encode_mark(UnreferencedMark(since_ns=now, size=size))))
            report.objects_waiting += 1
        elif mark.since_ns <= ripe:
            deletable.append((key, size))
        else:
            report.objects_waiting += 1
    # What is left was deleted already, or is referenced (or young) again: forget it.
    ops += [Delete(prefix + key) for key in marks]
    if not config.dry_run:
        await _write_ops(meta, ops)
    return deletable


async def _write_ops(meta: MetadataStore, ops: list[Op]) -> None:
    for i in range(0, len(ops), _TXN_OPS):
        await meta.txn([], ops[i : i + _TXN_OPS])


# -- listing -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ListPart:
    """One listing task: keys under `prefix` greater than `after` and at most `upto`."""

    prefix: str
    after: str | None = None
    upto: str | None = None
    # Only the objects directly under `prefix` (not under its sub-prefixes).
    flat: bool = False


async def _probe_levels(store: ObjectStore, group: str) -> list[tuple[str, str | None]]:
    """The prefixes to list, each with one key under it (None: nothing there).

    On S3 the key is the smallest one (listings are sorted), which is where the timestamp
    ranges of the level start; elsewhere it is any key, and the ranges are less even.
    """
    root = objects_prefix(group)
    try:
        prefixes, objects = await store.list_with_delimiter(root)
        levels: list[tuple[str, str | None]] = []
        for prefix in sorted(prefixes):
            first = await asyncio.to_thread(_first_key, store, prefix)
            levels.append((prefix, first))
    except ObjectStoreError as exc:
        raise JanitorError(f"cannot list {store.url}/{root}/: {_first_line(exc)}") from exc
    if objects:
        levels.append((root, objects[0].key))
    return levels


def _first_key(store: ObjectStore, prefix: str) -> str | None:
    """One key under `prefix` (on S3 the smallest: its listing is sorted)."""
    return next((info.key for info in store.list_blocking(prefix)), None)


def plan_list_parts(
    levels: list[tuple[str, str | None]], partitions: int, now_ns: int
) -> list[ListPart]:
    """Split each level into `partitions` ranges of key timestamps, up to now.

    The ranges cover every key whatever it looks like: keys before the first boundary go to the
    first range, keys after the last (or without a timestamp that sorts in between) to the last.
    """
    parts: list[ListPart] = []
    for prefix, first in levels:
        if first is None:
            continue
        if is_objects_prefix(prefix):  # the root itself: only what lies directly in it
            parts.append(ListPart(prefix, flat=True))
            continue
        lo = written_ns_of(first)
        if lo is None or lo >= now_ns or partitions == 1:
            parts.append(ListPart(prefix))
            continue
        bounds = sorted(
            {time_floor(prefix, lo + (now_ns - lo) * i // partitions) for i in range(1, partitions)}
        )
        edges: list[str | None] = [None, *bounds, None]
        parts += [ListPart(prefix, edges[i], edges[i + 1]) for i in range(len(edges) - 1)]
    return parts


def list_part(options: StoreOptions, part: ListPart) -> Iterator[tuple[Any, ...]]:
    """Executor side: list one part; rows (key, size, last_modified, modified_ns, key_ns)."""
    with options.open_objects() as store:
        # S3 lists in key order, so a task can stop at its upper bound; local directories do
        # not.
        ordered = store.url.startswith("s3://")
        for info in store.list_blocking(part.prefix, flat=part.flat, after=part.after):
            key = info.key
            if part.upto is not None and key > part.upto:
                if ordered:
                    return
                continue
            modified = info.last_modified
            yield (key, info.size, modified, _datetime_ns(modified), written_ns_of(key))


def _listing_schema() -> Any:
    from pyspark.sql.types import (
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("key", StringType(), False),
            StructField("size", LongType(), False),
            StructField("last_modified", TimestampType(), False),
            StructField("modified_ns", LongType(), False),
            StructField("key_ns", LongType(), True),
        ]
    )


def _list_objects(
    spark: SparkSession, options: StoreOptions, parts: list[ListPart], report: JanitorReport
) -> DataFrame:
    """The listing as a DataFrame (key, size, last_modified, ...), listed once, now."""
    from pyspark.sql import functions as F

    sc = spark.sparkContext
    if not parts:
        return spark.createDataFrame([], _listing_schema())
    rdd = sc.parallelize(parts, len(parts)).flatMap(functools.partial(list_part, options))
    try:
        # Eager and with its lineage cut: the listing happens here, before metadata is read,
        # and is never silently redone later (which could see objects written after that read).
        listed = spark.createDataFrame(rdd, _listing_schema()).localCheckpoint(eager=True)
        row = listed.agg(F.count("*"), F.coalesce(F.sum("size"), F.lit(0))).first()
    except Exception as exc:
        raise JanitorError(f"listing {options.objects} failed: {_spark_error(exc)}") from exc
    assert row is not None
    report.objects_listed, report.bytes_listed = int(row[0]), int(row[1])
    return listed


def _unreferenced(
    spark: SparkSession,
    listed: DataFrame,
    referenced: set[str],
    cutoff_ns: int,
    report: JanitorReport,
) -> list[tuple[str, int]]:
    """Anti-join the listing with the referenced keys; (key, size) of those old enough."""
    from pyspark.sql import functions as F

    refs = spark.createDataFrame([(key,) for key in referenced], "key string")
    # An object is as young as the later of its store timestamp and the time in its key.
    age = F.greatest(F.col("modified_ns"), F.coalesce(F.col("key_ns"), F.lit(0)))
    # The referenced keys go to every task (no shuffle of the listing); garbage is what comes
    # back to the driver, which is small next to the listing.
    unreferenced = (
        listed.join(F.broadcast(refs), "key", "left_anti")
        .select("key", "size", (age > cutoff_ns).alias("young"))
        .collect()
    )
    old: list[tuple[str, int]] = []
    for row in unreferenced:
        if row["young"]:
            report.objects_young += 1
        else:
            old.append((str(row["key"]), int(row["size"])))
    report.objects_unreferenced = len(unreferenced)
    return old


# -- deleting ----------------------------------------------------------------------------------


def delete_part(
    options: StoreOptions, fence: Fence | None, rows: Iterable[tuple[str, int]]
) -> list[tuple[str, int, str | None]]:
    """Executor side: delete a partition's objects; (key, size, error or None) each."""
    batch = list(rows)
    if not batch:
        return []
    return run(_delete_batch(options, fence, batch))


async def _delete_batch(
    options: StoreOptions, fence: Fence | None, batch: list[tuple[str, int]]
) -> list[tuple[str, int, str | None]]:
    async with options.open() as stores:
        if fence is not None:
            try:
                await check_fence(stores.meta, fence)
            except Exception as exc:  # a lost fence, or no way to tell: delete nothing
                return [(key, size, f"not deleted: {exc}") for key, size in batch]
        store = stores.objects
    limit = asyncio.Semaphore(_DELETE_CONCURRENCY)

    async def delete(key: str, size: int) -> tuple[str, int, str | None]:
        async with limit:
            try:
                await store.delete(key)
            except (ObjectStoreError, ValueError) as exc:
                return key, size, str(exc)
            return key, size, None

    return list(await asyncio.gather(*(delete(key, size) for key, size in batch)))


def _delete_objects(
    spark: SparkSession,
    options: StoreOptions,
    fence: Fence | None,
    deletable: list[tuple[str, int]],
    partitions: int,
) -> list[tuple[str, int, str | None]]:
    slices = max(1, min(partitions, len(deletable)))
    rdd = spark.sparkContext.parallelize(deletable, slices)
    try:
        results: list[tuple[str, int, str | None]] = rdd.mapPartitions(
            functools.partial(delete_part, options, fence)
        ).collect()
    except Exception as exc:
        raise JanitorError(f"deleting from {options.objects} failed: {_spark_error(exc)}") from exc
    return results


# -- helpers -----------------------------------------------------------------------------------


def _datetime_ns(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1000


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _spark_error(exc: BaseException) -> str:
    """The Python error behind a failed Spark job, not the JVM's stack trace."""
    text = str(exc)
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith(("infinistream.", "ObjectStoreError", "obstore.")) or "Error: " in line:
            return line
    return _first_line(exc)
