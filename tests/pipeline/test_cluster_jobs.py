"""Every pipeline job, and the data source, on a Spark standalone cluster: a master and two
workers started from pyspark's install (tests/support/sparkcluster.py), the store on the
S3-compatible server with encryption at rest, metadata on etcd, the tables' catalog in
PostgreSQL. Each job runs as the jobs role runs it, `python -m infinistream pipeline JOB
--master spark://...`, from an empty working directory: its executors are other processes,
which share nothing with the driver but the tasks it sends, object storage and metadata.

One cluster serves the whole file; the jobs run in the order a data team would run them, each
checked on what it changed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pyarrow.parquet as pq
import pytest

from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.tables.catalog import open_catalog
from infinistream.pipeline.tables.config import TableConfig, io_properties
from infinistream.storage.keys import KEY_ENV, PREV_KEY_ENV
from support.agentproc import running_agent
from support.etcdserver import EtcdServer
from support.pgserver import PostgresServer
from support.s3server import S3Server, start_s3_server
from support.sparkcluster import SparkCluster

OLD_KEY = "cluster test key: 3d5f7a9c1e2b4d6f8a0c2e4f6b8d0a1c"
NEW_KEY = "cluster test key: 9e7c5a3f1d0b8e6c4a2f0d9b7e5c3a1f"

# The driver script of the data source: a session on the cluster, the stream read back.
READ = """
import json, sys
from infinistream.pipeline.datasource import register
from infinistream.pipeline.spark import spark_session

master, options = sys.argv[1], json.loads(sys.argv[2])
spark = spark_session(master, "infinistream-read")
register(spark)
frame = spark.read.format("infinistream").options(**options).load()
rows = frame.select("seq", "subject", "data").collect()
print(json.dumps({"seqs": sorted(r.seq for r in rows),
                  "executors": spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()}))
