"""The agent's jobs role: pipeline jobs on a schedule, one agent per job by lease."""

from __future__ import annotations

import argparse
import asyncio
import os
import stat
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import nats
import pytest

from infinistream.metadata import SqliteMetadataStore
from infinistream.metadata.kv import MetadataStore, Put
from infinistream.pipeline.lease import (
    LeaseRecord,
    acquire,
    fence_key,
    lease_key,
    read_lease,
)
from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.scheduler import (
    JobScheduler,
    job_command,
    job_env,
    read_last_run,
)
from infinistream.settings import (
    Settings,
    SettingsError,
    add_serve_arguments,
    parse_jobs,
    settings_from_args,
)
from infinistream.storage import ObjectStore
from support.agentproc import running_agent, wait_for
from support.sparkjvm import quick_jvm_env

GROUP = "default"


def serve_settings(*argv: str) -> Settings:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return settings_from_args(parser.parse_args(list(argv)))


# -- settings ----------------------------------------------------------------------------------


def test_jobs_role_is_off_by_default_and_configurable(tmp_path: Path) -> None:
    assert serve_settings().jobs == ""
    assert Settings().jobs == ""
    s = serve_settings("--jobs", "--jobs-interval", "1s", "--janitor-grace", "0s")
    assert parse_jobs(s.jobs) == ("erase", "compact", "janitor")
    assert s.jobs_interval == 1.0 and s.janitor_grace == 0.0
    assert parse_jobs(serve_settings("--jobs=janitor").jobs) == ("janitor",)

    conf = tmp_path / "agent.conf"
    conf.write_text('infinistream { jobs: true, jobs_interval: "5m", janitor_grace: "1h" }\n')
    s = serve_settings("-c", str(conf))
    assert parse_jobs(s.jobs) == ("erase", "compact", "janitor")
    assert s.jobs_interval == 300.0 and s.janitor_grace == 3600.0
    conf.write_text('infinistream { jobs: "janitor" }\n')
    assert serve_settings("-c", str(conf)).jobs == "janitor"
    conf.write_text("infinistream { jobs: false }\n")
    assert serve_settings("-c", str(conf)).jobs == ""

    with pytest.raises(SettingsError, match="unknown job 'vacuum'"):
        serve_settings("--jobs=janitor,vacuum")
    with pytest.raises(SettingsError, match="jobs_interval"):
        serve_settings("--jobs", "--jobs-interval", "0s")


def test_job_command_carries_the_stores_and_the_fence(tmp_path: Path) -> None:
    s = serve_settings("-sd", str(tmp_path), "--janitor-grace", "90s", "--s3-endpoint", "http://x")
    s.s3_access_key_id, s.s3_secret_access_key = "AK", "SK"
    from infinistream.pipeline.lease import Fence

    fence = Fence("default/fences/janitor", 7)
    argv = job_command("janitor", s, fence, python="py")
    assert argv[:5] == ["py", "-m", "infinistream", "pipeline", "janitor"]
    joined = " ".join(argv)
    assert f"--objects {s.objects_url}" in joined and f"--metadata {s.metadata_url}" in joined
    assert "--fence-key default/fences/janitor --fence-revision 7" in joined
    assert "--grace 90000ms" in joined and "--s3-endpoint http://x" in joined
    assert "SK" not in joined, "secrets travel by environment, not on the command line"
    env = job_env(s)
    assert env["AWS_ACCESS_KEY_ID"] == "AK" and env["AWS_SECRET_ACCESS_KEY"] == "SK"
    assert "--grace" not in job_command("compact", s, fence)


def test_jobs_run_spark_workers_on_this_python_in_local_mode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert job_env(serve_settings())["PYSPARK_PYTHON"] == sys.executable
    assert "PYSPARK_PYTHON" not in job_env(serve_settings("--jobs-master", "spark://head:7077"))
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python/bin/python3")
    assert job_env(serve_settings())["PYSPARK_PYTHON"] == "/opt/python/bin/python3"


# -- the scheduler with stand-in jobs ----------------------------------------------------------


