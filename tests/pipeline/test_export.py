"""`pipeline export`: a stream to Parquet partitioned by date, incrementally from a bookmark in
metadata; deleted messages never exported; crashed runs rolled back; on S3 too."""

from __future__ import annotations

import asyncio
import datetime as dt
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import msgspec
import nats
import pyarrow.dataset as pads
import pytest
from nats.aio.client import Client

from infinistream.metadata import Put
from infinistream.pipeline import export as export_module
from infinistream.pipeline.datasource import register
from infinistream.pipeline.export import (
    ExportBookmark,
    ExportConflictError,
    ExportError,
    bookmark_key,
    export_stream,
    normalize_destination,
)
from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.snapshot import run
from support.agentproc import AgentProcess, running_agent
from support.s3server import start_s3_server


def _table(path: Path) -> Any:
    return pads.dataset(str(path), format="parquet", partitioning="hive").to_table()


def _seqs(path: Path) -> list[int]:
    return sorted(_table(path).column("seq").to_pylist())


def _date_dirs(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.is_dir() and not p.name.startswith("_"))


async def _bookmark(options: StoreOptions, stream: str, dest: Path) -> ExportBookmark | None:
    meta = options.open_metadata()
    try:
        key = bookmark_key(options.group, stream, normalize_destination(str(dest)))
        item = await meta.get(key)
        return None if item is None else msgspec.json.decode(item.value, type=ExportBookmark)
    finally:
        await meta.close()


async def _publish_with(nc: Client, stream: str, start: int, n: int, create: bool = False) -> None:
    js = nc.jetstream()
    if create:
        await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
    for i in range(start, start + n):
        subject = f"{stream.lower()}.{'a' if i % 2 else 'b'}"
        await js.publish(subject, b"message %d" % i, headers={"N": str(i)})


def publish(agent: AgentProcess, stream: str, start: int, n: int, create: bool = False) -> None:
    async def go() -> None:
        nc = await nats.connect(agent.url)
        try:
            await _publish_with(nc, stream, start, n, create)
        finally:
            await nc.close()

    asyncio.run(go())


def delete(agent: AgentProcess, stream: str, seq: int) -> None:
    async def go() -> None:
        nc = await nats.connect(agent.url)
        try:
            assert await nc.jetstream().delete_msg(stream, seq)
        finally:
            await nc.close()

    asyncio.run(go())


