"""`pipeline tables-upkeep`: each partition's small data files compacted into one, the table's
marks carried forward (the next append continues where it stopped), old snapshots expired and
the files only they referenced deleted, orphans past their grace deleted, a pending run's files
left to it."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.tables.append import append_tables
from infinistream.pipeline.tables.catalog import open_catalog
from infinistream.pipeline.tables.config import TableConfig, default_catalog, default_location
from infinistream.pipeline.tables.expiry import referenced_files
from infinistream.pipeline.tables.files import list_files
from infinistream.pipeline.tables.upkeep import upkeep_tables

pytestmark = pytest.mark.timeout(300)


def _quiet(_: str) -> None:
    pass


async def test_small_files_compacted_old_snapshots_and_orphans_gone(
    spark: Any, nc: Client, options: StoreOptions
) -> None:
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="SMALL", subjects=["small.>"])
    config = TableConfig(catalog=default_catalog(options), location=default_location(options))
    for round_ in range(3):
        for i in range(4):
            await js.publish(f"small.{round_}.{i}", f"m {round_} {i}".encode())
        await asyncio.to_thread(append_tables, spark, options, config, say=_quiet)
    table = open_catalog(config).load_table(("infinistream", "SMALL"))
    assert len(list(table.scan().plan_files())) == 3
    assert len(table.metadata.snapshots) == 3
    # An orphan (a killed run's file nobody recorded), old enough to go.
    data_dir = Path(table.location().removeprefix("file://")) / "data"
    some = next(p for p in data_dir.rglob("*.parquet"))
    orphan = some.with_name("00000-0-deadbeef-0000-0000-0000-000000000000.parquet")
    shutil.copy(some, orphan)
    os.utime(orphan, (1, 1))

    report = await asyncio.to_thread(
        upkeep_tables, spark, options, config, keep=0, orphan_grace=60, say=_quiet
    )
    (done,) = report.tables
    assert (done.files_before, done.files_compacted, done.files_written) == (3, 3, 1)
    assert (done.expired.snapshots, done.expired.orphans_deleted) == (3, 1)
    table.refresh()
    assert len(table.metadata.snapshots) == 1
    assert sorted(table.scan().to_arrow().column("seq").to_pylist()) == list(range(1, 13))
    # Nothing under the table's location but what the table references now.
    stored = {f.location for f in list_files(table.io, table.location())}
    live = referenced_files(table, list(table.metadata.snapshots))
    live |= {table.metadata_location} | {e.metadata_file for e in table.metadata.metadata_log}
    assert stored == live
    assert not orphan.exists()

    # The marks came along: the next append continues at seq 13.
    await js.publish("small.late", b"late")
    report = await asyncio.to_thread(append_tables, spark, options, config, say=_quiet)
    assert report.tables[0].ranges == {"SMALL": (13, 13)}
    table.refresh()
    assert sorted(table.scan().to_arrow().column("seq").to_pylist()) == list(range(1, 14))
