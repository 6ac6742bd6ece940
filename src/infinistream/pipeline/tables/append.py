"""Appending each stream's new messages to its table: the driver's side of `pipeline tables`.

For each table, a run:

1. opens the table (made on first use) and its record in metadata; a run that an earlier one
   left pending (killed, or failed, before or after its commit) is settled first: if no
   snapshot of the table names it, its files are deleted;
2. reads the marks of the table's newest pipeline snapshot (`progress.py`) and plans the read
   of each stream from its mark + 1 to the stream's last sequence now, with the data source's
   planner (deleted messages are never read);
3. records the run as pending in the table's record (compare-and-set, fenced by the lease);
4. has executors read the messages from object storage and write the data files
   (`writing.py`); with the JSON projection, a first pass finds new fields and the schema is
   evolved before anything is written;
5. commits every file and the new marks in one Iceberg transaction, after checking that the
   marks are still those the run started from and that no erase request arrived for what it
   wrote (a conflicting commit is retried after the same checks; if they fail the run's files
   are deleted and the next run starts again from the table's marks);
6. clears the pending run and records the new marks for others to read.

A run killed at any point therefore neither duplicates nor skips a message: before step 5 the
table is as it was and the files are removed next time; after it the marks have moved.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from infinistream.jetstream.accounts import GLOBAL_ACCOUNT
from infinistream.metadata import MetadataStore
from infinistream.pipeline.lease import Fence, check_fence, fenced
from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.reading import ReadSpec, ReadTask, load_snapshot, plan_read
from infinistream.pipeline.snapshot import run, stream_names
from infinistream.pipeline.spark import use_workers_python
from infinistream.pipeline.tables.catalog import ensure_table, open_catalog, table_name
from infinistream.pipeline.tables.config import TableConfig
from infinistream.pipeline.tables.evolution import evolve_json
from infinistream.pipeline.tables.files import delete_files, list_files
from infinistream.pipeline.tables.progress import (
    Mark,
    TableRecord,
    committed_marks,
    committed_run,
    read_record,
    summary_properties,
    update_record,
    write_record,
)
from infinistream.pipeline.tables.schema import PROP_JSON
from infinistream.pipeline.tables.writing import (
    DiscoverTask,
    TypeConflict,
    WriteResult,
    WriteTask,
    discover_task,
    merge_discovered,
    write_task,
)
from infinistream.stream.erase import erase_requests
from infinistream.stream.records import StreamKeys, StreamState, decode_state

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

T = TypeVar("T")
R = TypeVar("R")

COMMIT_ATTEMPTS = 5


class TablesError(Exception):
    """A table cannot be appended to; the message says which and why."""


@dataclass
class TableRun:
    """What a run did to one table."""

    table: str
    # stream -> (first, last) sequences this run covered
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)
    rows: int = 0
    files: int = 0
    bytes_written: int = 0
    write_seconds: float = 0.0  # the executors' read-and-write stage
    snapshot_id: int | None = None
    rolled_back: str = ""  # an earlier run's id, whose uncommitted files were removed
    skipped: str = ""  # why nothing was committed this time
    new_columns: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)

    def line(self) -> str:
        if self.skipped:
            return f"tables: {self.table}: {self.skipped}"
        ranges = ", ".join(f"{s} {a}..{b}" for s, (a, b) in sorted(self.ranges.items()))
        return (
            f"tables: {self.table}: appended {self.rows} rows in {self.files} files "
            f"({self.bytes_written / 1e6:.2f} MB, written in {self.write_seconds:.1f}s) from "
            f"{ranges or 'nothing new'}"
            + (f"; snapshot {self.snapshot_id}" if self.snapshot_id is not None else "")
            + (f"; new columns {', '.join(self.new_columns)}" if self.new_columns else "")
            + (f"; removed files of run {self.rolled_back}" if self.rolled_back else "")
        )


@dataclass
class AppendReport:
    tables: list[TableRun] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def problems(self) -> list[str]:
        return [p for t in self.tables for p in t.problems]

    def line(self) -> str:
        rows = sum(t.rows for t in self.tables)
        files = sum(t.files for t in self.tables)
        size = sum(t.bytes_written for t in self.tables)
        committed = sum(1 for t in self.tables if t.snapshot_id is not None)
        return (
            f"tables: done in {self.seconds:.1f}s: {len(self.tables)} tables, {committed} "
            f"committed; {rows} rows appended in {files} files ({size / 1e6:.2f} MB); "
            f"{len(self.problems)} problems"
        )


@dataclass
class _Plan:
    """One table's run, as planned from its marks and its streams' states."""

    table: Table
    record: TableRecord
    revision: int
    marks: dict[str, Mark]
    new_marks: dict[str, Mark]
    through_ns: dict[str, int]
    reads: list[ReadTask]
    seen: dict[str, _Seen]


class LazySession:
    """The job's Spark session, started when first needed (after a run is recorded as
    pending: a table with nothing new costs no Spark)."""

    def __init__(self, spark: SparkSession | Callable[[], SparkSession]) -> None:
        self.spark = spark

    def get(self) -> SparkSession:
        if callable(self.spark):
            self.spark = self.spark()
        return self.spark


def tell(say: Callable[[str], None], job: str, line: str, table: str, notes: Iterable[str]) -> None:
    """A table's outcome as a job says it: its line, then each note on it."""
    say(line)
    for note in notes:
        say(f"{job}: {table}: {note}")


