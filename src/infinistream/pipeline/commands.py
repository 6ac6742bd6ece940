"""`infinistream pipeline ...`: the command line of the pipeline jobs."""

from __future__ import annotations

import argparse
import importlib
import os

from infinistream.pipeline.arguments import EXIT_USAGE, stopped
from infinistream.pipeline.options import StoreOptions, add_store_arguments
from infinistream.pipeline.spark import SPARK_LOG_ENV, SPARK_LOG_LEVELS
from infinistream.settings import SettingsError

# Each job module has add_arguments(parser) and main(args, options) -> exit code.
JOBS = {
    "compact": (
        "infinistream.pipeline.compaction.job",
        "compact small objects into large per-stream ones",
    ),
    "janitor": ("infinistream.pipeline.janitor", "delete objects nothing references any more"),
    "erase": (
        "infinistream.pipeline.erase.job",
        "rewrite the objects that still hold erased messages; report each erase request",
    ),
    "export": ("infinistream.pipeline.export", "write a stream to Parquet, incrementally"),
    "scan": ("infinistream.pipeline.scan", "list stored messages whose records are damaged"),
    "tables": (
        "infinistream.pipeline.tables.job",
        "append each stream's new messages to its Apache Iceberg table",
    ),
    "tables-upkeep": (
        "infinistream.pipeline.tables.upkeep",
        "compact the tables' small data files; expire old snapshots and delete their files",
    ),
    "rewrap": (
        "infinistream.pipeline.rewrap",
        "key rotation: wrap data keys anew with the current key; report what needs old keys",
    ),
}


def add_pipeline_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`pipeline` and its jobs, as a subcommand of `commands`."""
    add_job_parsers(commands.add_parser("pipeline"))


def add_job_parsers(pipeline: argparse.ArgumentParser) -> None:
    jobs = pipeline.add_subparsers(dest="job", required=True)
    for name, (module, help_text) in JOBS.items():
        parser = jobs.add_parser(name, help=help_text)
        add_store_arguments(parser)
        parser.add_argument(
            "--spark-log",
            dest="spark_log",
            type=str.upper,
            choices=SPARK_LOG_LEVELS,
            help="Spark's own log lines on stderr from this level (default: ERROR, and no "
            "progress bars; WARN or INFO to see what Spark does)",
        )
        # Job modules import Spark only when they run, so this costs `serve` nothing.
        importlib.import_module(module).add_arguments(parser)


def run_pipeline(args: argparse.Namespace) -> int:
    module = importlib.import_module(JOBS[args.job][0])
    try:
        options = StoreOptions.from_args(args)
    except SettingsError as exc:
        return stopped(f"infinistream: {exc}", EXIT_USAGE)
    if args.spark_log:
        # Read by spark_session() here, and by the sessions of any job this one starts.
        os.environ[SPARK_LOG_ENV] = args.spark_log
    code: int = module.main(args, options)
    return code