def test_export_twice_exports_only_new_messages(
    spark: Any, agent: AgentProcess, options: StoreOptions, tmp_path: Path
) -> None:
    register(spark)
    dest = tmp_path / "out"
    publish(agent, "ORDERS", 1, 10, create=True)
    publish(agent, "OTHER", 1, 4, create=True)

    first = export_stream(spark, options, "ORDERS", str(dest))
    assert (first.rows, first.first_seq, first.last_seq) == (10, 1, 10)
    table = _table(dest)
    assert table.num_rows == 10
    assert table.column_names == ["stream", "seq", "subject", "time", "headers", "data", "date"]
    rows = sorted(table.to_pylist(), key=lambda r: r["seq"])
    assert [r["data"] for r in rows] == [b"message %d" % i for i in range(1, 11)]
    assert [r["headers"] for r in rows] == [[("N", [str(i)])] for i in range(1, 11)]
    assert {r["stream"] for r in rows} == {"ORDERS"}
    # Partitioned by the UTC date of each message.
    want_dates = sorted({f"date={r['time'].astimezone(dt.UTC).date()}" for r in rows})
    assert _date_dirs(dest) == want_dates == [f"date={d}" for d in first.dates]
    bookmark = run(_bookmark(options, "ORDERS", dest))
    assert bookmark is not None
    assert (bookmark.last_seq, bookmark.rows, bookmark.runs) == (10, 10, 1)
    assert bookmark.pending_run == ""

    # New messages, one of them erased before the export runs: only the rest are exported.
    publish(agent, "ORDERS", 11, 5)
    delete(agent, "ORDERS", 12)
    second = export_stream(spark, options, "ORDERS", str(dest))
    assert (second.rows, second.first_seq, second.last_seq) == (4, 11, 15)
    assert _seqs(dest) == [s for s in range(1, 16) if s != 12]
    assert len(list(dest.glob("date=*/*.parquet"))) == 2

    # Nothing new: nothing written, bookmark unchanged.
    third = export_stream(spark, options, "ORDERS", str(dest))
    assert third.rows == 0 and third.first_seq > third.last_seq
    assert len(_seqs(dest)) == 14
    bookmark = run(_bookmark(options, "ORDERS", dest))
    assert bookmark is not None and (bookmark.last_seq, bookmark.rows) == (15, 14)
    # The command sees that from the bookmark, without starting Spark.
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "infinistream", "pipeline", "export"),
            *("--objects", options.objects, "--metadata", options.metadata),
            *("--stream", "ORDERS", "--to", str(dest)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "nothing new to export" in proc.stdout and "through seq 15" in proc.stdout

    # A message deleted after it was exported stays in the files already written.
    delete(agent, "ORDERS", 3)
    publish(agent, "ORDERS", 16, 1)
    fourth = export_stream(spark, options, "ORDERS", str(dest))
    assert fourth.rows == 1
    assert 3 in _seqs(dest)

    # Another destination has its own bookmark, and gets the stream as it is now.
    other = tmp_path / "other"
    again = export_stream(spark, options, "ORDERS", str(other))
    assert _seqs(other) == [s for s in range(1, 17) if s not in (3, 12)] and again.rows == 14

    # The bookmark lives under the group (invariant 6) and is keyed by the destination.
    key = bookmark_key("default", "ORDERS", normalize_destination(str(dest)))
    assert key.startswith("default/pipeline/export/ORDERS/")


def test_crashed_run_is_rolled_back(
    spark: Any,
    agent: AgentProcess,
    options: StoreOptions,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    register(spark)
    dest = tmp_path / "out"
    publish(agent, "LOGS", 1, 6, create=True)
    export_stream(spark, options, "LOGS", str(dest))
    publish(agent, "LOGS", 7, 3)

    # A run that claimed seqs 7..9, published one file and died before its bookmark swap.
    crashed = "seq7-9-deadbeef"
    written = next(dest.glob("date=*/*.parquet"))
    shutil.copy(written, written.parent / f"{crashed}-part-00000.parquet")
    (dest / "_staging" / crashed / "date=2000-01-01").mkdir(parents=True)

    async def claim() -> None:
        meta = options.open_metadata()
        try:
            key = bookmark_key(options.group, "LOGS", normalize_destination(str(dest)))
            item = await meta.get(key)
            assert item is not None
            bookmark = msgspec.json.decode(item.value, type=ExportBookmark)
            bookmark.pending_run, bookmark.pending_through = crashed, 9
            await meta.txn([], [Put(key, msgspec.json.encode(bookmark))])
        finally:
            await meta.close()

    run(claim())
    assert len(_seqs(dest)) == 12  # the crashed run's duplicate file is visible

    result = export_stream(spark, options, "LOGS", str(dest))
    assert result.rolled_back == crashed
    assert result.rows == 3
    assert _seqs(dest) == list(range(1, 10))
    assert not list(dest.glob(f"date=*/{crashed}-*"))
    assert not (dest / "_staging").exists()

    # Another export moving the bookmark meanwhile: this one fails its compare-and-set and
    # takes back what it published.
    publish(agent, "LOGS", 10, 2)
    real_write = export_module._write

    def racing_write(*args: Any) -> Any:
        out = real_write(*args)

        async def bump() -> None:
            meta = options.open_metadata()
            try:
                key = bookmark_key(options.group, "LOGS", normalize_destination(str(dest)))
                item = await meta.get(key)
                assert item is not None
                await meta.txn([], [Put(key, item.value)])
            finally:
                await meta.close()

        run(bump())
        return out

    monkeypatch.setattr(export_module, "_write", racing_write)
    with pytest.raises(ExportConflictError):
        export_stream(spark, options, "LOGS", str(dest))
    monkeypatch.undo()
    assert _seqs(dest) == list(range(1, 10))
    assert export_stream(spark, options, "LOGS", str(dest)).rows == 2
    assert _seqs(dest) == list(range(1, 12))

    # A stream deleted and created again is another stream: not appended to this export.
    async def recreate() -> None:
        nc = await nats.connect(agent.url)
        try:
            await nc.jetstream().delete_stream("LOGS")
        finally:
            await nc.close()

    run(recreate())
    publish(agent, "LOGS", 1, 2, create=True)
    with pytest.raises(ExportError, match="deleted and created again"):
        export_stream(spark, options, "LOGS", str(dest))
    assert _seqs(dest) == list(range(1, 12))


def test_missing_stream(spark: Any, options: StoreOptions, store_dir: Path, tmp_path: Path) -> None:
    with running_agent(store_dir, "--linger", "20ms"):
        pass  # creates the stores, with no streams
    with pytest.raises(ExportError, match="'NOPE' not found") as info:
        export_stream(spark, options, "NOPE", str(tmp_path / "x"))
    assert options.metadata in str(info.value)

    # The command says so before it starts Spark at all.
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "infinistream", "pipeline", "export"),
            *("-sd", str(store_dir), "--stream", "NOPE", "--to", str(tmp_path / "x")),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "'NOPE' not found" in proc.stderr and "meta.db" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_read_and_export_on_s3(spark: Any, tmp_path: Path) -> None:
    register(spark)
    s3 = start_s3_server()
    try:
        bucket = f"t-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(bucket)
        store_dir = tmp_path / "store"
        with running_agent(
            store_dir,
            "--objects",
            f"s3://{bucket}",
            "--s3-endpoint",
            s3.endpoint,
            "--linger",
            "20ms",
            env=s3.env(),
        ) as agent:
            publish(agent, "CLOUD", 1, 25, create=True)
        metadata = "sqlite:///" + str((store_dir / "meta.db").resolve()).lstrip("/")
        s3_opts = {
            "objects": f"s3://{bucket}",
            "metadata": metadata,
            "s3_endpoint": s3.endpoint,
            "s3_region": s3.region,
            "s3_access_key_id": s3.access_key,
            "s3_secret_access_key": s3.secret_key,
        }
        df = spark.read.format("infinistream").options(stream="CLOUD", **s3_opts).load()
        rows = sorted(df.where("subject = 'cloud.a'").collect(), key=lambda r: r.seq)
        assert [r.seq for r in rows] == list(range(1, 26, 2))
        assert [bytes(r.data) for r in rows] == [b"message %d" % i for i in range(1, 26, 2)]

        options = StoreOptions(
            objects=f"s3://{bucket}",
            metadata=metadata,
            s3_endpoint=s3.endpoint,
            s3_region=s3.region,
            s3_access_key_id=s3.access_key,
            s3_secret_access_key=s3.secret_key,
        )
        # An object store that does not answer: the read fails, naming object and store.
        dead = {**s3_opts, "s3_endpoint": "http://127.0.0.1:1"}
        with pytest.raises(Exception, match="cannot read object") as info:
            spark.read.format("infinistream").options(stream="CLOUD", **dead).load().collect()
        assert f"s3://{bucket}" in str(info.value)

        result = export_stream(spark, options, "CLOUD", str(tmp_path / "out"))
        assert result.rows == 25
        assert _seqs(tmp_path / "out") == list(range(1, 26))
        bookmark = run(_bookmark(options, "CLOUD", tmp_path / "out"))
        assert bookmark is not None and bookmark.last_seq == 25
    finally:
        s3.stop()


def test_erased_messages_after_compaction(
    spark: Any, agent: AgentProcess, options: StoreOptions, tmp_path: Path
) -> None:
    """MSG.DELETE (erase), then the compaction job: its sections list sequences with gaps,
    and the data source and the export read them, without the erased messages."""
    from infinistream.pipeline.compaction import job as compact
    from infinistream.pipeline.compaction.plan import CompactSettings
    from infinistream.pipeline.reading import load_snapshot
    from infinistream.stream.records import SectionEntry

    register(spark)
    publish(agent, "AUDIT", 1, 30, create=True)
    for seq in (5, 17, 18):
        delete(agent, "AUDIT", seq)
    settings = CompactSettings(min_age_ns=0, target_bytes=1024, entry_bytes=512)
    compact.compact(spark, options, settings, ["AUDIT"])
    snapshot = run(load_snapshot(options, "AUDIT"))
    assert any(
        isinstance(ref.entry, SectionEntry) and ref.entry.explicit for ref in snapshot.entries
    ), "compaction wrote no sections with gaps"

    live = [s for s in range(1, 31) if s not in (5, 17, 18)]
    df = spark.read.format("infinistream").options(
        stream="AUDIT", objects=options.objects, metadata=options.metadata
    )
    rows = sorted(df.load().collect(), key=lambda r: r.seq)
    assert [r.seq for r in rows] == live
    assert [bytes(r.data) for r in rows] == [b"message %d" % s for s in live]
    assert [r.headers for r in rows] == [{"N": [str(s)]} for s in live]
    between = df.option("startSeq", "15").option("endSeq", "20").load().collect()
    assert sorted(r.seq for r in between) == [15, 16, 19, 20]

    result = export_stream(spark, options, "AUDIT", str(tmp_path / "out"))
    assert result.rows == len(live)
    assert _seqs(tmp_path / "out") == live