def on_executors(spark: SparkSession, items: Sequence[T], task: Callable[[T], R]) -> list[R]:
    """`task` over `items` on Spark executors, one Spark task each; results in order."""
    if not items:
        return []
    use_workers_python(spark)
    rdd = spark.sparkContext.parallelize(list(items), numSlices=len(items))
    results: list[R] = rdd.map(task).collect()
    return results


def append_tables(
    spark: SparkSession | Callable[[], SparkSession],
    options: StoreOptions,
    config: TableConfig,
    *,
    streams: Sequence[str] = (),
    account: str = GLOBAL_ACCOUNT,
    fence: Fence | None = None,
    say: Callable[[str], None] = print,
) -> AppendReport:
    """The whole job. `spark` may be a session or a function that starts one (called only when
    some table has something new). Raises TablesError, StoreError, CatalogError, FenceLost."""
    started = time.monotonic()
    report = AppendReport()
    run(options.check_exist())
    states = run(_states(options, streams))
    catalog = open_catalog(config)
    by_table: dict[tuple[str, ...], dict[str, StreamState]] = {}
    for name, state in sorted(states.items()):
        by_table.setdefault(config.identifier(name, account), {})[name] = state
    session = LazySession(spark)
    for identifier, members in by_table.items():
        table = ensure_table(catalog, config, identifier)
        outcome = TableRun(table_name(identifier))
        plan = _plan(options, config, table, members, outcome, fence)
        if plan is not None and plan.reads:
            _append(session.get, options, plan, outcome, fence, say)
        elif plan is not None and plan.new_marks != plan.marks:
            # Only deleted messages since the last run: the marks move all the same.
            _commit(options, plan, [], outcome, fence, uuid.uuid4().hex)
        report.tables.append(outcome)
        tell(say, "tables", outcome.line(), outcome.table, outcome.conflicts)
    report.seconds = time.monotonic() - started
    return report


async def _states(options: StoreOptions, only: Sequence[str]) -> dict[str, StreamState]:
    async with options.open() as stores:
        names = list(only) or await stream_names(stores.meta, options.group)
        out: dict[str, StreamState] = {}
        for name in names:
            item = await stores.meta.get(StreamKeys(options.group, name).state)
            if item is None:
                if only:
                    raise TablesError(
                        f"stream {name!r} does not exist in group {options.group!r} of "
                        f"metadata store {options.metadata}"
                    )
                continue
            out[name] = decode_state(item.value)
        return out


