"""Placeholder until the export job lands; the command refuses to run."""

from __future__ import annotations

import argparse

from infinistream.pipeline.options import StoreOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser


def main(args: argparse.Namespace, options: StoreOptions) -> int:
    del args, options
    raise SystemExit("not built yet")
