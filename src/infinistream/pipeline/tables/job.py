"""`infinistream pipeline tables`: append each stream's new messages to its Iceberg table.

Exit codes: 0 done; 1 the job failed, or some table could not be appended to (the lines
before the summary say which); 2 bad arguments; 3 the lease was lost.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

from infinistream.jetstream.accounts import GLOBAL_ACCOUNT
from infinistream.pipeline.arguments import (
    EXIT_FAILED,
    EXIT_FENCE_LOST,
    EXIT_OK,
    EXIT_USAGE,
    add_streams_argument,
    stopped,
)
from infinistream.pipeline.lease import Fence, FenceLost, add_fence_arguments, fence_from_args
from infinistream.pipeline.options import StoreError, StoreOptions
from infinistream.pipeline.reading import ReadError
from infinistream.pipeline.spark import SparkUnavailable, spark_session
from infinistream.pipeline.tables.config import (
    TableConfig,
    TableConfigError,
    add_config_arguments,
    config_from_args,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    add_streams_argument(parser, "append")
    add_fence_arguments(parser)


class SparkOnDemand:
    """Starts the job's own Spark session when first asked, and stops it at the end (on a
    cluster, that gives the executors back at once)."""

    def __init__(self, master: str, app: str) -> None:
        self.master = master
        self.app = app
        self.session: SparkSession | None = None

    def __call__(self) -> SparkSession:
        if self.session is None:
            self.session = spark_session(self.master, self.app)
        return self.session

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()


def say(text: str) -> None:
    print(text, flush=True)


class Begun(NamedTuple):
    """What a table job's `main` starts from."""

    fence: Fence | None
    config: TableConfig
    # The session the caller gave, else `started`'s, made on first use.
    spark: SparkSession | Callable[[], SparkSession]
    # Stopped when the job ends (a no-op if it never made a session).
    started: SparkOnDemand


def begin(
    args: argparse.Namespace,
    options: StoreOptions,
    command: str,
    spark: SparkSession | None = None,
) -> Begun | None:
    """The fence, table config and Spark session (`spark`, or one made on demand) of
    `infinistream pipeline <command>`; None if its arguments are refused (said on stderr)."""
    try:
        fence = fence_from_args(args)
        config = config_from_args(args, options)
    except (ValueError, TableConfigError) as exc:
        print(f"infinistream pipeline {command}: {exc}", file=sys.stderr)
        return None
    master = getattr(args, "master", "local[*]")
    started = SparkOnDemand(master, f"infinistream-{command}")
    return Begun(fence, config, spark if spark is not None else started, started)


class TableWork(Protocol[R_co]):
    """What a table job does (`append_tables`, `upkeep_tables`), given its own arguments."""

    def __call__(
        self,
        spark: SparkSession | Callable[[], SparkSession],
        options: StoreOptions,
        config: TableConfig,
        *,
        fence: Fence | None,
        say: Callable[[str], None],
    ) -> R_co: ...


def run_table_job(
    args: argparse.Namespace,
    options: StoreOptions,
    command: str,
    spark: SparkSession | None,
    work: TableWork[R],
    finish: Callable[[R], int],
    *,
    failures: tuple[type[Exception], ...],
    lost: str = "lease lost",
) -> int:
    """`infinistream pipeline <command>` of a table job: `work` with what `begin` gives, its
    report's exit code by `finish`; an exception in `failures` fails the run in one line, a lost
    fence (said as `lost`) stops it, and the job's own Spark session is stopped either way."""
    begun = begin(args, options, command, spark)
    if begun is None:
        return EXIT_USAGE
    try:
        report = work(begun.spark, options, begun.config, fence=begun.fence, say=say)
    except FenceLost as exc:
        return stopped(f"infinistream pipeline {command}: {lost}: {exc}", EXIT_FENCE_LOST)
    except failures as exc:
        return stopped(f"infinistream pipeline {command}: {exc}", EXIT_FAILED)
    finally:
        begun.started.stop()
    return finish(report)


def main(
    args: argparse.Namespace, options: StoreOptions, *, spark: SparkSession | None = None
) -> int:
    from infinistream.pipeline.tables.append import AppendReport, TablesError, append_tables
    from infinistream.pipeline.tables.catalog import CatalogError
    from infinistream.pipeline.tables.progress import ProgressLost, RecordConflict

    account = getattr(args, "account", None) or GLOBAL_ACCOUNT
    work = partial(append_tables, streams=args.streams, account=account)

    def finish(report: AppendReport) -> int:
        for problem in report.problems:
            print(f"infinistream pipeline tables: {problem}", file=sys.stderr)
        say(report.line())
        return EXIT_FAILED if report.problems else EXIT_OK

    failures = (
        TablesError,
        StoreError,
        CatalogError,
        SparkUnavailable,
        ReadError,
        ProgressLost,
        RecordConflict,
    )
    return run_table_job(
        args,
        options,
        "tables",
        spark,
        work,
        finish,
        failures=failures,
        lost="lease lost, nothing more committed",
    )
