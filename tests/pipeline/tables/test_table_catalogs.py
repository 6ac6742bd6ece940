"""The tables' catalog in a real PostgreSQL (started by the test from Debian's binaries), and
their files in a bucket of their own on the S3-compatible server while the stream lives in a
local store: appended twice, read back by pyiceberg through the same catalog."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.tables.append import append_tables
from infinistream.pipeline.tables.catalog import open_catalog
from infinistream.pipeline.tables.config import TableConfig, io_properties
from infinistream.pipeline.tables.files import list_files
from support.pgserver import PostgresServer
from support.s3server import S3Server, start_s3_server

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = start_s3_server()
    yield server
    server.stop()


async def test_postgresql_catalog_and_a_lake_bucket(
    spark: Any, nc: Client, options: StoreOptions, postgres: PostgresServer, s3: S3Server
) -> None:
    s3.create_bucket("lake")
    # The stream's store is local; its tables go to S3 with the store's S3 settings.
    options = StoreOptions(
        objects=options.objects,
        metadata=options.metadata,
        s3_endpoint=s3.endpoint,
        s3_region=s3.region,
        s3_access_key_id=s3.access_key,
        s3_secret_access_key=s3.secret_key,
    )
    location = "s3://lake/warehouse"
    config = TableConfig(postgres.url, location, io=io_properties(options, location))
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="PG", subjects=["pg.>"])
    for i in range(6):
        await js.publish(f"pg.{i}", f"m{i}".encode())
    report = await asyncio.to_thread(append_tables, spark, options, config, say=lambda _: None)
    assert [t.rows for t in report.tables] == [6]
    await js.publish("pg.late", b"late")
    report = await asyncio.to_thread(append_tables, spark, options, config, say=lambda _: None)
    assert report.tables[0].ranges == {"PG": (7, 7)}

    # Another process would see the same: a fresh catalog object on the same database.
    table = open_catalog(config).load_table(("infinistream", "PG"))
    assert table.metadata_location.startswith(f"{location}/infinistream/PG/metadata/")
    rows = table.scan().to_arrow()
    assert sorted(rows.column("seq").to_pylist()) == list(range(1, 8))
    files = list_files(table.io, f"{location}/infinistream/PG/data")
    assert len(files) == 2 and all(f.location.startswith("s3://lake/") for f in files)
    # Nothing of the tables in the stream's own store.
    assert not (Path(options.objects.removeprefix("file://")) / "default" / "tables").exists()