spark.stop()
"""


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = start_s3_server()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    server = EtcdServer(tmp_path_factory.mktemp("etcd"))
    server.start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    spark_cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2)
    spark_cluster.start()
    yield spark_cluster
    spark_cluster.stop()


class Jobs:
    """Runs `infinistream pipeline JOB` against the stores, on the cluster, as the jobs role
    would: credentials and keys in the environment, nothing on disk the executors need."""

    def __init__(
        self, cluster: SparkCluster, s3: S3Server, options: StoreOptions, catalog: str, cwd: Path
    ) -> None:
        self.cluster = cluster
        self.options = options
        self.cwd = cwd
        self.env = {**cluster.env(), **s3.env(), KEY_ENV: OLD_KEY}
        self.env["INFINISTREAM_TABLES_CATALOG"] = catalog
        self.store = [
            "--objects", options.objects, "--s3-endpoint", s3.endpoint,
            "--metadata", options.metadata, "--master", cluster.master_url,
        ]  # fmt: skip

    def __call__(self, job: str, *args: str, code: int = 0) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "infinistream", "pipeline", job, *self.store, *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=400,
        )
        output = done.stdout + done.stderr
        assert done.returncode == code, f"{job} exited {done.returncode}:\n{output[-4000:]}"
        return output

    def read(self, stream: str) -> dict[str, Any]:
        options = {
            "stream": stream,
            "objects": self.options.objects,
            "metadata": self.options.metadata,
            "s3_endpoint": self.options.s3_endpoint,
            "s3_access_key_id": self.options.s3_access_key_id,
            "s3_secret_access_key": self.options.s3_secret_access_key,
        }
        done = subprocess.run(
            [sys.executable, "-c", READ, self.cluster.master_url, json.dumps(options)],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result


async def _publish(url: str) -> tuple[int, int]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        await js.add_stream(name="LOGS", subjects=["logs.>"])
        for batch in range(4):
            for i in range(10):
                body = json.dumps({"order": batch * 10 + i, "region": "eu"}).encode()
                await js.publish(f"orders.eu.{batch}.{i}", body, headers={"Batch": str(batch)})
            await js.publish(f"logs.{batch}", b"log line")
        secret = await js.publish("orders.eu.secret", b"erase me")
        return secret.seq, 41
    finally:
        await nc.close()


async def _erase(url: str, seq: int) -> dict[str, Any]:
    nc = await nats.connect(url)
    try:
        assert await nc.jetstream(timeout=10).delete_msg("ORDERS", seq)
        reply = await nc.request("$JS.API.STREAM.ERASE.STATUS.ORDERS", b"", timeout=10)
        status: dict[str, Any] = json.loads(reply.data)
        return status
    finally:
        await nc.close()


async def _erase_status(url: str) -> dict[str, Any]:
    nc = await nats.connect(url)
    try:
        reply = await nc.request("$JS.API.STREAM.ERASE.STATUS.ORDERS", b"", timeout=10)
        status: dict[str, Any] = json.loads(reply.data)
        return status
    finally:
        await nc.close()


def _table_seqs(catalog: str, options: StoreOptions) -> list[int]:
    location = f"{options.objects}/default/tables"
    config = TableConfig(catalog, location, io=io_properties(options, location))
    table = open_catalog(config).load_table(("infinistream", "ORDERS"))
    return sorted(table.scan().to_arrow().column("seq").to_pylist())


@pytest.mark.timeout(1800)
async def test_every_job_and_the_data_source_on_a_standalone_cluster(
    s3: S3Server,
    etcd: EtcdServer,
    postgres: PostgresServer,
    cluster: SparkCluster,
    tmp_path: Path,
) -> None:
    bucket = f"c-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(bucket)
    options = StoreOptions(
        objects=f"s3://{bucket}",
        metadata=etcd.url,
        s3_endpoint=s3.endpoint,
        s3_region=s3.region,
        s3_access_key_id=s3.access_key,
        s3_secret_access_key=s3.secret_key,
        key=OLD_KEY,
    )
    driver_dir = tmp_path / "driver"
    driver_dir.mkdir()
    jobs = Jobs(cluster, s3, options, postgres.url, driver_dir)
    agent_args = ["--objects", options.objects, "--s3-endpoint", s3.endpoint]
    agent_args += ["--metadata", etcd.url, "--linger", "20ms"]
    agent_env = {**s3.env(), KEY_ENV: OLD_KEY}
    with running_agent(tmp_path / "agent", *agent_args, env=agent_env) as agent:
        secret, count = await _publish(agent.url)

        # The data source: planned by the driver, read by executors on both workers.
        read = jobs.read("ORDERS")
        assert read["seqs"] == list(range(1, count + 1))
        assert read["executors"] == 3  # the driver's block manager and one executor per worker

        out = jobs("tables")
        assert "tables: done" in out and "41 rows" in out.replace("\n", " "), out
        assert _table_seqs(postgres.url, options) == list(range(1, count + 1))

        out = jobs("compact", "--min-age", "0")
        assert "compact: done" in out and "2 compacted" in out, out
        out = jobs("scan", "--json")
        assert '"damaged": []' in out or "0 damaged" in out, out
        out = jobs("export", "--stream", "ORDERS", "--to", str(tmp_path / "export"))
        exported = pq.ParquetDataset(str(tmp_path / "export")).read()
        assert sorted(exported.column("seq").to_pylist()) == list(range(1, count + 1))

        status = await _erase(agent.url, secret)
        assert [e["state"] for e in status["erasures"]] == ["pending"]
        out = jobs("erase")
        assert "erase: table infinistream.ORDERS" in out and "1 rows removed" in out, out
        assert _table_seqs(postgres.url, options) == list(range(1, count))
        out = jobs("janitor", "--grace", "0")
        status = await _erase_status(agent.url)
        assert [e["state"] for e in status["erasures"]] == ["complete"], out

        out = jobs("tables-upkeep", "--keep", "0", "--orphan-grace", "0")
        assert "tables-upkeep: done" in out, out
        assert _table_seqs(postgres.url, options) == list(range(1, count))

        jobs.env |= {KEY_ENV: NEW_KEY, PREV_KEY_ENV: OLD_KEY}
        out = jobs("rewrap")
        assert "rewrap" in out, out
        del jobs.env[PREV_KEY_ENV]
        read = jobs.read("ORDERS")
        assert read["seqs"] == list(range(1, count))

    # Every Spark job ran as an application of the cluster, with executors on its workers.
    apps = cluster.completed_apps()
    for name in ("read", "tables", "compact", "scan", "export", "erase", "janitor"):
        assert any(app["name"] == f"infinistream-{name}" for app in apps), apps
