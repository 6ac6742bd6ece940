"""Exactly once, across kill -9: `pipeline tables` killed at each phase of a run, then run again,
leaves every message in its table once, none skipped, and no data file of the killed run.

The job runs as `python -m infinistream pipeline tables` would, in a process of its own that
SIGKILLs itself at a chosen point of the real job (the functions it passes through are
wrapped, nothing else changes):

- claimed:   the run is recorded as pending in metadata; no file written yet
- written:   every data file written by the executors; nothing committed
- manifests: pyiceberg wrote the commit's manifests; the catalog has not swapped to it
- committed: the catalog swapped; the table's record still names the run as pending
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.tables import append as append_module
from infinistream.pipeline.tables.append import append_tables
from infinistream.pipeline.tables.catalog import open_catalog
from infinistream.pipeline.tables.config import TableConfig, default_catalog, default_location
from infinistream.pipeline.tables.files import list_files
from infinistream.pipeline.tables.progress import read_records
from support.sparkjvm import quick_jvm_env

pytestmark = pytest.mark.timeout(600)

# Runs the job in this process, SIGKILLing it at the phase named by argv[1].
KILLER = """
import os, signal, sys
from infinistream.cli import main
from infinistream.pipeline.tables import append

phase, args = sys.argv[1], sys.argv[2:]

def die(*_):
    print(f"killed at {phase}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

real_executors, real_update = append.on_executors, append._update
if phase == "claimed":
    append.on_executors = die
elif phase == "written":
    def on_executors(*a):
        results = real_executors(*a)
        die()
    append.on_executors = on_executors
elif phase == "manifests":
    from pyiceberg.catalog.sql import SqlCatalog
    SqlCatalog.commit_table = die
elif phase == "committed":
    append._update = die
sys.exit(main(["pipeline", "tables", *args]))
"""

PHASES = ("claimed", "written", "manifests", "committed")


def _kill_at(phase: str, options: StoreOptions, workdir: Path) -> str:
    # A Spark driver of its own each time (kill -9 takes it along): its start is most of what
    # the test waits for, so it starts with the JVM settings of short test jobs.
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, **quick_jvm_env()}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            KILLER,
            phase,
            "--objects",
            options.objects,
            "--metadata",
            options.metadata,
            "--master",
            "local[1]",
        ],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )
    assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr
    assert f"killed at {phase}" in done.stdout
    return done.stdout


async def _pending(options: StoreOptions) -> str:
    meta = options.open_metadata()
    try:
        (record,) = await read_records(meta, "default")
        return record.pending_run
    finally:
        await meta.close()


async def test_a_run_killed_at_any_phase_neither_duplicates_nor_skips(
    spark: Any, nc: Client, options: StoreOptions, tmp_path: Path
) -> None:
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="ONCE", subjects=["once.>"])
    config = TableConfig(catalog=default_catalog(options), location=default_location(options))
    published = 0
    for phase in PHASES:
        for _ in range(5):
            published += 1
            await js.publish(f"once.{published}", f"message {published}".encode())
        await asyncio.to_thread(_kill_at, phase, options, tmp_path)
        pending = await _pending(options)
        assert pending, f"{phase}: the killed run is recorded as pending"
        table = open_catalog(config).load_table(("infinistream", "ONCE"))
        data = f"{table.location()}/data"
        leftovers = [f for f in list_files(table.io, data) if pending in f.location]
        rows = table.scan().to_arrow().num_rows if table.current_snapshot() else 0
        if phase in ("written", "manifests"):
            assert leftovers and rows == published - 5, phase
        elif phase == "committed":
            assert leftovers and rows == published, phase
        else:
            assert not leftovers and rows == published - 5, phase

        # Run again: every message once, the killed run settled.
        lines: list[str] = []
        report = await asyncio.to_thread(append_tables, spark, options, config, say=lines.append)
        (run,) = report.tables
        assert run.rolled_back == ("" if phase == "committed" else pending), lines
        table.refresh()
        seqs = sorted(table.scan().to_arrow().column("seq").to_pylist())
        assert seqs == list(range(1, published + 1)), (phase, lines)
        assert await _pending(options) == ""
        referenced = {t.file.file_path for t in table.scan().plan_files()}
        stored = {f.location for f in list_files(table.io, data)}
        assert stored == referenced, phase


async def test_an_erase_during_a_run_keeps_its_message_out(
    spark: Any, nc: Client, options: StoreOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message erased after the run read it, before the run commits: the run commits
    nothing (its files go), and the next appends everything else, never the erased message."""
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="RACE", subjects=["race.>"])
    for i in range(6):
        await js.publish(f"race.{i}", f"message {i}".encode())
    config = TableConfig(catalog=default_catalog(options), location=default_location(options))
    loop = asyncio.get_running_loop()
    real = append_module.on_executors

    def erase_after_writing(*args: Any) -> Any:
        results = real(*args)
        erased = asyncio.run_coroutine_threadsafe(js.delete_msg("RACE", 3), loop)
        assert erased.result(30)
        return results

    monkeypatch.setattr(append_module, "on_executors", erase_after_writing)
    report = await asyncio.to_thread(append_tables, spark, options, config, say=lambda _: None)
    (run,) = report.tables
    assert run.snapshot_id is None and "erase request" in run.skipped, run
    monkeypatch.setattr(append_module, "on_executors", real)
    report = await asyncio.to_thread(append_tables, spark, options, config, say=lambda _: None)
    table = open_catalog(config).load_table(("infinistream", "RACE"))
    assert sorted(table.scan().to_arrow().column("seq").to_pylist()) == [1, 2, 4, 5, 6]
    stored = {f.location for f in list_files(table.io, f"{table.location()}/data")}
    assert stored == {t.file.file_path for t in table.scan().plan_files()}
