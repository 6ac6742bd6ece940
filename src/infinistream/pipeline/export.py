"""`infinistream pipeline export --stream S --to PATH`: a stream to Parquet, incrementally.

Each run appends the messages committed since the previous run to `PATH`, as Parquet files
with the data source's columns (stream, seq, subject, time, headers, data) partitioned by the
UTC date of `time` (`PATH/date=2026-05-01/...`). How far the export has got (the bookmark)
lives in metadata, under the group:

    {group}/pipeline/export/{stream}/{sha1(destination URL)}    JSON: ExportBookmark

A run:

1. reads the stream's snapshot and the bookmark; the run will export the live messages with
   sequences bookmark+1 .. the stream's last sequence now;
2. claims the run in the bookmark (compare-and-set: `pending_run`), so a crashed run is known;
3. reads the messages on Spark executors (the data source's reading code: one ranged GET per
   section, deleted messages skipped) and writes them with Spark to `PATH/_staging/RUN/`;
4. moves the files into `PATH/date=.../` under names that start with the run id;
5. advances the bookmark (compare-and-set against the claim), clearing the claim.

The command checks the stream and the bookmark before it starts Spark: a missing stream, an
unreachable metadata store, or nothing new to export costs well under a second.

A run that finds a claim left by a crashed run first deletes that run's files (by their
run-id prefix) and its staging directory, then exports from the bookmark: no message is
exported twice, even across crashes. Two exports of the same stream to the same destination
at the same time are not supported: the later one rolls back the earlier one's files, whose
final compare-and-set then fails (it reports the conflict and removes what it published).

Deleted messages: a message deleted (MSG.DELETE, with or without erase; purges; limits) before
a run is never exported, and compaction then removes its bytes from object storage. Files an
earlier run already wrote are not rewritten: a message deleted after it was exported stays in
that run's Parquet file. (Rewriting exported files for erasure is not built.)

If the stream was deleted and created again under the same name, the bookmark (which records
the stream's incarnation) no longer applies and the export refuses: export the new stream to a
new destination.

Records that fail their checksum are reported (object, sequences) and skipped, and the
command exits with status 1; the bookmark still moves past them.
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
import re
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import msgspec

from infinistream.metadata import Compare, Item, MetadataStore, Put
from infinistream.pipeline import reading
from infinistream.pipeline.arguments import EXIT_FAILED, EXIT_OK, EXIT_USAGE, stopped
from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.snapshot import run
from infinistream.stream.loader import StreamSnapshot

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ExportBookmark",
    "ExportConflictError",
    "ExportError",
    "ExportResult",
    "add_arguments",
    "bookmark_key",
    "export_stream",
    "main",
    "normalize_destination",
]

STAGING = "_staging"


class ExportError(Exception):
    """The export cannot run, or failed; the message says why."""


class ExportConflictError(ExportError):
    """Another export moved the bookmark while this one ran."""


class ExportBookmark(msgspec.Struct, kw_only=True):
    destination: str
    stream: str
    # The stream's incarnation (StreamState.uid): a recreated stream starts over at seq 1.
    uid: str
    # Every live message up to here has been exported.
    last_seq: int = 0
    rows: int = 0
    runs: int = 0
    updated_ns: int = 0
    # A run that claimed the bookmark and has not finished (or crashed): its files start with
    # this id, and it meant to export through `pending_through`.
    pending_run: str = ""
    pending_through: int = 0
    # When this destination was first written, or rewritten from scratch (`--rewrite`): what
    # an erase requested before then was never exported there.
    started_ns: int = 0
    # A rewrite that claimed the bookmark and has not removed the old files yet.
    rewriting: bool = False


_encode = msgspec.json.encode
_decode_bookmark = msgspec.json.Decoder(ExportBookmark).decode


@dataclass
class ExportResult:
    stream: str
    destination: str
    first_seq: int  # the range this run covered (nothing when first_seq > last_seq)
    last_seq: int
    rows: int = 0
    files: list[str] = field(default_factory=list)
    dates: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    rolled_back: str = ""  # the id of a crashed run whose files were removed first
    seconds: float = 0.0

    def summary(self) -> str:
        if self.first_seq > self.last_seq:
            return (
                f"stream {self.stream}: nothing new to export to {self.destination} "
                f"(exported through seq {self.last_seq})"
            )
        dates = f"{self.dates[0]}..{self.dates[-1]}" if self.dates else "none"
        return (
            f"stream {self.stream}: exported {self.rows} messages (seqs {self.first_seq}.."
            f"{self.last_seq}) to {self.destination} in {len(self.files)} files, dates "
            f"{dates}, in {self.seconds:.1f}s"
        )


def normalize_destination(destination: str) -> str:
    """A URL for the destination: local paths become absolute file: URLs."""
    if "://" in destination or destination.startswith("file:"):
        return destination.rstrip("/")
    return Path(destination).expanduser().resolve().as_uri()


def bookmark_key(group: str, stream: str, destination: str) -> str:
    digest = hashlib.sha1(destination.encode()).hexdigest()
    return f"{bookmarks_prefix(group, stream)}{digest}"


def bookmarks_prefix(group: str, stream: str) -> str:
    """The bookmarks of every export of `stream`."""
    return f"{group}/pipeline/export/{stream}/"


# --- the command ----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stream", required=True, help="Stream to export")
    parser.add_argument(
        "--to", dest="to", required=True, help="Destination directory or URL for Parquet files"
    )
    parser.add_argument(
        "--partition-bytes",
        type=int,
        default=reading.DEFAULT_PARTITION_BYTES,
        help="Bytes of messages per Spark task (default 32 MiB)",
    )
    parser.add_argument(
        "--rewrite",
        action="store_true",
        help="Remove what was exported to the destination and export the stream again "
        "(what was erased or deleted since is no longer there)",
    )


def main(args: argparse.Namespace, options: StoreOptions) -> int:
    from infinistream.pipeline.spark import SparkUnavailable, spark_session

    # A missing stream or an unreachable metadata store fails here, and a run with nothing to
    # do ends here, before Spark starts.
    rewrite = getattr(args, "rewrite", False)
    try:
        done = None
        if not rewrite:
            done = run(_up_to_date(options, args.stream, normalize_destination(args.to)))
    except reading.ReadError as exc:
        return stopped(f"infinistream: export: {exc}", EXIT_FAILED)
    if done is not None:
        print(done.summary())
        return EXIT_OK
    try:
        spark = spark_session(getattr(args, "master", "local[*]"), "infinistream-export")
    except SparkUnavailable as exc:
        return stopped(f"infinistream: export: {exc}", EXIT_USAGE)
    try:
        result = export_stream(
            spark,
            options,
            args.stream,
            args.to,
            partition_bytes=args.partition_bytes,
            rewrite=rewrite,
        )
    except ExportError as exc:
        return stopped(f"infinistream: export: {exc}", EXIT_FAILED)
    except Exception as exc:
        return stopped(f"infinistream: export failed: {spark_error_message(exc)}", EXIT_FAILED)
    finally:
        spark.stop()
    print(result.summary())
    for problem in result.problems:
        print(f"infinistream: export: skipped unreadable records: {problem}", file=sys.stderr)
    return EXIT_FAILED if result.problems else EXIT_OK


_PY_ERROR = re.compile(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Exception)): (.+)$", re.MULTILINE)


def spark_error_message(exc: BaseException) -> str:
    """The Python error inside a Spark job failure (a Java stack trace around a Python one)."""
    text = str(exc)
    ours = [
        m
        for m in _PY_ERROR.finditer(text)
        if m.group(1) in ("ReadError", "StreamNotFoundError", "ObjectStoreError", "ExportError")
        or "infinistream" in m.group(0)
    ]
    if ours:
        m = ours[-1]
        return f"{m.group(1)}: {m.group(2).strip()}"
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


# --- the job --------------------------------------------------------------------------------


def export_stream(
    spark: SparkSession,
    options: StoreOptions,
    stream: str,
    destination: str,
    *,
    partition_bytes: int = reading.DEFAULT_PARTITION_BYTES,
    rewrite: bool = False,
) -> ExportResult:
    started = time.monotonic()
    dest = normalize_destination(destination)
    key = bookmark_key(options.group, stream, dest)
    try:
        snapshot, item = run(_read_start(options, stream, key, rewrite))
    except reading.ReadError as exc:
        raise ExportError(str(exc)) from exc
    uid = snapshot.state.uid
    if item is None:
        bookmark = ExportBookmark(destination=dest, stream=stream, uid=uid)
        bookmark.started_ns, revision = time.time_ns(), 0
    else:
        bookmark, revision = _decode_bookmark(item.value), item.mod_revision
    files = HadoopFiles(spark, dest)
    if rewrite:
        # Claimed first: a rewrite that dies before the old files are gone is finished by the
        # next run, which finds `rewriting` set.
        bookmark = ExportBookmark(destination=dest, stream=stream, uid=uid, rewriting=True)
        bookmark.started_ns = time.time_ns()
        revision = _swap(options, key, revision, bookmark)
    if bookmark.rewriting:
        files.remove_all()
        bookmark.rewriting = False
        revision = _swap(options, key, revision, bookmark)
    if bookmark.uid != uid:
        raise ExportError(
            f"stream {stream!r} was deleted and created again since it was exported to {dest} "
            f"(through seq {bookmark.last_seq}); export the new stream to a new destination"
            " or rewrite this one (--rewrite)"
        )
    rolled_back = ""
    if bookmark.pending_run:
        rolled_back = bookmark.pending_run
        files.remove_run(rolled_back)
        bookmark.pending_run, bookmark.pending_through = "", 0
    first, last = bookmark.last_seq + 1, snapshot.state.last_seq
    result = ExportResult(stream, dest, first, last, rolled_back=rolled_back)
    if first > last:
        if rolled_back:
            revision = _swap(options, key, revision, bookmark)
        result.first_seq, result.last_seq = first, bookmark.last_seq
        result.seconds = time.monotonic() - started
        return result

    run_id = f"seq{first}-{last}-{uuid.uuid4().hex[:8]}"
    bookmark.pending_run, bookmark.pending_through = run_id, last
    revision = _swap(options, key, revision, bookmark)
    try:
        tasks = reading.plan_read(
            snapshot,
            options,
            reading.ReadSpec(start_seq=first, end_seq=last),
            partition_bytes=partition_bytes,
            min_partitions=2 * spark.sparkContext.defaultParallelism,
        )
        if tasks:
            rows, problems = _write(spark, tasks, files.staging(run_id))
            result.rows, result.problems = rows, problems
            result.files = files.publish(run_id)
            result.dates = sorted({f.split("/")[0].removeprefix("date=") for f in result.files})
    except BaseException:
        # Leave nothing half-published; the claim stays, so the next run also cleans up.
        _remove_quietly(files, run_id)
        raise
    bookmark.last_seq = last
    bookmark.rows += result.rows
    bookmark.runs += 1
    bookmark.updated_ns = time.time_ns()
    bookmark.pending_run, bookmark.pending_through = "", 0
    try:
        _swap(options, key, revision, bookmark)
    except ExportConflictError:
        _remove_quietly(files, run_id)
        raise
    # Any other failure of the swap leaves its outcome unknown, so the files stay: if the swap
    # did not happen, the claim is still there and the next run rolls this one back.
    result.seconds = time.monotonic() - started
    return result


def _remove_quietly(files: HadoopFiles, run_id: str) -> None:
    try:
        files.remove_run(run_id)
    except Exception as exc:  # pragma: no cover - best effort; the next run retries
        print(f"infinistream: export: cleanup of run {run_id} failed: {exc}", file=sys.stderr)


async def _up_to_date(options: StoreOptions, stream: str, dest: str) -> ExportResult | None:
    """A result saying so if the export to `dest` has everything the stream has now."""
    state = await reading.load_state(options, stream)
    item = await _get_bookmark(options, bookmark_key(options.group, stream, dest))
    if item is None:
        return None
    bookmark = _decode_bookmark(item.value)
    if bookmark.uid != state.uid or bookmark.pending_run or bookmark.last_seq < state.last_seq:
        return None
    return ExportResult(stream, dest, bookmark.last_seq + 1, bookmark.last_seq)


async def _get_bookmark(options: StoreOptions, key: str) -> Item | None:
    try:
        async with options.open() as stores:
            return await stores.meta.get(key)
    except Exception as exc:
        raise reading.ReadError(
            f"cannot read the export bookmark from metadata store {options.metadata}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


async def _read_start(
    options: StoreOptions, stream: str, key: str, rewrite: bool = False
) -> tuple[StreamSnapshot, Item | None]:
    """The bookmark, then the stream from the bookmark on (the index before it is not read;
    all of it for a rewrite, or to finish one)."""
    item = await _get_bookmark(options, key)
    lo = 0
    if item is not None and not rewrite:
        bookmark = _decode_bookmark(item.value)
        lo = 0 if bookmark.rewriting else bookmark.last_seq + 1
    return await reading.load_snapshot(options, stream, lo), item


def _swap(options: StoreOptions, key: str, revision: int, bookmark: ExportBookmark) -> int:
    """Write the bookmark if it is still at `revision`; the new revision."""

    async def swap(meta: MetadataStore) -> int:
        result = await meta.txn([Compare(key, revision)], [Put(key, _encode(bookmark))])
        if not result.succeeded:
            raise ExportConflictError(
                f"another export of stream {bookmark.stream!r} to {bookmark.destination} "
                "moved the bookmark while this one ran; this run's files were removed"
            )
        return result.revision

    async def with_meta() -> int:
        async with options.open() as stores:
            return await swap(stores.meta)

    return run(with_meta())


def _write(spark: SparkSession, tasks: list[reading.ReadTask], path: str) -> tuple[int, list[str]]:
    """Read the tasks on executors and write them to `path` as Parquet by date."""
    from pyspark.sql.types import BinaryType, DateType, StructField, StructType

    context = spark.sparkContext
    rows = context.accumulator(0)
    problems = context.accumulator([], cast(Any, _ListParam()))
    out_schema = StructType([*reading.spark_schema().fields, StructField("date", DateType())])
    blobs = [(pickle.dumps(task),) for task in tasks]
    plan = spark.createDataFrame(
        context.parallelize(blobs, len(blobs)), StructType([StructField("task", BinaryType())])
    )

    def read_tasks(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            for blob in batch.column(0).to_pylist():
                task: reading.ReadTask = pickle.loads(blob)
                for out in reading.read_task(
                    task, on_problem=lambda p: problems.add([str(p)]), with_date=True
                ):
                    rows.add(out.num_rows)
                    yield out

    frame = plan.mapInArrow(read_tasks, out_schema)
    # Parquet's own microsecond timestamps rather than Spark's legacy INT96 default, so that
    # every Parquet reader sees `time` as a UTC timestamp.
    conf_key = "spark.sql.parquet.outputTimestampType"
    previous = spark.conf.get(conf_key, None)
    spark.conf.set(conf_key, "TIMESTAMP_MICROS")
    try:
        frame.write.partitionBy("date").mode("errorifexists").parquet(path)
    finally:
        if previous is None:
            spark.conf.unset(conf_key)
        else:
            spark.conf.set(conf_key, previous)
    return int(rows.value), sorted(set(problems.value))


class _ListParam:
    """An accumulator of strings (the problems executors report); a pyspark AccumulatorParam
    by duck typing, so that importing this module does not import Spark."""

    def zero(self, value: list[str]) -> list[str]:
        return []

    def addInPlace(self, value1: list[str], value2: list[str]) -> list[str]:
        value1.extend(value2)
        return value1


class HadoopFiles:
    """Files under the destination, through Spark's Hadoop FileSystem (any scheme Spark
    writes to: file:, hdfs:, s3a: with the right jars)."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        context: Any = spark.sparkContext
        jvm = context._jvm
        self._path = jvm.org.apache.hadoop.fs.Path
        self.root = root
        self._fs = self._path(root).getFileSystem(context._jsc.hadoopConfiguration())

    def _p(self, relative: str = "") -> Any:
        return self._path(f"{self.root}/{relative}" if relative else self.root)

    def staging(self, run_id: str) -> str:
        return f"{self.root}/{STAGING}/{run_id}"

    def _dirs(self, relative: str) -> list[str]:
        path = self._p(relative)
        if not self._fs.exists(path):
            return []
        return [s.getPath().getName() for s in self._fs.listStatus(path) if s.isDirectory()]

    def _files(self, relative: str) -> list[str]:
        return [s.getPath().getName() for s in self._fs.listStatus(self._p(relative)) if s.isFile()]

    def publish(self, run_id: str) -> list[str]:
        """Move the run's staged files into place; their paths relative to the root."""
        staged = f"{STAGING}/{run_id}"
        moved = []
        for date_dir in sorted(self._dirs(staged)):
            if not date_dir.startswith("date="):
                continue
            self._fs.mkdirs(self._p(date_dir))
            for name in sorted(self._files(f"{staged}/{date_dir}")):
                if name.startswith(("_", ".")):
                    continue
                target = f"{date_dir}/{run_id}-{name}"
                if not self._fs.rename(self._p(f"{staged}/{date_dir}/{name}"), self._p(target)):
                    raise ExportError(f"could not move {staged}/{date_dir}/{name} to {target}")
                moved.append(target)
        self._fs.delete(self._p(staged), True)
        if not self._fs.listStatus(self._p(STAGING)):
            self._fs.delete(self._p(STAGING), False)
        return moved

    def remove_all(self) -> None:
        """Delete every file an export published here, and its staging directory."""
        self._fs.delete(self._p(STAGING), True)
        for date_dir in self._dirs(""):
            if date_dir.startswith("date="):
                self._fs.delete(self._p(date_dir), True)

    def remove_run(self, run_id: str) -> None:
        """Delete a run's published files and its staging directory."""
        self._fs.delete(self._p(f"{STAGING}/{run_id}"), True)
        prefix = f"{run_id}-"
        for date_dir in self._dirs(""):
            if not date_dir.startswith("date="):
                continue
            for name in self._files(date_dir):
                if name.startswith(prefix) or name.startswith(f".{prefix}"):
                    self._fs.delete(self._p(f"{date_dir}/{name}"), False)
