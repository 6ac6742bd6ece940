"""The janitor against real agents and real stores: what it deletes, and what it never does."""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from infinistream.metadata.kv import Put
from infinistream.pipeline.commands import add_pipeline_parser, run_pipeline
from infinistream.pipeline.janitor import (
    JanitorConfig,
    JanitorError,
    JanitorReport,
    ListPart,
    _probe_levels,
    list_part,
    plan_list_parts,
    preflight,
    run_janitor,
)
from infinistream.pipeline.lease import acquire, read_lease
from infinistream.pipeline.options import StoreOptions
from infinistream.storage.layout import written_ns_of
from infinistream.stream.loader import read_stream
from infinistream.stream.records import catalog_key
from support.agentproc import AgentProcess, running_agent
from support.s3server import S3Server, start_s3_server
from support.storeinspect import committed_state
from support.storeinspect import object_keys as stored_keys

GROUP = "default"


# -- helpers -----------------------------------------------------------------------------------


def object_keys(store_dir: Path) -> set[str]:
    return stored_keys(store_dir / "objects")


async def stream_objects(options: StoreOptions, name: str) -> set[str]:
    meta = options.open_metadata()
    try:
        snap = await read_stream(meta, GROUP, name)
    finally:
        await meta.close()
    assert snap is not None
    return {ref.entry.obj for ref in snap.entries}


async def put_orphan(options: StoreOptions, *, age: float, size: int = 100) -> str:
    """An object no commit references, as a batch whose commit failed leaves behind."""
    stamp = time.time_ns() - int(age * 1e9)
    key = f"{GROUP}/objects/l0/{stamp:020d}-orphan00-00000001-{os.urandom(3).hex()}.iso"
    await options.open_objects().put(key, os.urandom(size))
    return key


async def janitor(spark: Any, options: StoreOptions, **config: Any) -> JanitorReport:
    lines: list[str] = []
    return await asyncio.to_thread(
        run_janitor, spark, options, JanitorConfig(**config), lines.append
    )


def cli(*argv: str) -> int:
    """`infinistream pipeline janitor ARGV` in this process (so on the session's Spark)."""
    parser = argparse.ArgumentParser()
    add_pipeline_parser(parser.add_subparsers(dest="command"))
    return run_pipeline(parser.parse_args(["pipeline", "janitor", *argv]))


def store_args(options: StoreOptions) -> list[str]:
    return ["--objects", options.objects, "--metadata", options.metadata]


