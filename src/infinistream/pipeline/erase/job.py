"""`infinistream pipeline erase`: rewrite every object that still holds erased bytes, swap the
index, rewrite the Iceberg tables that hold erased messages, and report where each erase
request stands.

A run reads the erase requests not yet rewritten (`stream/erase.py`), plans the chunks that
rewrite every index entry pointing at an object holding their bytes (`plan.py`), writes them on
Spark executors and swaps them in with compaction's own task and swap, then records per request
the holders it found and whether the index still points into them (`settle.py`). Tables the
pipeline keeps (`pipeline/tables`) that appended erased messages have the data files holding
them rewritten, and their older snapshots expired and files deleted (`tables/erasing.py`).
When it swapped anything, the metadata store forgets the deleted values too (SQLite: VACUUM
and an emptied WAL; etcd: compaction and defragmentation): the old index entries named the
erased subjects. On a local directory it also retires the metadata commit records the packs
carry (`stream/recorded.py`): they copy the metadata of the flushes that wrote the erased
messages. The janitor deletes the old objects after its grace period and completes the
requests.

`--status` prints the report without rewriting anything (and starts no Spark).

Exit codes: 0 done; 1 the job failed, or some request could not be rewritten (a corrupt or
missing section, a failed chunk); 2 bad arguments; 3 the lease was lost.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from infinistream import natsconf
from infinistream.metadata.kv import MetadataStore
from infinistream.pipeline.arguments import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from infinistream.pipeline.compaction.job import (
    CompactionError,
    Progress,
    read_snapshots,
    run_chunks,
    stopped_by,
    swap_all,
)
from infinistream.pipeline.compaction.plan import CompactSettings, default_max_entries
from infinistream.pipeline.compaction.swap import SwapOutcome
from infinistream.pipeline.erase.plan import ErasePlan, Pending, explicit_details, plan_erase
from infinistream.pipeline.erase.settle import (
    Standing,
    forget_msg_ids,
    record_completions,
    record_rewrites,
)
from infinistream.pipeline.lease import (
    Fence,
    FenceLost,
    add_fence_arguments,
    fence_from_args,
    fenced,
)
from infinistream.pipeline.options import StoreError, StoreOptions
from infinistream.pipeline.snapshot import run
from infinistream.pipeline.spark import SparkUnavailable, spark_session
from infinistream.pipeline.tables.append import LazySession
from infinistream.pipeline.tables.config import (
    add_catalog_argument,
    catalog_from_args,
    default_catalog,
)
from infinistream.pipeline.tables.erasing import TableErasure, erase_tables
from infinistream.pipeline.tables.progress import TableRecord, read_records
from infinistream.stream.erase import EraseRequest, erase_requests, request_to_wire
from infinistream.stream.recorded import recover as recover_commits

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class EraseReport:
    requests_pending: int = 0  # not rewritten when the run started
    objects_to_rewrite: int = 0
    chunks: int = 0
    chunks_swapped: int = 0
    chunks_skipped: int = 0  # their entries changed meanwhile: the next run tries again
    objects_written: int = 0
    messages_kept: int = 0
    requests_rewritten: int = 0
    msg_ids_forgotten: int = 0
    tables: list[TableErasure] = field(default_factory=list)
    metadata_forgotten: bool = False
    commit_records_retired: int = 0
    problems: list[str] = field(default_factory=list)
    standings: list[Standing] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        complete = sum(1 for s in self.standings if s.request.completed_ns)
        return (
            f"erase: done in {self.seconds:.1f}s: {self.requests_pending} requests to rewrite, "
            f"{self.objects_to_rewrite} objects holding their bytes; chunks "
            f"{self.chunks_swapped}/{self.chunks} swapped, {self.chunks_skipped} skipped, "
            f"{len(self.problems)} failed; {len(self.tables)} tables rewritten; "
            f"{self.objects_written} objects written "
            f"({self.messages_kept} messages kept); {self.msg_ids_forgotten} message ids "
            f"forgotten; {self.requests_rewritten} requests "
            f"rewritten; {complete}/{len(self.standings)} requests complete"
        )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--status", action="store_true", help="report where each erase request stands; no rewrite")
    add("--json", action="store_true", help="print the report as JSON")
    add("--erase-deadline", default=None, help="mark requests older than this overdue, e.g. 24h")
    add_catalog_argument(parser)
    add_fence_arguments(parser)


async def read_pending(meta: MetadataStore, group: str) -> list[Pending]:
    return [
        Pending(item.key, item.mod_revision, request)
        for item, request in await erase_requests(meta, group)
        if not request.rewritten_ns
    ]


def erase(
    spark: SparkSession | Callable[[], SparkSession],
    options: StoreOptions,
    *,
    fence: Fence | None = None,
    progress: Progress | None = None,
    catalog: Callable[[], str] | None = None,
) -> EraseReport:
    """The whole job. `spark` may be a session or a function that starts one (called only
    when there is something to rewrite); `catalog` gives the tables' catalog URL (by default,
    beside a SQLite metadata store), asked only when some table holds erased messages. Raises
    CompactionError, StoreError, SparkUnavailable, FenceLost."""
    progress = progress or Progress()
    started = time.monotonic()
    report = EraseReport()
    run(options.check_exist())
    plan, pending = run(_plan(options))
    report.requests_pending = len(pending)
    report.objects_to_rewrite = len(plan.targets)
    report.chunks = len(plan.chunks)
    progress.info(
        f"erase: {len(pending)} requests to rewrite; {len(plan.targets)} objects hold their "
        f"bytes; {len(plan.chunks)} chunks of {sum(len(c.sources) for c in plan.chunks)} index "
        "entries to rewrite"
    )
    if plan.chunks:
        session = spark if not callable(spark) else spark()
        spark = session
        settings = _settings(options)
        results = run_chunks(session, options, settings, plan.chunks)
        swaps = run(swap_all(options, plan.chunks, results, fence))
        for chunk, result, swap in zip(plan.chunks, results, swaps, strict=True):
            if result.error or result.corrupt:
                detail = result.error or "; ".join(p.detail for p in result.corrupt)
                report.problems.append(f"{chunk.describe()}: {detail}")
                progress.error(f"erase: cannot rewrite {chunk.describe()}: {detail}")
            elif swap is not None and swap.outcome is SwapOutcome.SWAPPED:
                report.chunks_swapped += 1
                report.objects_written += 1 if result.obj else 0
                report.messages_kept += result.records_out
            elif swap is not None:
                report.chunks_skipped += 1
                progress.info(f"erase: {chunk.describe()} skipped ({swap.detail}); next run")
    report.tables = _erase_tables(LazySession(spark).get, options, catalog, fence)
    for table in report.tables:
        (progress.error if table.error else progress.info)(table.line())
        if table.error:
            report.problems.append(table.line())
    report.requests_rewritten, report.standings = run(
        _settle(options, fence, pending, plan, report)
    )
    report.seconds = time.monotonic() - started
    return report


def _erase_tables(
    spark: Callable[[], SparkSession],
    options: StoreOptions,
    catalog: Callable[[], str] | None,
    fence: Fence | None,
) -> list[TableErasure]:
    async def read() -> tuple[list[EraseRequest], list[TableRecord]]:
        async with options.open() as stores:
            requests = [r for _, r in await erase_requests(stores.meta, options.group)]
            return [r for r in requests if not r.completed_ns], await read_records(
                stores.meta, options.group
            )

    requests, records = run(read())
    url = catalog or partial(default_catalog, options)
    return erase_tables(spark, options, url, requests, records, fence)


def _settings(options: StoreOptions) -> CompactSettings:
    return CompactSettings(max_entries=default_max_entries(options.metadata))


async def _plan(options: StoreOptions) -> tuple[ErasePlan, list[Pending]]:
    async with options.open() as stores:
        pending = await read_pending(stores.meta, options.group)
        if not pending:
            return ErasePlan(), pending
        snapshots = await read_snapshots(stores.meta, options, ())
        snaps = list(snapshots.values())
        details = await explicit_details(snaps, pending, stores.objects, options.encryption())
    return plan_erase(snaps, pending, options.group, _settings(options), details), pending


async def _settle(
    options: StoreOptions,
    fence: Fence | None,
    pending: list[Pending],
    plan: ErasePlan,
    report: EraseReport,
) -> tuple[int, list[Standing]]:
    async with options.open() as stores:
        meta = fenced(stores.meta, fence)
        report.msg_ids_forgotten = await forget_msg_ids(meta, options.group, pending)
        stamped = await record_rewrites(
            meta, options.group, pending, plan.found, stores.objects, options.encryption()
        )
        if report.chunks_swapped or report.msg_ids_forgotten:
            # The replaced index entries named erased subjects: make them unrecoverable.
            await meta.forget_deleted()
            report.metadata_forgotten = True
        if pending:
            # The packs' commit records copy the metadata of the flushes that wrote erased
            # messages (subjects, message ids): retire them, once the database is past them.
            report.commit_records_retired = await recover_commits(meta, stores.objects)
        return stamped, await record_completions(meta, stores.objects, options.group)


async def _status(options: StoreOptions) -> list[Standing]:
    async with options.open() as stores:
        return await record_completions(stores.meta, stores.objects, options.group)


def print_standings(
    progress: Progress, standings: list[Standing], deadline_ns: int, as_json: bool
) -> None:
    rows = []
    for s in standings:
        row = request_to_wire(s.request, deadline_ns)
        row["holders_left"] = s.existing_holders
        row["tables"] = s.tables
        row["exports"] = [
            {
                "destination": e.destination,
                "through_seq": e.through_seq,
                "rewrite": e.rewrite_command(s.request.stream),
            }
            for e in s.exports
        ]
        rows.append(row)
    if as_json:
        progress.info(json.dumps({"erasures": rows}, indent=2))
        return
    for s, row in zip(standings, rows, strict=True):
        extra = " OVERDUE" if row.get("overdue") else ""
        done = row.get("completed") or row.get("rewritten") or ""
        progress.info(
            f"erase: stream {row['stream']} {row['kind']} of {row['sequences']} sequences "
            f"{row['ranges']} requested {row['requested']}: {row['state']} {done} "
            f"({s.existing_holders} of {row['holders']} holding objects left){extra}"
        )
        for table in s.tables:
            progress.info(
                f"erase:   table {table} may hold its messages: the erase job rewrites it"
            )
        for e in s.exports:
            progress.info(
                f"erase:   export {e.destination} holds its messages (through seq "
                f"{e.through_seq}): {e.rewrite_command(s.request.stream)}"
            )


def main(
    args: argparse.Namespace, options: StoreOptions, *, spark: SparkSession | None = None
) -> int:
    progress = Progress()
    try:
        fence = fence_from_args(args)
        deadline_ns = _deadline(args.erase_deadline)
    except ValueError as exc:
        progress.error(f"infinistream pipeline erase: {exc}")
        return EXIT_USAGE
    factory: SparkSession | Callable[[], SparkSession]
    master = getattr(args, "master", "local[*]")
    factory = spark if spark is not None else partial(spark_session, master, "infinistream-erase")
    try:
        if args.status:
            run(options.check_exist())
            standings = run(_status(options))
            print_standings(progress, standings, deadline_ns, args.json)
            return EXIT_OK
        catalog = partial(catalog_from_args, args, options)
        report = erase(factory, options, fence=fence, progress=progress, catalog=catalog)
    except (FenceLost, CompactionError, StoreError, SparkUnavailable) as exc:
        return stopped_by(progress, "erase", exc)
    print_standings(progress, report.standings, deadline_ns, args.json)
    # Last: the jobs role logs a job's last line that starts with its name as its summary
    # (on stderr after JSON, which stays parseable).
    (progress.error if args.json else progress.info)(report.line())
    return EXIT_FAILED if report.problems else EXIT_OK


def _deadline(text: str | None) -> int:
    if text is None:
        return EXIT_OK
    seconds = natsconf.parse_duration(text)
    if seconds < 0:
        raise ValueError(f"--erase-deadline must not be negative, got {text!r}")
    return int(seconds * 1e9)
