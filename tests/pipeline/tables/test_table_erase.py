"""An erase request is complete only when no table holds its messages: with the table out of
reach (its catalog cannot be opened) the erase job still rewrites the objects and the janitor
deletes them, but the request stays `rewritten` and names the table; once the erase job reaches
the table (copy-on-write, old snapshots expired, their files deleted), the janitor completes
it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from nats.aio.client import Client

from infinistream.pipeline.erase.job import erase
from infinistream.pipeline.erase.settle import record_completions
from infinistream.pipeline.janitor import JanitorConfig, run_janitor
from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.tables.append import append_tables
from infinistream.pipeline.tables.catalog import open_catalog
from infinistream.pipeline.tables.config import TableConfig, default_catalog, default_location
from infinistream.pipeline.tables.files import list_files

pytestmark = pytest.mark.timeout(600)


async def _standing(options: StoreOptions) -> tuple[str, list[str]]:
    async with options.open() as stores:
        (standing,) = await record_completions(stores.meta, stores.objects, options.group)
        return standing.request.state(), standing.tables


async def test_a_request_waits_for_the_tables(
    spark: Any, nc: Client, options: StoreOptions, tmp_path: Any
) -> None:
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="GDPR", subjects=["gdpr.>"])
    for i in range(5):
        await js.publish(f"gdpr.{i}", json.dumps({"person": f"p{i}"}).encode())
    config = TableConfig(catalog=default_catalog(options), location=default_location(options))
    await asyncio.to_thread(append_tables, spark, options, config, say=lambda _: None)
    table = open_catalog(config).load_table(("infinistream", "GDPR"))
    first_files = {f.location for f in list_files(table.io, table.location())}
    assert await js.delete_msg("GDPR", 2)

    unreachable = "sqlite:///" + str(tmp_path / "no" / "such" / "dir" / "c.db").lstrip("/")
    report = await asyncio.to_thread(erase, spark, options, catalog=lambda: unreachable)
    (erasure,) = report.tables
    assert erasure.error and report.problems and report.requests_rewritten == 1
    await asyncio.to_thread(run_janitor, spark, options, JanitorConfig(grace=0), lambda _: None)
    # The objects are gone, the table is not rewritten: not complete, and it says which.
    assert await _standing(options) == ("rewritten", ["infinistream.GDPR"])

    report = await asyncio.to_thread(erase, spark, options)
    (erasure,) = report.tables
    assert (erasure.error, erasure.files_rewritten, erasure.rows_removed) == ("", 1, 1)
    assert erasure.expired.snapshots == 1  # the append's, which still held the message
    await asyncio.to_thread(run_janitor, spark, options, JanitorConfig(grace=0), lambda _: None)
    assert await _standing(options) == ("complete", [])

    table.refresh()
    assert sorted(table.scan().to_arrow().column("seq").to_pylist()) == [1, 3, 4, 5]
    left = {f.location for f in list_files(table.io, table.location())}
    data_then = {f for f in first_files if "/data/" in f}
    assert not (data_then & left), "the file that held the message is gone"