async def publish(nc: Client, subject: str, count: int, size: int = 50) -> None:
    js = nc.jetstream(timeout=10)
    for i in range(count):
        # One at a time: each batch, so each object, holds one stream's messages.
        await js.publish(subject, f"{i:04d}".encode() * (size // 4))


# -- what gets deleted -------------------------------------------------------------------------

GRACE = 1.5


async def test_deletes_unreferenced_objects_after_the_grace(
    spark: Any, agent: AgentProcess, nc: Client, store_dir: Path, options: StoreOptions
) -> None:
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="KEEP", subjects=["keep.>"])
    await js.add_stream(name="GONE", subjects=["gone.>"])
    for _ in range(3):
        await publish(nc, "keep.x", 1)
        await publish(nc, "gone.x", 1)
    keep, gone = await stream_objects(options, "KEEP"), await stream_objects(options, "GONE")
    assert len(keep) == len(gone) == 3 and not keep & gone
    await js.delete_stream("GONE")
    old_orphan = await put_orphan(options, age=3600)
    await asyncio.sleep(GRACE + 0.5)
    young_orphan = await put_orphan(options, age=0)
    everything = object_keys(store_dir)
    assert keep | gone | {old_orphan, young_orphan} <= everything

    # First sighting: the unreferenced objects past the grace are marked, none deleted yet
    # (an agent may still be reading what just became unreferenced); the young one is left.
    first = await janitor(spark, options, grace=GRACE)
    assert first.objects_deleted == 0
    assert first.objects_unreferenced == len(gone) + 2
    assert first.objects_young == 1
    assert first.objects_waiting == len(gone) + 1
    assert first.objects_referenced == len(everything) - len(gone) - 2
    assert object_keys(store_dir) == everything

    await asyncio.sleep(GRACE + 0.2)
    second = await janitor(spark, options, grace=GRACE)
    assert set(second.deletable_keys) == gone | {old_orphan}
    assert second.objects_deleted == len(gone) + 1 and second.delete_failures == 0
    assert object_keys(store_dir) == everything - gone - {old_orphan}
    # The young orphan has now been seen unreferenced once: its turn comes next run.
    assert second.objects_waiting == 1

    # Nothing referenced went: every message of KEEP still reads through a fresh fetch.
    for seq in (1, 2, 3):
        msg = await js.get_msg("KEEP", seq)
        assert msg.data == b"0000" * 12

    assert keep <= object_keys(store_dir) and young_orphan in object_keys(store_dir)


async def test_dry_run_reports_and_deletes_nothing(
    spark: Any,
    nc: Client,
    store_dir: Path,
    options: StoreOptions,
    capsys: pytest.CaptureFixture[str],
) -> None:
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="DRY", subjects=["dry.>"])
    await publish(nc, "dry.x", 2)
    orphans = [await put_orphan(options, age=60, size=size) for size in (100, 250, 1000)]
    before = object_keys(store_dir)

    code = await asyncio.to_thread(cli, *store_args(options), "--grace", "0s", "--dry-run")
    out = capsys.readouterr().out
    assert code == 0
    assert object_keys(store_dir) == before
    assert "dry run: would delete 3 objects (1350 bytes)" in out
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("janitor summary: ")
    fields = dict(kv.split("=") for kv in summary.removeprefix("janitor summary: ").split())
    assert fields["objects_deletable"] == "3" and fields["bytes_deletable"] == "1350"
    assert fields["objects_deleted"] == "0" and fields["dry_run"] == "yes"
    assert fields["objects_listed"] == str(len(before)) and fields["streams"] == "1"

    code = await asyncio.to_thread(cli, *store_args(options), "--grace", "0s")
    out = capsys.readouterr().out
    assert code == 0 and "objects_deleted=3 bytes_deleted=1350" in out
    assert object_keys(store_dir) == before - set(orphans)


# -- limits on streams nobody publishes to -----------------------------------------------------


async def test_applies_max_age_to_an_idle_stream(
    spark: Any, store_dir: Path, options: StoreOptions
) -> None:
    with running_agent(store_dir, "--linger", "20ms") as agent:
        nc = await nats.connect(agent.url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="AGING", subjects=["aging.>"], max_age=1.5)
        await js.add_stream(name="FOREVER", subjects=["forever.>"])
        await publish(nc, "aging.x", 4)
        await publish(nc, "forever.x", 2)
        await nc.close()
    # No agent runs: only the janitor can expire anything now.
    await asyncio.sleep(2.0)
    aging = await stream_objects(options, "AGING")
    state = committed_state(store_dir / "meta.db", "AGING")
    assert state is not None and state.msgs == 4

    report = await janitor(spark, options, grace=0)
    assert report.streams == 2 and report.streams_with_limits == 1
    assert report.streams_limited == 1 and report.messages_removed == 4
    state = committed_state(store_dir / "meta.db", "AGING")
    assert state is not None and state.msgs == 0 and state.first_seq == 5
    # Its objects became garbage in the same run (no grace), and went.
    assert set(report.deletable_keys) == aging
    assert not aging & object_keys(store_dir)

    with running_agent(store_dir, "--linger", "20ms") as fresh:
        nc = await nats.connect(fresh.url)
        js = nc.jetstream(timeout=10)
        info = await js.stream_info("AGING")
        assert info.state.messages == 0 and info.state.first_seq == 5
        assert info.state.last_seq == 4
        info = await js.stream_info("FOREVER")
        assert info.state.messages == 2
        assert (await js.get_msg("FOREVER", 2)).data == b"0001" * 12
        await nc.close()


# -- bad input: nothing referenced is deleted -----------------------------------------------------