def _plan(
    options: StoreOptions,
    config: TableConfig,
    table: Table,
    members: dict[str, StreamState],
    outcome: TableRun,
    fence: Fence | None,
) -> _Plan | None:
    record, revision = run(_record(options, outcome.table, table.location()))
    if record.pending_run:
        outcome.rolled_back, revision = settle_pending(options, table, record, revision, fence)
    marks = committed_marks(table)
    new_marks = dict(marks)
    through_ns: dict[str, int] = {}
    reads: list[ReadTask] = []
    seen: dict[str, _Seen] = {}
    for name, state in members.items():
        mark = marks.get(name)
        if mark is not None and mark.uid != state.uid:
            outcome.problems.append(
                f"stream {name!r} was deleted and created again since table {outcome.table} "
                f"appended it (through seq {mark.last_seq}): drop or rename the table to have "
                "it made again from the new stream"
            )
            continue
        first = mark.last_seq + 1 if mark is not None else 1
        if first > state.last_seq:
            continue
        snapshot = run(load_snapshot(options, name, first, state.last_seq))
        spec = ReadSpec(start_seq=first, end_seq=state.last_seq)
        reads += plan_read(snapshot, options, spec)
        head = snapshot.state.first_seq
        seen[name] = _Seen(state.uid, first, state.last_seq, head, snapshot.tombstones)
        new_marks[name] = Mark(state.last_seq, state.uid)
        through_ns[name] = state.last_ts
        outcome.ranges[name] = (first, state.last_seq)
    if outcome.problems and not outcome.ranges:
        return None
    return _Plan(table, record, revision, marks, new_marks, through_ns, reads, seen)


async def _record(options: StoreOptions, table: str, location: str) -> tuple[TableRecord, int]:
    async with options.open() as stores:
        record, revision = await read_record(stores.meta, options.group, table)
    record.location = location
    return record, revision


def settle_pending(
    options: StoreOptions,
    table: Table,
    record: TableRecord,
    revision: int,
    fence: Fence | None,
) -> tuple[str, int]:
    """Remove the files of the run the record names, unless a snapshot committed them; clear
    it. Returns (the run whose files were removed or "", the record's new revision)."""
    pending = record.pending_run
    removed = ""
    if not committed_run(table, pending):
        remove_run_files(table, pending)
        removed = pending
    record.pending_run = ""
    return removed, _save(options, record, revision, fence)


def remove_run_files(table: Table, run_id: str) -> int:
    """Delete the data files a run wrote (their names carry its id)."""
    files = [
        f.location for f in list_files(table.io, f"{table.location()}/data") if run_id in f.location
    ]
    return delete_files(table.io, files)


def _update(
    options: StoreOptions,
    table: str,
    change: Callable[[TableRecord], bool],
    fence: Fence | None,
) -> None:
    async def update() -> None:
        async with options.open() as stores:
            await update_record(fenced(stores.meta, fence), options.group, table, change)

    run(update())


def _save(options: StoreOptions, record: TableRecord, revision: int, fence: Fence | None) -> int:
    """Compare-and-set the table's record (fenced); its new revision."""

    async def save() -> int:
        async with options.open() as stores:
            return await write_record(fenced(stores.meta, fence), options.group, record, revision)

    return run(save())


def _append(
    spark: Callable[[], SparkSession],
    options: StoreOptions,
    plan: _Plan,
    outcome: TableRun,
    fence: Fence | None,
    say: Callable[[str], None],
) -> None:
    run_id = str(uuid.uuid4())
    plan.record.pending_run = run_id
    plan.revision = _save(options, plan.record, plan.revision, fence)
    say(f"tables: {outcome.table}: run {run_id}: {len(plan.reads)} read tasks")
    table = plan.table
    if table.metadata.properties.get(PROP_JSON) == "true":
        found = on_executors(
            spark(), [DiscoverTask(r, i) for i, r in enumerate(plan.reads)], discover_task
        )
        failed = [d.error for d in found if d.error]
        if failed:
            raise TablesError(
                f"table {outcome.table}: reading for the JSON projection: {failed[0]}"
            )
        outcome.new_columns = evolve_json(table, merge_discovered(found))
        table.refresh()
    io = tuple(sorted(table.io.properties.items()))
    tasks = [WriteTask(r, table.metadata, io, run_id, i) for i, r in enumerate(plan.reads)]
    session = spark()
    started = time.monotonic()
    results = on_executors(session, tasks, write_task)
    outcome.write_seconds = time.monotonic() - started
    errors = [r.error for r in results if r.error]
    if errors:
        remove_run_files(table, run_id)
        raise TablesError(f"table {outcome.table}: writing data files failed: {errors[0]}")
    _collect(results, outcome)
    files = [f for r in results for f in r.files]
    _commit(options, plan, files, outcome, fence, run_id)


