"""Erase reaches the tables: the data files holding erased messages are rewritten without them
(copy-on-write), every older snapshot is expired and the files only they referenced deleted.

A table holds an erase request's messages when it appended the request's stream incarnation
past the request's first sequence before the request was made, or when a run of it may have
left files (a pending run), and the table's record says it has not applied requests made that
late yet (`erased_ns`). A request made later never reaches a table through an append: its
messages are deleted from the stream first, and an append that was already reading them does
not commit (`append.py`). The erase job applies every such request to the table, then moves
`erased_ns` past them; the request is complete only when no table holds it either
(`erase/settle.py`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from infinistream.pipeline.lease import Fence, fenced
from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.snapshot import run
from infinistream.pipeline.tables.expiry import Expired, expire
from infinistream.pipeline.tables.progress import TableRecord, read_record, update_record
from infinistream.stream.erase import EraseRequest, SeqRange, merge_ranges

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

    from infinistream.pipeline.tables.config import TableConfig

# Attempts at a table that keeps changing under the rewrite (appends landing meanwhile).
ATTEMPTS = 3
# Manifests of a commit in flight are younger than this: the orphan sweep leaves them.
IN_FLIGHT_GRACE = 600.0
FILES_PER_TASK = 8


def table_holds(record: TableRecord, request: EraseRequest) -> bool:
    """Whether the table may hold messages of the request that it has not had erased."""
    if request.requested_ns <= record.erased_ns or not request.ranges:
        return False
    if record.pending_run:
        return True
    mark = record.marks.get(request.stream)
    if mark is None or mark.uid != request.uid:
        return False
    return mark.last_seq >= request.ranges[0][0] and record.created_ns < request.requested_ns


@dataclass
class TableErasure:
    table: str
    requests: int
    files_rewritten: int = 0
    rows_removed: int = 0
    expired: Expired = field(default_factory=Expired)
    error: str = ""

    def line(self) -> str:
        if self.error:
            return f"erase: table {self.table}: {self.error}"
        return (
            f"erase: table {self.table}: {self.requests} requests; {self.files_rewritten} data "
            f"files rewritten ({self.rows_removed} rows removed); {self.expired.snapshots} "
            f"snapshots expired, {self.expired.files_deleted + self.expired.orphans_deleted} "
            "files deleted"
        )


def erase_tables(
    spark: Callable[[], SparkSession],
    options: StoreOptions,
    catalog_url: Callable[[], str],
    requests: Sequence[EraseRequest],
    records: Sequence[TableRecord],
    fence: Fence | None = None,
) -> list[TableErasure]:
    """Apply the requests to every table holding them. `catalog_url` is asked only when some
    table does; a table that cannot be erased says why in its `error`."""
    from infinistream.pipeline.tables.catalog import CatalogError, load_table, open_catalog
    from infinistream.pipeline.tables.config import TableConfigError, config_for_location

    targets = [(r, [q for q in requests if table_holds(r, q)]) for r in records]
    targets = [(r, held) for r, held in targets if held]
    if not targets:
        return []
    try:
        config: TableConfig = config_for_location(catalog_url(), options, targets[0][0].location)
        catalog = open_catalog(config)
    except (TableConfigError, CatalogError) as exc:
        # The stream's objects are still rewritten; the tables wait for a catalog.
        return [TableErasure(r.table, len(held), error=str(exc)) for r, held in targets]
    out = []
    for record, held in targets:
        outcome = TableErasure(record.table, len(held))
        out.append(outcome)
        table = load_table(catalog, tuple(record.table.split(".")))
        if table is None:
            # Dropped by its owners: nothing of it is left to erase.
            _advance(options, record.table, held, fence)
            continue
        try:
            _erase_table(spark, options, table, record, held, outcome, fence)
        except Exception as exc:
            outcome.error = f"{type(exc).__name__}: {exc}"
    return out


def _erase_table(
    spark: Callable[[], SparkSession],
    options: StoreOptions,
    table: Table,
    record: TableRecord,
    held: list[EraseRequest],
    outcome: TableErasure,
    fence: Fence | None,
) -> None:
    from infinistream.pipeline.tables.append import settle_pending
    from infinistream.pipeline.tables.rewrite import RewriteTask, run_rewrites

    current, revision = run(_read(options, record.table))
    if current.pending_run:
        settle_pending(options, table, current, revision, fence)
    erased = erased_ranges(held)
    for _ in range(ATTEMPTS):
        table.refresh()
        scans = list(table.scan(row_filter=erased_filter(erased)).plan_files())
        if not scans:
            break
        run_id = str(uuid.uuid4())
        io = tuple(sorted(table.io.properties.items()))
        groups = [scans[i : i + FILES_PER_TASK] for i in range(0, len(scans), FILES_PER_TASK)]
        tasks = [
            RewriteTask(g, table.metadata, io, run_id, i, erased) for i, g in enumerate(groups)
        ]
        done = run_rewrites(spark(), table, tasks)
        if done.errors:
            raise RuntimeError(f"rewriting data files failed: {done.errors[0]}")
        if not done.conflict:
            outcome.files_rewritten += done.files_removed
            outcome.rows_removed += done.rows_removed
            break
    else:
        raise RuntimeError(f"the table kept changing during {ATTEMPTS} rewrites; next run")
    # Read again now: a run that started meanwhile may be writing files it has yet to commit.
    latest, _ = run(_read(options, record.table))
    outcome.expired = expire(
        table, keep_only_current=True, orphan_grace=IN_FLIGHT_GRACE, pending_run=latest.pending_run
    )
    _advance(options, record.table, held, fence)


def erased_ranges(requests: Sequence[EraseRequest]) -> dict[str, list[SeqRange]]:
    by_stream: dict[str, list[SeqRange]] = {}
    for request in requests:
        by_stream.setdefault(request.stream, []).extend(request.ranges)
    return {stream: merge_ranges(ranges) for stream, ranges in by_stream.items()}


def erased_filter(erased: dict[str, list[SeqRange]]) -> BooleanExpression:
    """The rows of erased messages, as an Iceberg expression (prunes files by their stats)."""
    from pyiceberg.expressions import (
        AlwaysFalse,
        And,
        EqualTo,
        GreaterThanOrEqual,
        LessThanOrEqual,
        Or,
    )

    # pyiceberg's predicates take (term, literal); their pydantic fields say otherwise to mypy.
    at_least: Any = GreaterThanOrEqual
    at_most: Any = LessThanOrEqual
    equal: Any = EqualTo
    expression: Any = AlwaysFalse()
    for stream, ranges in erased.items():
        seqs: Any = AlwaysFalse()
        for first, last in ranges:
            seqs = Or(seqs, And(at_least("seq", first), at_most("seq", last)))
        expression = Or(expression, And(equal("stream", stream), seqs))
    result: BooleanExpression = expression
    return result


async def _read(options: StoreOptions, table: str) -> tuple[TableRecord, int]:
    async with options.open() as stores:
        return await read_record(stores.meta, options.group, table)


def _advance(
    options: StoreOptions, table: str, held: Sequence[EraseRequest], fence: Fence | None
) -> None:
    """Record that the table has applied every request up to the newest of `held`."""
    newest = max(r.requested_ns for r in held)

    def change(record: TableRecord) -> bool:
        if record.erased_ns >= newest:
            return False
        record.erased_ns = newest
        return True

    async def advance() -> None:
        async with options.open() as stores:
            await update_record(fenced(stores.meta, fence), options.group, table, change)

    run(advance())
