"""Every pipeline job, and the data source, on a Spark standalone cluster: a master and two
workers started from pyspark's install (infinistream_bench.tables_cluster), the store on the
S3-compatible server with encryption at rest, metadata on etcd, the tables' catalog in
PostgreSQL. Executors are other processes, which share nothing with the driver but the tasks
it sends, object storage and metadata; the driver runs from an empty working directory.

First an agent in the jobs role runs the tables job on its schedule with `--jobs-master
spark://...`, as a subprocess of its own (what an operator pointing the jobs role at a cluster
gets). Then one driver application (tests/support/clusterdriver.py) runs the data source and
every other job through `infinistream pipeline`'s own arguments, in the order a data team would,
each checked on what it changed: one application rather than one per job keeps the file to
minutes on a small machine.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pyarrow.parquet as pq
import pytest

from infinistream.metadata import open_metadata
from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.scheduler import read_last_run
from infinistream.pipeline.tables.catalog import open_catalog
from infinistream.pipeline.tables.config import CATALOG_ENV, TableConfig, io_properties
from infinistream.storage.keys import KEY_ENV, PREV_KEY_ENV
from infinistream_bench.tables_cluster import SparkCluster
from support.agentproc import AgentProcess, running_agent
from support.etcdserver import EtcdServer
from support.pgserver import PostgresServer
from support.s3server import S3Server, start_s3_server
from support.sparkjvm import DAEMON_OPTS, quick_cluster_env, quick_jvm

OLD_KEY = "cluster test key: 3d5f7a9c1e2b4d6f8a0c2e4f6b8d0a1c"
NEW_KEY = "cluster test key: 9e7c5a3f1d0b8e6c4a2f0d9b7e5c3a1f"
DRIVER = Path(__file__).parent.parent / "support" / "clusterdriver.py"


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
    # Nine JVMs in all (master, workers, two drivers and their executors) on a small machine:
    # each starts with the JVM settings of short test jobs (support/sparkjvm.py).
    with quick_jvm(DAEMON_OPTS):
        spark_cluster.start()
    yield spark_cluster
    spark_cluster.stop()


class Driver:
    """The driver application on the cluster (tests/support/clusterdriver.py): `infinistream
    pipeline JOB` run in it against the stores, credentials and keys from the environment."""

    def __init__(
        self, cluster: SparkCluster, s3: S3Server, options: StoreOptions, catalog: str, cwd: Path
    ) -> None:
        self.options = options
        self.store = [
            "--objects", options.objects, "--s3-endpoint", s3.endpoint,
            "--metadata", options.metadata, "--master", cluster.master_url,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            [sys.executable, str(DRIVER), cluster.master_url],
            cwd=cwd,
            env={
                **quick_cluster_env(cluster.env()),
                **s3.env(),
                KEY_ENV: OLD_KEY,
                CATALOG_ENV: catalog,
            },
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._answer() == {"ready": True}

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("RESULT "):
                answer: dict[str, Any] = json.loads(line[len("RESULT ") :])
                return answer
        raise AssertionError(f"the driver ended (exit code {self.process.wait()})")

    def _ask(self, command: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def __call__(self, job: str, *args: str, env: dict[str, str | None] | None = None) -> str:
        answer = self._ask({"job": job, "argv": [*self.store, *args], "env": env or {}})
        output: str = answer["output"]
        assert answer["code"] == 0, f"{job} exited {answer['code']}:\n{output[-4000:]}"
        return output

    def read(self, stream: str) -> dict[str, Any]:
        options = self.options
        return self._ask(
            {
                "read": {
                    "stream": stream,
                    "objects": options.objects,
                    "metadata": options.metadata,
                    "s3_endpoint": options.s3_endpoint,
                    "s3_access_key_id": options.s3_access_key_id,
                    "s3_secret_access_key": options.s3_secret_access_key,
                }
            }
        )

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


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


async def _publish_more(url: str) -> None:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream(timeout=10)
        for i in range(5):
            await js.publish(f"orders.eu.more.{i}", b"more")
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


def _orders_table(catalog: str, options: StoreOptions) -> Any:
    location = f"{options.objects}/default/tables"
    config = TableConfig(catalog, location, io=io_properties(options, location))
    return open_catalog(config).load_table(("infinistream", "ORDERS"))


def _table_seqs(catalog: str, options: StoreOptions) -> list[int]:
    table = _orders_table(catalog, options)
    return sorted(table.scan().to_arrow().column("seq").to_pylist())


def _days_of_files(catalog: str, options: StoreOptions) -> list[Any]:
    """The day partition of each of the ORDERS table's data files."""
    table = _orders_table(catalog, options)
    return [task.file.partition for task in table.scan().plan_files()]


