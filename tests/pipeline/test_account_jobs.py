"""Pipeline jobs take an account and read its virtual group only: the Spark data source and
`pipeline export --account A` see A's stream, never B's stream of the same name, and never
read B's objects (they are moved away before A's job runs, and it does not notice). The jobs
role runs its jobs for every account's group."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import time
from pathlib import Path
from typing import Any

import nats
import pyarrow.dataset as pads
import pytest

from infinistream.pipeline.datasource import register
from infinistream.pipeline.export import export_stream
from infinistream.pipeline.options import StoreOptions, add_store_arguments
from infinistream.storage import ObjectStore
from support.agentproc import running_agent
from support.sparkjvm import quick_jvm_env

CONFIG = """
accounts {
  A: { users: [ {user: a, password: a} ], jetstream: enabled }
  B: { users: [ {user: b, password: b} ], jetstream: enabled }
}
"""


async def _publish(url: str, user: str, n: int) -> None:
    nc = await nats.connect(url, user=user, password=user)
    try:
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        for i in range(n):
            await js.publish(f"orders.{user}", f"{user}-{i}".encode())
    finally:
        await nc.close()


def _read(spark: Any, store_dir: Path, account: str) -> list[bytes]:
    df = (
        spark.read.format("infinistream")
        .option("store_dir", str(store_dir))
        .option("account", account)
        .option("stream", "ORDERS")
        .load()
    )
    return [bytes(r["data"]) for r in df.orderBy("seq").collect()]


def test_a_job_on_one_account_reads_only_its_group(spark: Any, tmp_path: Path) -> None:
    register(spark)
    store_dir = tmp_path / "store"
    conf = tmp_path / "accounts.conf"
    conf.write_text(CONFIG)
    with running_agent(store_dir, "-c", str(conf), "--linger", "20ms") as agent:
        asyncio.run(_publish(agent.url, "a", 3))
        asyncio.run(_publish(agent.url, "b", 5))
    objects = store_dir / "objects"
    assert sorted(p.name for p in objects.iterdir()) == ["default@A", "default@B"]

    assert _read(spark, store_dir, "A") == [b"a-0", b"a-1", b"a-2"]
    assert _read(spark, store_dir, "B") == [b"b-%d" % i for i in range(5)]

    # B's objects gone: an export on A (its options from the command line) does not miss them.
    shutil.move(objects / "default@B", tmp_path / "b-objects")
    dest = tmp_path / "out"
    parser = argparse.ArgumentParser()
    add_store_arguments(parser)
    args = parser.parse_args(["-sd", str(store_dir), "--account", "A"])
    options = StoreOptions.from_args(args)
    assert options.group == "default@A"
    done = export_stream(spark, options, "ORDERS", str(dest))
    assert done.rows == 3
    table = pads.dataset(str(dest), format="parquet", partitioning="hive").to_table()
    assert sorted(table.column("data").to_pylist()) == [b"a-0", b"a-1", b"a-2"]


# Spark jobs started by the agent: over a minute on a busy machine, minutes on a very busy one.
@pytest.mark.timeout(600)
async def test_the_jobs_role_cleans_every_accounts_group(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    conf = tmp_path / "accounts.conf"
    conf.write_text(CONFIG)
    jobs = ("--jobs", "janitor", "--jobs-interval", "1s", "--jobs-master", "local[1]")
    # A short-lived JVM starts faster with the JVM settings of test jobs (test time only).
    with running_agent(
        store_dir,
        *("-c", str(conf), "--linger", "20ms", *jobs, "--janitor-grace", "0s"),
        env=quick_jvm_env(),
    ) as agent:
        await _publish(agent.url, "a", 1)
        objects = ObjectStore.from_url((store_dir / "objects").resolve().as_uri())
        old = f"{time.time_ns() - 10**12:020d}"
        orphan = f"default@A/objects/l0/{old}-orphan00-00000001-aaaaaa.iso"
        await objects.put(orphan, b"garbage")
        deadline = time.monotonic() + 480  # only a safety net: the run is the event
        while agent.running() and await _exists(objects, orphan):
            assert time.monotonic() < deadline, agent.log()[-3000:]
            await asyncio.sleep(0.2)
        assert not await _exists(objects, orphan), agent.log()[-3000:]
        # What account A's stream references stays.
        nc = await nats.connect(agent.url, user="a", password="a")
        assert (await nc.jetstream().get_msg("ORDERS", 1)).data == b"a-0"
        await nc.close()


async def _exists(objects: ObjectStore, key: str) -> bool:
    return any(info.key == key for info in await objects.list(os.path.dirname(key)))