@pytest.fixture
async def meta(tmp_path: Path) -> AsyncIterator[MetadataStore]:
    store = SqliteMetadataStore(tmp_path / "meta.db")
    yield store
    await store.close()


def fake_job(tmp_path: Path, body: str) -> str:
    """A stand-in for `python`: a script run as `SCRIPT -m infinistream pipeline JOB ...`."""
    script = tmp_path / "fake-python"
    script.write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "argv"}\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


async def test_runs_a_job_under_its_lease_and_releases_it(
    tmp_path: Path, meta: MetadataStore
) -> None:
    python = fake_job(
        tmp_path, 'echo "janitor: working"\necho "janitor summary: objects_deleted=2"\nexit 0'
    )
    settings = Settings(store_dir=str(tmp_path), jobs="janitor")
    scheduler = JobScheduler(settings, meta, "me", python=python)
    result = await scheduler.run_job("janitor")
    assert result is not None and result.exit_code == 0 and not result.lease_lost
    assert result.summary == "janitor summary: objects_deleted=2"
    assert scheduler.runs == {("janitor", "ok"): 1}  # /metrics' infinistream_pipeline_job_runs
    # The job got the lease's fence on its command line; the lease is free again.
    argv = (tmp_path / "argv").read_text().split()
    assert argv[argv.index("--fence-revision") + 1] == str(result.fence.revision)
    assert await read_lease(meta, GROUP, "janitor") is None
    last = await read_last_run(meta, GROUP, "janitor")
    assert last is not None and last.holder == "me" and last.exit_code == 0
    assert last.summary == "janitor summary: objects_deleted=2"
    # Ran less than an interval ago (by any agent): not due, whoever asks.
    other = JobScheduler(settings, meta, "another-agent", python=python)
    assert await other.run_job("janitor") is None
    assert await read_lease(meta, GROUP, "janitor") is None


async def test_skips_a_job_whose_lease_another_agent_holds(
    tmp_path: Path, meta: MetadataStore
) -> None:
    python = fake_job(tmp_path, "exit 0")
    assert await acquire(meta, GROUP, "janitor", "other-agent") is not None
    scheduler = JobScheduler(Settings(store_dir=str(tmp_path)), meta, "me", python=python)
    assert await scheduler.run_job("janitor") is None
    assert not (tmp_path / "argv").exists(), "the job must not have started"


async def test_stops_the_job_when_its_lease_is_taken_over(
    tmp_path: Path, meta: MetadataStore
) -> None:
    python = fake_job(tmp_path, "exec sleep 60")
    scheduler = JobScheduler(
        Settings(store_dir=str(tmp_path)), meta, "me", lease_ttl=0.4, python=python
    )
    task = asyncio.create_task(scheduler.run_job("janitor"))
    deadline = time.monotonic() + 10
    while (state := await read_lease(meta, GROUP, "janitor")) is None:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    assert state.record.holder == "me"
    # Someone takes the lease over (as after an expiry the holder did not notice).
    now = time.time_ns()
    thief = LeaseRecord(
        holder="thief", job="janitor", acquired_ns=now, renewed_ns=now, expires_ns=now + 10**11
    )
    await meta.txn(
        [],
        [
            Put(lease_key(GROUP, "janitor"), msgspec.msgpack.encode(thief)),
            Put(fence_key(GROUP, "janitor"), b"thief"),
        ],
    )
    result = await asyncio.wait_for(task, 15)
    assert result is not None and result.lease_lost and result.exit_code != 0
    state = await read_lease(meta, GROUP, "janitor")
    assert state is not None and state.record.holder == "thief", "not released by the loser"


# -- the real thing ----------------------------------------------------------------------------


