"""The `infinistream` Spark data source: a stream as a DataFrame, read from object storage.

    from infinistream.pipeline.datasource import register
    register(spark)
    df = (spark.read.format("infinistream")
          .option("store_dir", "/var/lib/infinistream")     # or objects + metadata URLs
          .option("stream", "ORDERS")
          .option("subject", "orders.eu.>")
          .load())

Columns (`SCHEMA_DDL`): stream string, seq bigint, subject string, time timestamp (UTC, the
stored nanoseconds truncated to microseconds), headers map<string,array<string>> (each header
name with its values in order; null for a message without headers), data binary.

Options (names are case-insensitive):

    stream            the stream to read (required)
    store_dir         the agent's -sd directory; or
    objects, metadata the object store and metadata store URLs, as `serve` takes them
    group             virtual group (default "default")
    account           an account of the agent's config: reads its virtual group only
    s3_endpoint, s3_region, s3_access_key_id, s3_secret_access_key
    subject           subject filter, wildcards allowed
    startSeq, endSeq  sequence bounds, both inclusive
    startTime, endTime  time bounds, start inclusive, end exclusive: ISO 8601 (UTC unless an
                      offset is given) or integer nanoseconds since the epoch
    partitionBytes    at most this many bytes of records per Spark partition (default 32 MiB)
    minPartitions     make partitions smaller (down to 1 MiB) to have at least this many
                      (default 8)
    readConcurrency   ranged GETs in flight per task (default 8)
    onCorrupt         "skip" (default: report on the executor's stderr and go on) or "fail"

The streaming reader (`spark.readStream.format("infinistream")`) takes the same options; its
offsets are `{"seq": N, "uid": U}`: the next stream sequence to read, and the stream's
incarnation (a query fails, rather than stalls, when its stream is deleted and created
again). More options:

    startingOffsets      "earliest" (default: the first live message, or startSeq),
                         "latest" (only messages published after the query starts) or a
                         sequence number
    maxRecordsPerBatch   at most this many sequences per micro-batch

Each micro-batch reads sequences [start, end) as the stream has them when the batch is
planned, so messages deleted before then are not delivered; a deletion after a micro-batch has
run cannot take back what it delivered.

The driver (Spark's Python planner process) reads the stream's metadata once per query or
micro-batch and plans one partition per run of object sections (or per slice of a large
section); executors only read objects, with one ranged GET per section or slice.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.reading import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MIN_PARTITIONS,
    DEFAULT_PARTITION_BYTES,
    ReadError,
    ReadSpec,
    ReadTask,
    load_snapshot,
    load_state,
    parse_time,
    plan_read,
    read_task,
    spark_schema,
)
from infinistream.pipeline.snapshot import run
from infinistream.pipeline.spark import use_workers_python

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = ["NAME", "InfiniStreamDataSource", "SourceOptions", "StreamPartition", "register"]

NAME = "infinistream"


class SourceOptions:
    """The data source options, parsed once, picklable."""

    def __init__(self, options: Mapping[str, str]) -> None:
        opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        self.stream = opts.get("stream", "")
        if not self.stream:
            raise ReadError("say which stream to read: .option('stream', NAME)")
        try:
            self.store = StoreOptions.from_mapping(opts)
        except ValueError as exc:
            raise ReadError(str(exc)) from exc
        start_ns = _opt_time(opts, "starttime")
        end_ns = _opt_time(opts, "endtime")
        self.spec = ReadSpec(
            subject=opts.get("subject", ""),
            start_seq=_opt_int(opts, "startseq", 0),
            end_seq=_opt_int(opts, "endseq", None),
            start_ns=start_ns,
            end_ns=end_ns,
        )
        self.partition_bytes = _opt_int(opts, "partitionbytes", DEFAULT_PARTITION_BYTES)
        self.min_partitions = _opt_int(opts, "minpartitions", DEFAULT_MIN_PARTITIONS)
        self.concurrency = _opt_int(opts, "readconcurrency", DEFAULT_CONCURRENCY)
        on_corrupt = opts.get("oncorrupt", "skip").lower()
        if on_corrupt not in ("skip", "fail"):
            raise ReadError(f"option onCorrupt must be 'skip' or 'fail', not {on_corrupt!r}")
        self.fail_on_corrupt = on_corrupt == "fail"
        self.starting = opts.get("startingoffsets", "earliest").strip().lower()
        if self.starting not in ("earliest", "latest") and not self.starting.isdigit():
            raise ReadError(
                "option startingOffsets must be 'earliest', 'latest' or a sequence number, "
                f"not {self.starting!r}"
            )
        self.max_records = _opt_int(opts, "maxrecordsperbatch", None)
        if self.max_records is not None and self.max_records < 1:
            raise ReadError("option maxRecordsPerBatch must be at least 1")

    def plan(self, start_seq: int, end_seq: int | None, uid: str | None = None) -> list[ReadTask]:
        spec = self.spec
        bounded = ReadSpec(
            subject=spec.subject,
            start_seq=max(spec.start_seq, start_seq),
            end_seq=_min_bound(spec.end_seq, end_seq),
            start_ns=spec.start_ns,
            end_ns=spec.end_ns,
        )
        snapshot = run(load_snapshot(self.store, self.stream, bounded.start_seq, bounded.end_seq))
        if uid is not None and snapshot.state.uid != uid:
            raise ReadError(
                f"stream {self.stream!r} was deleted and created again since this query "
                "started reading it; start a new query (with a new checkpoint)"
            )
        return plan_read(
            snapshot,
            self.store,
            bounded,
            partition_bytes=self.partition_bytes,
            min_partitions=self.min_partitions,
        )

    def read(self, task: ReadTask) -> Iterator[Any]:
        return read_task(task, concurrency=self.concurrency, fail_on_corrupt=self.fail_on_corrupt)


def _min_bound(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def _opt_int(opts: Mapping[str, str], name: str, default: Any) -> Any:
    value = opts.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        return int(value.strip())
    except ValueError:
        raise ReadError(f"option {name} must be an integer, not {value!r}") from None


def _opt_time(opts: Mapping[str, str], name: str) -> int | None:
    value = opts.get(name)
    if value is None or value.strip() == "":
        return None
    try:
        return parse_time(value, f"option {name}")
    except ValueError as exc:
        raise ReadError(str(exc)) from None


class StreamPartition(InputPartition):
    """One Spark partition: a `ReadTask`."""

    def __init__(self, task: ReadTask) -> None:
        super().__init__(None)
        self.task = task

    def __repr__(self) -> str:
        task = self.task
        return f"StreamPartition({len(task.pieces)} pieces, {task.nbytes} bytes)"


class InfiniStreamDataSource(DataSource):
    """`spark.read.format("infinistream")` and `spark.readStream.format("infinistream")`."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        return InfiniStreamReader(SourceOptions(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema)
        return InfiniStreamStreamReader(SourceOptions(self.options))


