"""The command: `infinistream bench ...`, or `infinistream-bench ...` where only this package is
installed."""

from __future__ import annotations

import argparse
import sys

from infinistream_bench.options import add_arguments


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="infinistream bench",
        description="InfiniStream against nats-server on the same workloads; writes "
        "docs/benchmarks/results.md.",
    )
    add_arguments(parser)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    from infinistream_bench.runner import main as run

    return run(args)


if __name__ == "__main__":
    sys.exit(main())