# A Spark job started by the agent: over a minute on a busy machine, minutes on a very busy one.
@pytest.mark.timeout(600)
async def test_agent_runs_the_janitor_on_schedule(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    options = StoreOptions(
        objects=(store_dir / "objects").resolve().as_uri(),
        metadata="sqlite:///" + str((store_dir / "meta.db").resolve()).lstrip("/"),
    )
    args = (
        "--linger",
        "20ms",
        "--jobs",
        "janitor",
        "--jobs-interval",
        "1s",
        "--jobs-master",
        "local[1]",
    )
    # A short-lived JVM starts faster with the JVM settings of test jobs: test time, not a
    # production setting (the job inherits the agent's environment).
    env = quick_jvm_env()
    with running_agent(store_dir, *args, "--janitor-grace", "0s", env=env) as agent:
        nc = await nats.connect(agent.url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="SCHED", subjects=["sched.>"])
        await js.publish("sched.x", b"kept")
        objects = ObjectStore.from_url(options.objects)
        orphan = f"{GROUP}/objects/l0/{time.time_ns() - 10**12:020d}-orphan00-00000001-aaaaaa.iso"
        await objects.put(orphan, b"garbage")
        server_id = nc._server_info["server_id"]

        meta = options.open_metadata()
        holders: set[str] = set()
        try:
            deadline = time.monotonic() + 480  # only a safety net: the run is the event
            while agent.running() and await _exists(objects, orphan):
                assert time.monotonic() < deadline, agent.log()[-3000:]
                state = await read_lease(meta, GROUP, "janitor")
                if state is not None:
                    holders.add(state.record.holder)
                await asyncio.sleep(0.1)
        finally:
            await meta.close()
        assert not await _exists(objects, orphan), agent.log()[-3000:]
        assert holders and all(h.endswith(server_id) for h in holders), holders
        await asyncio.to_thread(wait_for, lambda: "janitor summary:" in agent.log(), 30)
        log = agent.log()
        assert "Jobs role: janitor every 1s" in log
        assert "job janitor finished" in log and "objects_deleted=1" in log
        meta = options.open_metadata()
        try:
            last = await read_last_run(meta, GROUP, "janitor")
        finally:
            await meta.close()
        assert last is not None and last.holder.endswith(server_id) and last.exit_code == 0
        assert last.summary.startswith("janitor summary:")
        # What is referenced stays.
        assert (await js.get_msg("SCHED", 1)).data == b"kept"
        await nc.close()
        assert agent.stop() == 0


async def _exists(objects: ObjectStore, key: str) -> bool:
    return any(info.key == key for info in await objects.list(os.path.dirname(key)))


def test_encryption_keys_reach_jobs_by_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infinistream.pipeline.commands import add_pipeline_parser
    from infinistream.pipeline.lease import Fence

    conf = tmp_path / "enc.conf"
    conf.write_text('jetstream { cipher: aes, key: "new-k3y", prev_key: ["old-k3y", "older"] }')
    s = serve_settings("-sd", str(tmp_path), "-c", str(conf))
    argv = job_command("compact", s, Fence("default/fences/compact", 1), python="py")
    assert "k3y" not in " ".join(argv), "keys travel by environment, not on the command line"
    for name, value in job_env(s).items():
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser()
    add_pipeline_parser(parser.add_subparsers(dest="command"))
    options = StoreOptions.from_args(parser.parse_args(argv[3:]))
    job, agent = options.encryption(), s.encryption()
    assert job is not None and agent is not None
    assert (job.cipher, list(job.keys.key_ids())) == (agent.cipher, list(agent.keys.key_ids()))
    assert len(job.keys.key_ids()) == 3


async def test_runs_each_accounts_jobs_in_its_own_group(
    tmp_path: Path, meta: MetadataStore
) -> None:
    python = fake_job(tmp_path, 'echo "janitor summary: objects_deleted=0"\nexit 0')
    settings = Settings(store_dir=str(tmp_path), jobs="janitor")
    scheduler = JobScheduler(settings, meta, "me", python=python, accounts=("$G", "A"))
    result = await scheduler.run_job("janitor", "A")
    assert result is not None and result.exit_code == 0
    # The job was told the account; its lease and last run live in the account's group.
    argv = (tmp_path / "argv").read_text().split()
    assert argv[argv.index("--account") + 1] == "A"
    assert await read_last_run(meta, "default@A", "janitor") is not None
    assert await read_last_run(meta, GROUP, "janitor") is None
    # The global account's run is its own, due on its own.
    assert await scheduler.run_job("janitor") is not None
    assert "--account" not in (tmp_path / "argv").read_text().split()
    assert await read_last_run(meta, GROUP, "janitor") is not None