def _check_schema(schema: StructType) -> None:
    names = spark_schema().fieldNames()
    if schema.fieldNames() != names:
        raise ReadError(
            f"the infinistream source has a fixed schema ({', '.join(names)}): select or "
            "cast columns after loading instead of passing a schema"
        )


class InfiniStreamReader(DataSourceReader):
    def __init__(self, source: SourceOptions) -> None:
        self.source = source

    def partitions(self) -> Sequence[InputPartition]:
        tasks = self.source.plan(0, None)
        return [StreamPartition(task) for task in tasks]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        task = getattr(partition, "task", None)
        if task is None:  # Spark asks for one empty partition when there is nothing to read
            return iter(())
        return self.source.read(task)


class InfiniStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are `{"seq": N, "uid": U}`: the next sequence to read, and the incarnation of
    the stream it belongs to (a stream deleted and created again starts over at seq 1, which
    a query reading the old one must not take for its continuation). A batch reads
    sequences [start, end)."""

    def __init__(self, source: SourceOptions) -> None:
        self.source = source
        self.target: int | None = None  # the end for Trigger.AvailableNow

    def _state(self) -> tuple[int, int, str]:
        """(first live sequence, last sequence + 1, uid) of the stream now."""
        state = run(load_state(self.source.store, self.source.stream))
        return state.first_seq, state.last_seq + 1, state.uid

    def _check_uid(self, offset: dict[str, Any], uid: str) -> None:
        if offset.get("uid", uid) != uid:
            raise ReadError(
                f"stream {self.source.stream!r} was deleted and created again since this "
                "query started reading it; start a new query (with a new checkpoint)"
            )

    def _capped(self, end: int) -> int:
        if self.source.spec.end_seq is not None:
            end = min(end, self.source.spec.end_seq + 1)
        if self.target is not None:
            end = min(end, self.target)
        return end

    def initialOffset(self) -> dict[str, Any]:
        first, end, uid = self._state()
        starting = self.source.starting
        if starting == "latest":
            seq = end
        elif starting == "earliest":
            seq = max(first, self.source.spec.start_seq, 1)
        else:
            seq = max(int(starting), 1)
        return {"seq": seq, "uid": uid}

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._state()[1]

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.source.max_records is not None:
            return ReadMaxRows(self.source.max_records)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        _, latest, uid = self._state()
        self._check_uid(start, uid)
        begin = int(start["seq"])
        end = self._capped(latest)
        if isinstance(limit, ReadMaxRows):
            end = min(end, begin + max(1, limit.max_rows))
        return {"seq": max(begin, end), "uid": uid}

    def reportLatestOffset(self) -> dict[str, Any] | None:
        _, latest, uid = self._state()
        return {"seq": latest, "uid": uid}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = int(start["seq"]), int(end["seq"])
        if begin >= stop:
            return []
        tasks = self.source.plan(begin, stop - 1, uid=end.get("uid"))
        return [StreamPartition(task) for task in tasks]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        task = getattr(partition, "task", None)
        if task is None:
            return iter(())
        return self.source.read(task)

    def commit(self, end: dict[str, Any]) -> None:
        del end  # nothing to release: offsets live in Spark's checkpoint

    def stop(self) -> None:
        pass


def register(spark: SparkSession) -> None:
    """Register the `infinistream` format with this Spark session.

    Spark runs the source's Python code (planning, reading) in worker processes, which must
    import infinistream: they are pointed at this interpreter first (`use_workers_python`).
    """
    use_workers_python(spark)
    spark.dataSource.register(InfiniStreamDataSource)