async def test_refuses_missing_or_mismatched_stores(
    nc: Client,
    store_dir: Path,
    options: StoreOptions,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="S", subjects=["s.>"])
    await publish(nc, "s.x", 2)
    before = object_keys(store_dir)

    missing_db = tmp_path / "nowhere" / "meta.db"
    code = await asyncio.to_thread(
        cli, "--objects", options.objects, "--metadata", f"sqlite://{missing_db}", "--grace", "0s"
    )
    err = capsys.readouterr().err
    assert code == 1 and f"file {missing_db} does not exist" in err
    assert not missing_db.exists(), "the janitor must not create an empty metadata store"

    missing_dir = tmp_path / "no-objects"
    code = await asyncio.to_thread(
        cli, "--objects", missing_dir.as_uri(), "--metadata", options.metadata, "--grace", "0s"
    )
    err = capsys.readouterr().err
    assert code == 1 and f"directory {missing_dir} does not exist" in err
    assert not missing_dir.exists()

    # A metadata store of some other deployment: every object would look unreferenced.
    with running_agent(tmp_path / "other", "--linger", "20ms"):
        pass
    other_meta = "sqlite://" + str((tmp_path / "other" / "meta.db").resolve())
    code = await asyncio.to_thread(
        cli, "--objects", options.objects, "--metadata", other_meta, "--grace", "0s"
    )
    err = capsys.readouterr().err
    assert code == 1 and "refusing to run" in err and "never held a stream" in err

    code = await asyncio.to_thread(cli, *store_args(options), "--grace=-1s")
    assert code == 2 and "--grace" in capsys.readouterr().err
    assert object_keys(store_dir) == before