def _collect(results: list[WriteResult], outcome: TableRun) -> None:
    conflicts: dict[tuple[str, str, str], TypeConflict] = {}
    for result in results:
        outcome.rows += result.rows
        outcome.files += len(result.files)
        outcome.bytes_written += result.bytes_written
        outcome.problems += result.problems
        for c in result.conflicts:
            known = conflicts.get((c.stream, c.name, c.found_kind))
            if known is None:
                conflicts[(c.stream, c.name, c.found_kind)] = c
            else:
                known.count += c.count
                known.first_seq = min(known.first_seq, c.first_seq)
    outcome.conflicts = [str(c) for c in conflicts.values()]


def _commit(
    options: StoreOptions,
    plan: _Plan,
    files: list[Any],
    outcome: TableRun,
    fence: Fence | None,
    run_id: str,
) -> None:
    from pyiceberg.exceptions import CommitFailedException

    table = plan.table
    for _ in range(COMMIT_ATTEMPTS):
        why = _cannot_commit(options, table, plan, fence)
        if why:
            remove_run_files(table, run_id)
            outcome.skipped = f"{why}; nothing committed (the next run starts again)"
            outcome.rows = outcome.files = outcome.bytes_written = 0
            break
        tx = table.transaction()
        props = summary_properties(plan.new_marks, run_id)
        try:
            with tx.update_snapshot(snapshot_properties=props).fast_append() as append:
                for data_file in files:
                    append.append_data_file(data_file)
            tx.commit_transaction()
        except CommitFailedException:
            table.refresh()
            continue
        snapshot = table.current_snapshot()
        outcome.snapshot_id = snapshot.snapshot_id if snapshot is not None else None
        break
    else:
        remove_run_files(table, run_id)
        outcome.skipped = f"{COMMIT_ATTEMPTS} commits conflicted; nothing committed"
    committed = outcome.snapshot_id is not None

    def change(record: TableRecord) -> bool:
        if record.pending_run == run_id:
            record.pending_run = ""
        if committed:
            record.marks = plan.new_marks
            record.through_ns = {**record.through_ns, **plan.through_ns}
            record.committed_ns = time.time_ns()
        record.location = plan.record.location
        return True

    _update(options, plan.record.table, change, fence)


def _cannot_commit(options: StoreOptions, table: Table, plan: _Plan, fence: Fence | None) -> str:
    """Why the run must not commit now ("" if it may)."""
    table.refresh()
    if committed_marks(table) != plan.marks:
        return "the table's marks moved since this run started (another run committed)"
    return run(_erased_meanwhile(options, plan, fence))


async def _erased_meanwhile(options: StoreOptions, plan: _Plan, fence: Fence | None) -> str:
    """Whether an erase request names a message this run read: one made before the run read
    the stream had deleted its messages already (the delete and the request are one
    transaction), so only a request made since can; no clock is compared."""
    async with options.open() as stores:
        meta: MetadataStore = stores.meta
        if fence is not None:
            await check_fence(meta, fence)
        for _, request in await erase_requests(meta, options.group):
            seen = plan.seen.get(request.stream)
            if seen is not None and seen.uid == request.uid and seen.read_any(request.ranges):
                return f"an erase request for stream {request.stream!r} arrived during the run"
    return ""


@dataclass(frozen=True)
class _Seen:
    """What a run read of one stream: sequences first..last, less those deleted then."""

    uid: str
    first: int
    last: int
    head: int  # the stream's first sequence then: everything below was deleted
    tombstones: frozenset[int]

    def read_any(self, ranges: Sequence[tuple[int, int]]) -> bool:
        for a, b in ranges:
            lo, hi = max(a, self.first, self.head), min(b, self.last)
            if lo > hi:
                continue
            if hi - lo + 1 > len(self.tombstones):
                return True  # more sequences than were deleted: some were read
            if any(seq not in self.tombstones for seq in range(lo, hi + 1)):
                return True
        return False
