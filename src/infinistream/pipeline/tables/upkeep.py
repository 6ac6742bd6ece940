"""`infinistream pipeline tables-upkeep`: compact the tables' small data files and expire old
snapshots (deleting the files only they referenced, and orphans).

Appends made every few minutes leave a few small files per partition each time. Upkeep
gathers, per partition, the data files smaller than `--small` and rewrites each run of them (up
to the table's target file size) as one file, on executors; the driver commits each table's
rewrites in one overwrite snapshot that carries the table's marks forward. A table that
changed meanwhile (an append landed) keeps its files; the next run tries again. Then snapshots
older than `--keep` are expired, except the current one, and their files deleted.

Exit codes: 0 done; 1 the job failed, or some table could not be compacted; 2 bad arguments;
3 the lease was lost.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from infinistream.pipeline.arguments import (
    EXIT_FAILED,
    EXIT_OK,
    nonnegative_duration,
)
from infinistream.pipeline.compaction.job import parse_size
from infinistream.pipeline.lease import (
    Fence,
    add_fence_arguments,
    check_fence,
)
from infinistream.pipeline.options import StoreError, StoreOptions
from infinistream.pipeline.snapshot import run
from infinistream.pipeline.spark import SparkUnavailable
from infinistream.pipeline.tables.append import LazySession, tell
from infinistream.pipeline.tables.config import (
    TableConfig,
    add_config_arguments,
)
from infinistream.pipeline.tables.expiry import DEFAULT_ORPHAN_GRACE, Expired, expire
from infinistream.pipeline.tables.progress import read_record, read_records
from infinistream.pipeline.tables.schema import TARGET_FILE_BYTES

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

DEFAULT_SMALL = 32 * 1024 * 1024
DEFAULT_KEEP = 24 * 3600.0


@dataclass
class TableUpkeep:
    table: str
    files_before: int = 0
    files_compacted: int = 0
    files_written: int = 0
    conflict: bool = False
    expired: Expired = field(default_factory=Expired)
    errors: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"tables-upkeep: {self.table}: {self.files_compacted} of {self.files_before} data "
            f"files compacted into {self.files_written}"
            + (" (the table changed meanwhile: next run)" if self.conflict else "")
            + f"; {self.expired.snapshots} snapshots expired, {self.expired.files_deleted} "
            f"files and {self.expired.orphans_deleted} orphans deleted"
        )


@dataclass
class UpkeepReport:
    tables: list[TableUpkeep] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        return (
            f"tables-upkeep: done in {self.seconds:.1f}s: {len(self.tables)} tables; "
            f"{sum(t.files_compacted for t in self.tables)} files compacted into "
            f"{sum(t.files_written for t in self.tables)}; "
            f"{sum(t.expired.snapshots for t in self.tables)} snapshots expired; "
            f"{sum(t.expired.files_deleted + t.expired.orphans_deleted for t in self.tables)} "
            f"files deleted; {sum(len(t.errors) for t in self.tables)} errors"
        )


def small_file_groups(table: Table, small: int, target: int) -> list[list[Any]]:
    """Runs of small data files of one partition each, two or more, at most `target` bytes."""
    by_partition: dict[tuple[int, str], list[Any]] = {}
    for task in table.scan().plan_files():
        data_file = task.file
        if data_file.file_size_in_bytes < small:
            key = (data_file.spec_id, repr(data_file.partition))
            by_partition.setdefault(key, []).append(task)
    groups: list[list[Any]] = []
    for tasks in by_partition.values():
        tasks.sort(key=lambda t: t.file.file_path)
        current: list[Any] = []
        size = 0
        for task in tasks:
            if current and size + task.file.file_size_in_bytes > target:
                groups.append(current)
                current, size = [], 0
            current.append(task)
            size += task.file.file_size_in_bytes
        groups.append(current)
    return [g for g in groups if len(g) >= 2]


def upkeep_tables(
    spark: SparkSession | Callable[[], SparkSession],
    options: StoreOptions,
    config: TableConfig,
    *,
    small: int = DEFAULT_SMALL,
    keep: float = DEFAULT_KEEP,
    orphan_grace: float = DEFAULT_ORPHAN_GRACE,
    fence: Fence | None = None,
    say: Callable[[str], None] = print,
) -> UpkeepReport:
    from infinistream.pipeline.tables.catalog import load_table, open_catalog

    started = time.monotonic()
    report = UpkeepReport()
    run(options.check_exist())
    records = run(_read_records(options, fence, read_records))
    catalog = open_catalog(config)
    sessions = LazySession(spark)
    for record in records:
        table = load_table(catalog, tuple(record.table.split(".")))
        if table is None:
            continue
        outcome = TableUpkeep(record.table)
        _compact(sessions, options, table, outcome, small, fence)
        # The record read again now: a run that started meanwhile may be writing files.
        latest = run(_read_records(options, None, partial(read_record, table=record.table)))
        outcome.expired = expire(
            table,
            older_than_ns=time.time_ns() - int(keep * 1e9),
            orphan_grace=orphan_grace,
            pending_run=latest[0].pending_run,
        )
        report.tables.append(outcome)
        tell(say, "tables-upkeep", outcome.line(), outcome.table, outcome.errors)
    report.seconds = time.monotonic() - started
    return report


def _compact(
    sessions: LazySession,
    options: StoreOptions,
    table: Table,
    outcome: TableUpkeep,
    small: int,
    fence: Fence | None,
) -> None:
    from infinistream.pipeline.tables.rewrite import RewriteTask, run_rewrites

    outcome.files_before = sum(1 for _ in table.scan().plan_files())
    properties = table.metadata.properties
    target = int(properties.get("write.target-file-size-bytes", TARGET_FILE_BYTES))
    groups = small_file_groups(table, small, target)
    if not groups:
        return
    run_id = str(uuid.uuid4())
    io = tuple(sorted(table.io.properties.items()))
    tasks = [RewriteTask(g, table.metadata, io, run_id, i) for i, g in enumerate(groups)]
    run(_read_records(options, fence, None))
    done = run_rewrites(sessions.get(), table, tasks)
    outcome.errors, outcome.conflict = done.errors, done.conflict
    if done.snapshot_id is not None:
        outcome.files_compacted = done.files_removed
        outcome.files_written = done.files_added


async def _read_records(options: StoreOptions, fence: Fence | None, read: Any) -> Any:
    """Check the fence (if any), then `read(meta, group)` (if given): a run whose lease was
    taken over stops before it commits anything more."""
    async with options.open() as stores:
        if fence is not None:
            await check_fence(stores.meta, fence)
        return await read(stores.meta, options.group) if read is not None else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    add = parser.add_argument
    add(
        "--small",
        type=parse_size,
        default=DEFAULT_SMALL,
        help="compact data files smaller than this (default 32MiB)",
    )
    add(
        "--keep",
        type=nonnegative_duration,
        default=DEFAULT_KEEP,
        help="expire snapshots older (24h)",
    )
    add(
        "--orphan-grace",
        type=nonnegative_duration,
        default=DEFAULT_ORPHAN_GRACE,
        help="delete files nothing references once this old (default 1h)",
    )
    add_fence_arguments(parser)


def main(
    args: argparse.Namespace, options: StoreOptions, *, spark: SparkSession | None = None
) -> int:
    from infinistream.pipeline.tables.catalog import CatalogError
    from infinistream.pipeline.tables.job import run_table_job, say

    work = partial(upkeep_tables, small=args.small, keep=args.keep, orphan_grace=args.orphan_grace)

    def finish(report: UpkeepReport) -> int:
        say(report.line())
        return EXIT_FAILED if any(t.errors for t in report.tables) else EXIT_OK

    failures = (StoreError, CatalogError, SparkUnavailable)
    return run_table_job(args, options, "tables-upkeep", spark, work, finish, failures=failures)