def test_spark_that_cannot_start(store_dir: Path, options: StoreOptions) -> None:
    store_dir.mkdir()
    asyncio.run(_referenced_and_orphan(options))
    before = object_keys(store_dir)
    env = dict(os.environ, JAVA_HOME=str(store_dir / "no-java"))
    argv = ["pipeline", "janitor", "-sd", str(store_dir), "--grace", "0s"]
    proc = subprocess.run(
        [sys.executable, "-m", "infinistream", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert "cannot start Spark (master local[*])" in proc.stderr
    assert object_keys(store_dir) == before


async def _referenced_and_orphan(options: StoreOptions) -> None:
    """Stores with a trace of the group in metadata, and objects nothing references."""
    meta = options.open_metadata()
    try:
        await meta.txn([], [Put(catalog_key(GROUP), b"x")])
    finally:
        await meta.close()
    await put_orphan(options, age=3600)
    await put_orphan(options, age=3600)


async def test_stale_fence_deletes_nothing(
    spark: Any,
    nc: Client,
    store_dir: Path,
    options: StoreOptions,
    capsys: pytest.CaptureFixture[str],
) -> None:
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="F", subjects=["f.>"])
    await publish(nc, "f.x", 1)
    await put_orphan(options, age=3600)
    meta = options.open_metadata()
    try:
        stale = await acquire(meta, GROUP, "janitor", "old-holder", ttl=0.1)
        assert stale is not None
        await asyncio.sleep(0.2)
        assert await acquire(meta, GROUP, "janitor", "new-holder") is not None
    finally:
        await meta.close()
    before = object_keys(store_dir)
    fence = stale.fence.args()
    code = await asyncio.to_thread(cli, *store_args(options), "--grace", "0s", *fence)
    captured = capsys.readouterr()
    assert code == 3
    assert "no longer holds" in captured.err
    assert object_keys(store_dir) == before

    # The holder's live fence lets the same run through.
    meta = options.open_metadata()
    try:
        current = await read_lease(meta, GROUP, "janitor")
    finally:
        await meta.close()
    assert current is not None and current.fence is not None
    report = await janitor(spark, options, grace=0, fence=current.fence)
    assert report.objects_deleted == 1


# -- listing -----------------------------------------------------------------------------------


def test_list_parts_cover_every_key_once(tmp_path: Path) -> None:
    options = StoreOptions(objects=(tmp_path / "o").as_uri(), metadata="sqlite://:memory:")
    _check_parts_cover(options)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = start_s3_server()
    yield server
    server.stop()


def _s3_options(s3: S3Server, bucket: str, metadata: str) -> StoreOptions:
    return StoreOptions(
        objects=f"s3://{bucket}",
        metadata=metadata,
        s3_endpoint=s3.endpoint,
        s3_region=s3.region,
        s3_access_key_id=s3.access_key,
        s3_secret_access_key=s3.secret_key,
    )


def test_list_parts_cover_every_key_once_on_s3(s3: S3Server) -> None:
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(bucket)
    _check_parts_cover(_s3_options(s3, bucket, "sqlite://:memory:"))


def _check_parts_cover(options: StoreOptions) -> None:
    now = time.time_ns()
    store = options.open_objects()
    keys = {
        f"{GROUP}/objects/l0/{now - age * 10**9:020d}-a-{age:08d}-x.iso" for age in range(0, 500, 7)
    }
    keys |= {f"{GROUP}/objects/l1/{now - age * 10**9:020d}-b-{age:08d}-y.iso" for age in range(3)}
    keys |= {f"{GROUP}/objects/l1/ORDERS/no-timestamp-{i}.iso" for i in range(3)}
    keys |= {f"{GROUP}/objects/loose.iso", f"other/objects/l0/{now:020d}-z-1-z.iso"}

    async def put_all() -> None:
        await asyncio.gather(*(store.put(key, b"x") for key in keys))

    asyncio.run(put_all())
    levels = asyncio.run(_probe_levels(store, GROUP))
    parts = plan_list_parts(levels, 5, now + 1)
    assert len(parts) > 5
    listed = [row[0] for part in parts for row in list_part(options, part)]
    assert len(listed) == len(set(listed)), "a key listed by two tasks"
    assert set(listed) == {k for k in keys if k.startswith(f"{GROUP}/objects/")}
    assert ListPart(f"{GROUP}/objects", flat=True) in parts
    assert written_ns_of(f"{GROUP}/objects/l0/{now:020d}-a-1-x.iso") == now
    assert written_ns_of(f"{GROUP}/objects/l1/ORDERS/no-timestamp-1.iso") is None


# -- on S3 -------------------------------------------------------------------------------------


async def test_janitor_on_s3(spark: Any, s3: S3Server, tmp_path: Path) -> None:
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(bucket)
    store_dir = tmp_path / "store"
    meta_url = "sqlite://" + str((store_dir / "meta.db").resolve())
    options = _s3_options(s3, bucket, meta_url)
    agent_cm = running_agent(
        store_dir,
        "--objects",
        f"s3://{bucket}",
        "--s3-endpoint",
        s3.endpoint,
        "--linger",
        "10ms",
        env=s3.env(),
    )
    with agent_cm as agent:
        nc = await nats.connect(agent.url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="S3KEEP", subjects=["k.>"])
        await js.add_stream(name="S3GONE", subjects=["g.>"])
        await publish(nc, "k.x", 3)
        await publish(nc, "g.x", 2)
        keep, gone = (
            await stream_objects(options, "S3KEEP"),
            await stream_objects(options, "S3GONE"),
        )
        await js.delete_stream("S3GONE")
        orphan = await put_orphan(options, age=7200)
        store = options.open_objects()
        before = {info.key for info in await store.list()}

        report = await janitor(spark, options, grace=0, partitions=3)
        after = {info.key for info in await store.list()}
        assert set(report.deletable_keys) == gone | {orphan}
        assert after == before - gone - {orphan}
        assert keep <= after
        assert report.list_tasks >= 3
        assert (await js.get_msg("S3KEEP", 3)).data == b"0002" * 12
        await nc.close()

    # A bucket that is not there: a clear error naming it, before Spark is even asked.
    missing = _s3_options(s3, "no-such-bucket", meta_url)
    with pytest.raises(JanitorError, match="cannot list s3://no-such-bucket/default/objects/"):
        await asyncio.to_thread(preflight, missing)
