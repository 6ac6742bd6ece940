"""Rewriting data files on executors, and committing the rewrites: what an erase (copy-on-write:
the rows of erased messages left out) and the compaction of small files (several files of a
partition written as one) share.

A `RewriteTask` names some data files of the table's current snapshot; the executor reads them
through pyiceberg (projected to the table's schema), leaves out the rows of the given erased
sequences, and writes what remains with pyiceberg's writer into files named after the run. The
driver then commits, in one overwrite snapshot that carries the table's marks forward, the
removal of every rewritten file and the addition of its replacements. A conflicting commit
(the table changed meanwhile) is not retried: the new files are deleted and the next run plans
again from the table as it is then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from infinistream.pipeline.tables.append import on_executors
from infinistream.pipeline.tables.progress import committed_marks, summary_properties
from infinistream.pipeline.tables.writing import data_files, never_raising
from infinistream.stream.erase import SeqRange

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class RewriteTask:
    scans: list[Any]  # pyiceberg FileScanTasks of the current snapshot
    metadata: TableMetadata
    io: tuple[tuple[str, str], ...]
    run: str
    index: int
    # stream -> erased sequence ranges: rows to leave out (none when compacting)
    erased: dict[str, list[SeqRange]] = field(default_factory=dict)


@dataclass
class RewriteResult:
    index: int
    sources: list[Any] = field(default_factory=list)  # the DataFiles to remove
    files: list[Any] = field(default_factory=list)  # their replacements
    rows_in: int = 0
    rows_out: int = 0
    bytes_written: int = 0
    error: str = ""
    seconds: float = 0.0


def rewrite_task(task: RewriteTask) -> RewriteResult:
    """The Spark task that rewrites a table's data files: never raises."""
    return never_raising(_rewrite, task, RewriteResult(task.index))


def _rewrite(task: RewriteTask, result: RewriteResult) -> None:
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io import load_file_io
    from pyiceberg.io.pyarrow import ArrowScan

    metadata = task.metadata
    io = load_file_io(dict(task.io), metadata.location)
    scan = ArrowScan(metadata, io, metadata.schema(), AlwaysTrue())
    tables = []
    for file_task in task.scans:
        rows = scan.to_table(tasks=[file_task])
        kept = keep_rows(rows, task.erased)
        if task.erased and kept.num_rows == rows.num_rows:
            continue  # nothing of this file was erased: it stays as it is
        result.rows_in += rows.num_rows
        result.sources.append(file_task.file)
        tables.append(kept)
    if not result.sources:
        return
    import pyarrow as pa  # type: ignore[import-untyped]

    remaining = pa.concat_tables(tables)
    result.rows_out = remaining.num_rows
    if remaining.num_rows:
        result.files = data_files(metadata, remaining, io, task.run, task.index)
        result.bytes_written = sum(f.file_size_in_bytes for f in result.files)


def keep_rows(rows: Any, erased: dict[str, list[SeqRange]]) -> Any:
    """The rows of messages not erased."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    if not erased or not rows.num_rows:
        return rows
    gone = None
    for stream, ranges in erased.items():
        in_ranges = None
        for first, last in ranges:
            hit = pc.and_(pc.greater_equal(rows["seq"], first), pc.less_equal(rows["seq"], last))
            in_ranges = hit if in_ranges is None else pc.or_(in_ranges, hit)
        if in_ranges is None:
            continue
        mine = pc.and_(pc.equal(rows["stream"], stream), in_ranges)
        gone = mine if gone is None else pc.or_(gone, mine)
    return rows if gone is None else rows.filter(pc.invert(gone))


@dataclass
class Rewritten:
    """A committed (or abandoned) rewrite."""

    files_removed: int = 0
    files_added: int = 0
    rows_removed: int = 0
    snapshot_id: int | None = None
    conflict: bool = False
    errors: list[str] = field(default_factory=list)


def run_rewrites(
    spark: SparkSession,
    table: Table,
    tasks: list[RewriteTask],
) -> Rewritten:
    """Rewrite on executors and commit in one overwrite snapshot; nothing is committed if any
    task failed or the table changed meanwhile (then the new files are deleted)."""
    from pyiceberg.exceptions import CommitFailedException

    out = Rewritten()
    if not tasks:
        return out
    base = table.current_snapshot()
    results = on_executors(spark, tasks, rewrite_task)
    added = [f for r in results for f in r.files]
    out.errors = [r.error for r in results if r.error]
    removed = [f for r in results for f in r.sources]
    if out.errors or not removed:
        _delete(table, added)
        return out
    table.refresh()
    current = table.current_snapshot()
    if (current.snapshot_id if current else None) != (base.snapshot_id if base else None):
        _delete(table, added)
        out.conflict = True
        return out
    props = summary_properties(committed_marks(table), tasks[0].run)
    tx = table.transaction()
    try:
        with tx.update_snapshot(snapshot_properties=props).overwrite() as overwrite:
            for data_file in removed:
                overwrite.delete_data_file(data_file)
            for data_file in added:
                overwrite.append_data_file(data_file)
        tx.commit_transaction()
    except CommitFailedException:
        _delete(table, added)
        out.conflict = True
        return out
    table.refresh()
    snapshot = table.current_snapshot()
    out.snapshot_id = snapshot.snapshot_id if snapshot is not None else None
    out.files_removed, out.files_added = len(removed), len(added)
    out.rows_removed = sum(r.rows_in - r.rows_out for r in results)
    return out


def _delete(table: Table, files: list[Any]) -> None:
    for data_file in files:
        try:
            table.io.delete(data_file.file_path)
        except FileNotFoundError:
            continue
