"""What the pipeline jobs' command lines share: their exit codes, argument types and flags."""

from __future__ import annotations

import argparse
import sys

from infinistream import natsconf

# Every job's exit code: done; failed (or some of its work did); bad arguments; the job's
# lease was taken over, so it stopped before committing more.
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_FENCE_LOST = 0, 1, 2, 3


def stopped(why: str, code: int) -> int:
    """A job's exit `code`, once it has said on stderr `why` it stopped."""
    print(why, file=sys.stderr)
    return code


def nonnegative_duration(text: str) -> float:
    """Seconds from a Go duration (`24h`, `1m`, `30s`, `0`), for an argparse `type`."""
    try:
        seconds = natsconf.parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (e.g. 24h, 1m, 30s, 0)") from None
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    return seconds


def add_streams_argument(parser: argparse.ArgumentParser, verb: str) -> None:
    """`--stream NAME`, repeatable, into `args.streams`: the job `verb`s only the streams named,
    every stream of the group when none is."""
    parser.add_argument(
        "--stream",
        dest="streams",
        action="append",
        default=[],
        metavar="NAME",
        help=f"{verb} only this stream (repeatable; default: every stream of the group)",
    )