async def _scheduled_run(agent: AgentProcess, metadata: str, job: str, timeout: float) -> Any:
    """The jobs role's record of its last run of `job`, once there is one."""
    meta = open_metadata(metadata)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert agent.running(), agent.log()[-3000:]
            last = await read_last_run(meta, "default", job)
            if last is not None:
                return last
            await asyncio.sleep(1)
        raise AssertionError(f"the jobs role did not run {job} in {timeout:.0f}s")
    finally:
        await meta.close()


@pytest.mark.timeout(1500)
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
    agent_args = ["--objects", options.objects, "--s3-endpoint", s3.endpoint]
    agent_args += ["--metadata", etcd.url, "--linger", "20ms"]
    agent_env = {**s3.env(), KEY_ENV: OLD_KEY}
    conf = tmp_path / "jobs.conf"
    conf.write_text(f'infinistream {{ tables_catalog: "{postgres.url}" }}\n')
    with running_agent(tmp_path / "agent", *agent_args, env=agent_env) as agent:
        secret, count = await _publish(agent.url)
    # Stopped (not killed) once the first run is recorded: a second one it may have started
    # meanwhile stops with it, and leaves the cluster to the driver below.
    scheduled = ["-c", str(conf), "--jobs", "tables", "--jobs-interval", "5s"]
    scheduled += ["--jobs-master", cluster.master_url]
    # The jobs role's executors run the project's Python: PYSPARK_PYTHON reaches them through
    # the job's environment (cluster.env() sets it, as an operator would).
    with running_agent(
        tmp_path / "agent",
        *agent_args,
        *scheduled,
        env={**quick_cluster_env(cluster.env()), **agent_env},
    ) as scheduler:
        last = await _scheduled_run(scheduler, etcd.url, "tables", timeout=900)
        assert last.exit_code == 0 and "2 committed; 45 rows appended" in last.summary, last
        scheduler.stop()
    assert _table_seqs(postgres.url, options) == list(range(1, count + 1))

    jobs = Driver(cluster, s3, options, postgres.url, driver_dir)
    try:
        with running_agent(tmp_path / "agent", *agent_args, env=agent_env) as agent:
            await _check_jobs(jobs, agent.url, postgres.url, options, secret, count, tmp_path)
    finally:
        jobs.close()

    # Both applications ran on the cluster.
    apps = {app["name"] for app in cluster.completed_apps()}
    assert {"infinistream-tables", "infinistream-test-driver"} <= apps, apps


async def _check_jobs(
    jobs: Driver,
    url: str,
    catalog: str,
    options: StoreOptions,
    secret: int,
    count: int,
    tmp_path: Path,
) -> None:
    # The data source: planned by the driver, read by executors on both workers.
    read = jobs.read("ORDERS")
    assert read["seqs"] == list(range(1, count + 1))
    assert read["executors"] == 3  # the driver's block manager and one executor per worker

    out = jobs("compact", "--min-age", "0")
    assert "compact: done" in out and "2 compacted" in out, out
    out = jobs("scan")
    assert "0 damaged" in out, out
    jobs("export", "--stream", "ORDERS", "--to", str(tmp_path / "export"))
    exported = pq.ParquetDataset(str(tmp_path / "export")).read()
    assert sorted(exported.column("seq").to_pylist()) == list(range(1, count + 1))

    status = await _erase(url, secret)
    assert [e["state"] for e in status["erasures"]] == ["pending"]
    out = jobs("erase")
    assert "erase: table infinistream.ORDERS" in out and "1 rows removed" in out, out
    assert _table_seqs(catalog, options) == list(range(1, count))
    out = jobs("janitor", "--grace", "0")
    status = await _erase_status(url)
    assert [e["state"] for e in status["erasures"]] == ["complete"], out

    await _publish_more(url)
    out = jobs("tables")
    assert "appended 5 rows" in out, out
    days = _days_of_files(catalog, options)
    assert len(days) == 2, days  # the first run's file, rewritten by the erase, and the append's
    out = jobs("tables-upkeep", "--keep", "0", "--orphan-grace", "0")
    # Small files are merged within a day's partition only: a test that runs across midnight
    # (UTC) has its two files in two days, which no upkeep merges.
    merged = "2 files compacted" if days[0] == days[1] else "0 files compacted"
    assert "tables-upkeep: done" in out and merged in out, out
    assert _table_seqs(catalog, options) == [s for s in range(1, count + 6) if s != secret]

    # Key rotation runs on the driver alone (exit 0: no object needs the old key any more).
    out = jobs("rewrap", env={KEY_ENV: NEW_KEY, PREV_KEY_ENV: OLD_KEY})
    assert "rewrap" in out, out
