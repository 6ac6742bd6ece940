"""Encryption at rest, looked at in the bytes: two real agents on the S3-compatible server and a
shared SQLite metadata file, the compaction job, then key rotation with `pipeline rewrap`.

A marker string goes into every message's subject, headers and payload; afterwards every
object in the bucket and every file under the agents' store directory (the metadata store, its
WAL, anything else) is read raw, and the marker must be in none of them.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.errors import APIError

from infinistream.pipeline import rewrap
from infinistream.pipeline.compaction import job as compact
from infinistream.pipeline.compaction.plan import CompactSettings
from infinistream.pipeline.datasource import register
from infinistream.pipeline.options import StoreOptions
from infinistream.storage import ObjectStore
from infinistream.storage.layout import level_of
from support.agentproc import AgentProcess, running_agent
from support.polling import until
from support.s3server import S3Server, start_s3_server

MARKER = b"Zq7MARKERxK2"
OLD_KEY = "old key: 7c1f0e9a5b2d4c8e9f1a3b5d7e9f0a2c"
NEW_KEY = "new key: 0b8d6f4a2c9e7b5d3f1a8c6e4b2d0f9a"
STREAM = "ENC"
PER_AGENT = 40


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = start_s3_server()
    yield server
    server.stop()


def _agent(s3: S3Server, store_dir: Path, url: str, *extra: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return running_agent(
        store_dir,
        "--objects",
        url,
        "--s3-endpoint",
        s3.endpoint,
        "--linger",
        "10ms",
        *extra,
        env={**s3.env(), **(env or {})},
    )


def _message(agent: int, i: int) -> tuple[str, dict[str, str], bytes]:
    marker = MARKER.decode()
    return (
        f"enc.{marker}.a{agent}.{i}",
        {"X-Secret": f"{marker}-{agent}-{i}", "Nats-Msg-Id": f"{marker}-id-{agent}-{i}"},
        MARKER + f" payload {agent} {i}".encode(),
    )


async def _publish(agent: AgentProcess, which: int) -> None:
    nc = await nats.connect(agent.url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        for i in range(PER_AGENT):
            subject, headers, data = _message(which, i)
            await js.publish(subject, data, headers=headers)
    finally:
        await nc.close()


async def _read_all(agent: AgentProcess) -> set[tuple[str, str, bytes]]:
    """Every message of the stream, through MSG.GET and through a pull consumer."""
    nc = await nats.connect(agent.url, allow_reconnect=False)
    try:
        js = nc.jetstream()
        info = await js.stream_info(STREAM)
        got = set()
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(STREAM, seq)
            assert msg.headers is not None and msg.data is not None
            got.add((msg.subject, msg.headers["X-Secret"], msg.data))
        sub = await js.pull_subscribe("enc.>", durable=f"d{uuid.uuid4().hex[:8]}")
        fetched = set()
        while len(fetched) < len(got):
            for m in await sub.fetch(50, timeout=10):
                assert m.headers is not None
                fetched.add((m.subject, m.headers["X-Secret"], m.data))
                await m.ack()
        assert fetched == got
        return got
    finally:
        await nc.close()


def _expected() -> set[tuple[str, str, bytes]]:
    return {
        (s, h["X-Secret"], d)
        for a in (1, 2)
        for s, h, d in (_message(a, i) for i in range(PER_AGENT))
    }


async def _bucket_objects(s3: S3Server, url: str) -> dict[str, bytes]:
    store = ObjectStore.from_url(url, **s3.store_options())
    return {info.key: await store.get(info.key) for info in await store.list()}


def _files_with_marker(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and MARKER in p.read_bytes()]


async def _no_marker_anywhere(s3: S3Server, url: str, store_dir: Path) -> int:
    objects = await _bucket_objects(s3, url)
    assert objects, "the bucket holds the stream's objects"
    assert [k for k, data in objects.items() if MARKER in data] == []
    # The metadata store (SQLite file and WAL) and whatever else the agents keep on disk.
    assert list(store_dir.rglob("meta.db*")), "the metadata store is under the store dir"
    assert _files_with_marker(store_dir) == []
    return len(objects)


async def test_no_plaintext_in_bucket_or_metadata_and_key_rotation(
    spark: Any, s3: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = f"e-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(bucket)
    url = f"s3://{bucket}/pfx"
    store_dir = tmp_path / "store"
    old_file = tmp_path / "old.key"
    old_file.write_text(OLD_KEY + "\n")
    new_file = tmp_path / "new.key"
    new_file.write_text(NEW_KEY)

    # Two agents on one bucket and one metadata file; one gets its key from a file and the
    # cipher from a flag, the other from the environment (chachapoly, the default).
    with (
        _agent(s3, store_dir, url, "--key-file", str(old_file)) as a,
        _agent(s3, store_dir, url, env={"INFINISTREAM_KEY": OLD_KEY}) as b,
    ):
        nc = await nats.connect(a.url)
        await nc.jetstream().add_stream(name=STREAM, subjects=["enc.>"], duplicate_window=600)
        await nc.close()
        await asyncio.gather(_publish(a, 1), _publish(b, 2))
        assert await _read_all(b) == _expected()

        # Compaction rewrites the L0 objects of both agents into sealed L1 objects.
        options = StoreOptions(
            objects=url,
            metadata="sqlite:///" + str((store_dir / "meta.db").resolve()).lstrip("/"),
            s3_endpoint=s3.endpoint,
            s3_region=s3.region,
            s3_access_key_id=s3.access_key,
            s3_secret_access_key=s3.secret_key,
            key=OLD_KEY,
        )
        settings = CompactSettings(min_age_ns=0, target_bytes=4 * 1024, entry_bytes=1024)
        summary = await asyncio.to_thread(compact.compact, spark, options, settings)
        assert summary.ok and summary.chunks_swapped > 0, summary.line()
        assert await _read_all(a) == _expected()
        await _no_marker_anywhere(s3, url, store_dir)

    compacted = {k for k in await _bucket_objects(s3, url) if level_of(k) >= 1}
    assert compacted

    # Rotation: the new key for new objects, the old one only to read until rewrapped.
    rotating = StoreOptions(**{**options.__dict__, "key": NEW_KEY, "prev_keys": (OLD_KEY,)})
    with _agent(
        s3, store_dir, url, "--key-file", str(new_file), "--prev-key-file", str(old_file)
    ) as a:
        before = await rewrap.key_report(rotating)
        assert before.old_keys() != [] and before.current not in before.old_keys()
        # The command's dry run says so and changes nothing: exit 4, old key still needed.
        parser = argparse.ArgumentParser()
        rewrap.add_arguments(parser)
        code = await asyncio.to_thread(rewrap.main, parser.parse_args(["--dry-run"]), rotating)
        out = capsys.readouterr().out
        assert code == 4 and "previous keys still needed: " + before.old_keys()[0] in out
        assert await rewrap.key_report(rotating) == before
        result = await rewrap.rewrap(rotating)
        assert result.ok and result.objects_copied > 0, result.line()
        assert result.report.old_keys() == [], result.report.lines()
        assert result.report.objects_in_clear == set() and result.report.values_in_clear == 0
        # Ids published under the old key are still recognised as duplicates while it is held.
        nc = await nats.connect(a.url)
        subject, headers, data = _message(1, 0)
        assert (await nc.jetstream().publish(subject, data, headers=headers)).duplicate
        await nc.close()
        assert await _read_all(a) == _expected()
    await _no_marker_anywhere(s3, url, store_dir)

    # The old key retired: the new key alone reads everything, through an agent and through
    # the Spark data source (its executors open the sections).
    with _agent(s3, store_dir, url, "--key-file", str(new_file)) as a:
        assert await _read_all(a) == _expected()
    register(spark)
    reader = spark.read.format("infinistream").option("stream", STREAM)
    for name, value in {
        "objects": url,
        "metadata": options.metadata,
        "s3_endpoint": s3.endpoint,
        "s3_region": s3.region,
        "s3_access_key_id": s3.access_key,
        "s3_secret_access_key": s3.secret_key,
        "key_file": str(new_file),
    }.items():
        reader = reader.option(name, value)
    rows = reader.load().select("subject", "data").collect()
    assert {(r.subject, bytes(r.data)) for r in rows} == {(s, d) for s, _, d in _expected()}

    # The wrong key (here: the retired one alone) is refused with the store error code, and
    # nothing is served in its place.
    with _agent(s3, store_dir, url, "--key-file", str(old_file)) as a:
        nc = await nats.connect(a.url)
        try:
            with pytest.raises(APIError) as refused:
                await nc.jetstream().get_msg(STREAM, 1)
            assert refused.value.err_code == 10077
            assert "encryption key refused" in (refused.value.description or "")
        finally:
            await nc.close()
        # The log line and the API reply come from different tasks: wait for the line.
        await until(lambda: "refused" in a.log(), 10, "the agent logging the refused key")
