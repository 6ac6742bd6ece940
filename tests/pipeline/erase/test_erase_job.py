"""GDPR erase, checked on the bytes: two agents share a store (a local directory, and the
S3-compatible test server with encryption at rest; on the local store the messages are
compacted first, so the erase rewrites L1 objects there and L0 ones on S3); messages carrying
a marker in their payload, subject and headers share objects with messages that do not; one
is erased by `STREAM.MSG.DELETE` (nats-py's `delete_msg`, which sends no `no_erase`) and
others by a purge with `InfiniStream-Erase: true`.

The streams are also appended to Iceberg tables (`pipeline tables`) before the erase.

At once, neither agent serves them (direct get, MSG.GET, consumer fetch), the one that had them
in its section cache included. After the erase job and the janitor (grace 0), no file under
the data directory, no object in the bucket, no table file (as stored, and a data file's
decoded values) and no key or value in the metadata store holds the marker, and every other
message still reads back, on both agents, and from the tables. With encryption on, the
marker is never in the bucket's bytes: there the scans also open every object's sections and
every sealed index entry with the key, and find the erased message in none. (S3 without
encryption is the same code path as the local store for these checks, and is left out to keep
the Spark runs few.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig
from nats.js.errors import NotFoundError
from pyiceberg.io import load_file_io

from infinistream.metadata import open_metadata
from infinistream.pipeline.commands import add_pipeline_parser, run_pipeline
from infinistream.pipeline.compaction.job import compact, plan_compaction, run_chunks, swap_all
from infinistream.pipeline.compaction.plan import CompactSettings
from infinistream.pipeline.compaction.swap import SwapOutcome
from infinistream.pipeline.erase.job import erase
from infinistream.pipeline.export import export_stream
from infinistream.pipeline.janitor import JanitorConfig, run_janitor
from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.snapshot import referenced_objects
from infinistream.pipeline.tables.append import append_tables
from infinistream.pipeline.tables.catalog import open_catalog
from infinistream.pipeline.tables.config import (
    TableConfig,
    default_catalog,
    default_location,
    io_properties,
)
from infinistream.pipeline.tables.files import list_files
from infinistream.storage.layout import level_of, objects_prefix
from infinistream.storage.segment import decode_section, parse_object
from support.agentpool import connected, running_agents
from support.agentproc import AgentProcess
from support.s3server import S3Server, start_s3_server

MARKER = "ErAsEmE7f3a"
KEY = "erase test key: 5b0e9d8c7a6f4e3d2c1b0a9f8e7d6c5b"
ERASE = {"InfiniStream-Erase": "true"}


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = start_s3_server()
    yield server
    server.stop()


def _options(store_dir: Path, s3: S3Server | None, bucket: str, key: str | None) -> StoreOptions:
    metadata = "sqlite:///" + str((store_dir / "meta.db").resolve()).lstrip("/")
    if s3 is None:
        objects = (store_dir / "objects").resolve().as_uri()
        return StoreOptions(objects=objects, metadata=metadata, key=key)
    return StoreOptions(
        objects=f"s3://{bucket}",
        metadata=metadata,
        s3_endpoint=s3.endpoint,
        s3_region=s3.region,
        s3_access_key_id=s3.access_key,
        s3_secret_access_key=s3.secret_key,
        key=key,
    )


def _two_agents(
    store_dir: Path, s3: S3Server | None, bucket: str, key: str | None
) -> contextlib.AbstractContextManager[list[AgentProcess]]:
    # The zone cache on, its disk tier included (under <store_dir>/cache): the final scan of
    # every file under the data directory covers the blocks the agents kept there.
    extra: list[str] = []
    env = {"INFINISTREAM_KEY": key} if key else {}
    if s3 is not None:
        extra += ["--objects", f"s3://{bucket}", "--s3-endpoint", s3.endpoint]
        env |= s3.env()
    return running_agents(store_dir, *extra, linger="20ms", env=env)


Published = dict[int, tuple[str, bytes, dict[str, str] | None]]  # seq -> subject, data, headers


async def _publish(js: JetStreamContext) -> tuple[Published, Published, int, list[int]]:
    """Both streams, in batches that share objects; returns what each stream holds, the
    sequence to erase by delete and those the purge erases."""
    people: Published = {}
    other: Published = {}

    async def put(subject: str, data: bytes, headers: dict[str, str] | None = None) -> None:
        ack = await js.publish(subject, data, headers=headers)
        (people if ack.stream == "PEOPLE" else other)[ack.seq] = (subject, data, headers)

    secret = {"X-Secret": f"id {MARKER}"}
    # Its Nats-Msg-Id names the person too: metadata holds it (the duplicate window).
    identified = {**secret, "Nats-Msg-Id": f"msg-{MARKER}"}
    for batch in range(3):
        work = [put(f"people.p{batch}.{i}", f"person {batch}.{i}".encode()) for i in range(10)]
        work += [put(f"other.o{batch}.{i}", f"other {batch}.{i}".encode()) for i in range(10)]
        if batch == 1:
            work.insert(5, put(f"people.{MARKER}", f"payload {MARKER}".encode(), identified))
            work += [
                put(f"people.purge.{MARKER}.{k}", f"gone {k} {MARKER}".encode(), secret)
                for k in range(3)
            ]
        await asyncio.gather(*work)
    deleted = next(s for s, (subj, _, _) in people.items() if subj == f"people.{MARKER}")
    purged = [s for s, (subj, _, _) in people.items() if subj.startswith("people.purge.")]
    return people, other, deleted, purged


async def _api(nc: Client, subject: str, body: Any = b"", **kw: Any) -> dict[str, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return json.loads((await nc.request("$JS.API." + subject, data, timeout=10, **kw)).data)


async def _fetch_all(js: JetStreamContext, stream: str, count: int) -> list[Any]:
    """Every message a new consumer gets from the start of `stream`."""
    sub = await js.pull_subscribe(
        "", durable=None, stream=stream, config=ConsumerConfig(ack_policy="none")
    )
    got: list[Any] = []
    while len(got) < count:
        try:
            got += await sub.fetch(count - len(got), timeout=2)
        except TimeoutError:
            break
    with contextlib.suppress(TimeoutError):
        got += await sub.fetch(1, timeout=0.5)  # nothing more than the live messages
    await sub.unsubscribe()
    return got


def _carries_marker(msg: Any) -> bool:
    text = msg.subject + json.dumps(msg.headers or {}) + msg.data.decode(errors="replace")
    return MARKER in text


async def _object_bytes(options: StoreOptions) -> dict[str, bytes]:
    """Every object of the group's streams (the tables' files lie beside them, not among)."""
    store = options.open_objects()
    infos = await store.list(objects_prefix(options.group))
    return {info.key: await store.get(info.key) for info in infos}


def _table_config(options: StoreOptions) -> TableConfig:
    location = default_location(options)
    return TableConfig(default_catalog(options), location, io=io_properties(options, location))


def _table_file_bytes(options: StoreOptions) -> list[bytes]:
    """Every file under the tables' location as stored, and each data file's values decoded
    (its pages are compressed)."""
    config = _table_config(options)
    io = load_file_io(config.io_properties(), config.location)
    out = []
    for stored in list_files(io, config.location):
        with io.new_input(stored.location).open() as f:
            raw = f.read()
        out.append(raw)
        if stored.location.endswith(".parquet"):
            out.append(repr(pq.read_table(pa.BufferReader(raw)).to_pylist()).encode())
    return out


async def _plain_object_bytes(options: StoreOptions) -> dict[str, bytes]:
    """Every object as stored, followed by its sections opened and decoded: with encryption
    on, what the key still reads out of the bucket."""
    keys = options.encryption()
    out: dict[str, bytes] = {}
    for name, data in (await _object_bytes(options)).items():
        view = memoryview(data)
        sections = [
            bytes(decode_section(view[ref.offset : ref.end], ref, key=name, keys=keys))
            for ref in parse_object(data, verify=False, key=name)
        ]
        out[name] = data + b"".join(sections)
    return out


async def _referenced(options: StoreOptions) -> set[str]:
    async with options.open() as stores:
        return await referenced_objects(stores.meta, options.group)


async def _metadata_dump(options: StoreOptions) -> list[bytes]:
    """Every key and value as stored, and as the key opens them (sealed index entries)."""
    raw, opened = open_metadata(options.metadata), options.open_metadata()
    try:
        items = await raw.range("") + await opened.range("")
        return [item.key.encode() + item.value for item in items]
    finally:
        await raw.close()
        await opened.close()


# Three Spark jobs (four with compaction) and the tables': minutes on a busy machine.
@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", ["local", "s3-encrypted"])
async def test_erased_message_leaves_every_store(
    spark: Any, tmp_path: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    s3: S3Server | None = request.getfixturevalue("s3") if backend != "local" else None
    key = KEY if backend.endswith("encrypted") else None
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    if s3 is not None:
        s3.create_bucket(bucket)
    store_dir = tmp_path / "store"
    options = _options(store_dir, s3, bucket, key)
    marker = MARKER.encode()
    with _two_agents(store_dir, s3, bucket, key) as agents:
        async with connected(*agents, allow_reconnect=False) as (nc_a, nc_b):
            js_a, js_b = nc_a.jetstream(timeout=10), nc_b.jetstream(timeout=10)
            await js_a.add_stream(name="PEOPLE", subjects=["people.>"], allow_direct=True)
            await js_a.add_stream(name="OTHER", subjects=["other.>"], allow_direct=True)
            people, other, deleted, purged = await _publish(js_a)
            # In the bucket: in clear without encryption, sealed with it (then only the key
            # reads it: the scans below open every section with it).
            stored = (await _object_bytes(options)).values()
            assert any(marker in data for data in stored) is (key is None)
            assert any(marker in data for data in (await _plain_object_bytes(options)).values())

            if backend == "local":
                # Here the bytes also sit in compacted objects (L1), not only in the agents' L0.
                settings = CompactSettings(min_age_ns=0)
                summary = await asyncio.to_thread(compact, spark, options, settings)
                assert summary.chunks_swapped > 0, summary.line()
                assert all(level_of(k) == 1 for k in await _referenced(options))

            # The streams as Iceberg tables: their files hold the messages too.
            tables = await asyncio.to_thread(
                append_tables, spark, options, _table_config(options), say=lambda _: None
            )
            assert [t.rows for t in tables.tables] == [len(other), len(people)]
            assert any(marker in data for data in _table_file_bytes(options))

            # Agent B reads the message first: its section cache holds it.
            assert marker in (await js_b.get_msg("PEOPLE", deleted)).data
            assert marker in (await js_b.get_msg("PEOPLE", deleted, direct=True)).data

            # And a consumer on B has it delivered, not yet acknowledged.
            pending = await js_b.pull_subscribe(
                "people.>", durable="pending", config=ConsumerConfig(ack_wait=1)
            )
            delivered = await pending.fetch(len(people), timeout=5)
            assert any(_carries_marker(m) for m in delivered)

            # Erase through agent A: one delete, one purge by subject.
            assert await js_a.delete_msg("PEOPLE", deleted)
            resp = await _api(
                nc_a, "STREAM.PURGE.PEOPLE", {"filter": "people.purge.>"}, headers=ERASE
            )
            assert resp["purged"] == len(purged) == 3
            erased = {deleted, *purged}
            for s in erased:
                del people[s]

            # Never served again, by either agent, B's cache notwithstanding.
            for js in (js_a, js_b):
                for seq in erased:
                    with pytest.raises(NotFoundError):
                        await js.get_msg("PEOPLE", seq)
                    with pytest.raises(NotFoundError):
                        await js.get_msg("PEOPLE", seq, direct=True)
                fetched = await _fetch_all(js, "PEOPLE", len(people))
                assert sorted(m.metadata.sequence.stream for m in fetched) == sorted(people)
                assert not any(_carries_marker(m) for m in fetched)

            # What awaited an ack goes out again after ack_wait, from either agent: not these.
            await asyncio.sleep(1.5)
            again = await (await js_a.pull_subscribe("people.>", durable="pending")).fetch(
                len(people), timeout=5
            )
            assert sorted(m.metadata.sequence.stream for m in again) == sorted(people)
            assert not any(_carries_marker(m) for m in again)

            status = await _api(nc_b, "STREAM.ERASE.STATUS.PEOPLE")
            assert [e["state"] for e in status["erasures"]] == ["pending", "pending"]

            # Until the pipeline runs, the bytes are still there: the scans below can see them.
            assert any(marker in data for data in (await _plain_object_bytes(options)).values())
            assert any(marker in v for v in await _metadata_dump(options))  # index subjects

            # The erase job rewrites every object holding the bytes, and swaps the index.
            report = await asyncio.to_thread(erase, spark, options)
            assert report.requests_rewritten == 2 and not report.problems
            (table_erasure,) = report.tables
            assert table_erasure.table == "infinistream.PEOPLE"
            assert table_erasure.rows_removed == len(erased) and not table_erasure.error
            assert report.msg_ids_forgotten == 1
            assert report.chunks_swapped == report.chunks > 0
            status = await _api(nc_b, "STREAM.ERASE.STATUS.PEOPLE")
            assert [e["state"] for e in status["erasures"]] == ["rewritten", "rewritten"]

            # The janitor deletes the old objects (grace 0 here), and so completes them.
            await asyncio.to_thread(
                run_janitor, spark, options, JanitorConfig(grace=0), lambda _: None
            )
            status = await _api(nc_b, "STREAM.ERASE.STATUS.PEOPLE")
            assert (status["total"], status["pending"]) == (2, 0)
            for e in status["erasures"]:
                assert e["state"] == "complete" and e["completed"] >= e["rewritten"]

            # No marker anywhere: objects, metadata, any file under the data directory.
            objects = await _plain_object_bytes(options)
            assert objects, "the other messages still live in objects"
            assert [k for k, data in objects.items() if marker in data] == []
            assert [v for v in await _metadata_dump(options) if marker in v] == []
            assert [data for data in _table_file_bytes(options) if marker in data] == []
            people_table = open_catalog(_table_config(options)).load_table(
                ("infinistream", "PEOPLE")
            )
            assert sorted(people_table.scan().to_arrow().column("seq").to_pylist()) == sorted(
                people
            )
            files = [p for p in tmp_path.rglob("*") if p.is_file()]
            assert any(p.name == "meta.db" for p in files)
            assert [p for p in files if marker in p.read_bytes()] == []

            # Every other message still reads back, from either agent.
            for js in (js_a, js_b):
                for stream, held in (("PEOPLE", people), ("OTHER", other)):
                    for seq, (subject, data, _) in held.items():
                        msg = await js.get_msg(stream, seq, direct=js is js_b)
                        assert (msg.subject, msg.data) == (subject, data)
                fetched = await _fetch_all(js, "PEOPLE", len(people))
                assert sorted(m.metadata.sequence.stream for m in fetched) == sorted(people)


# -- exports and the report -----------------------------------------------------------------


def _cli(*argv: str) -> int:
    """`infinistream pipeline ARGV` in this process (so on the session's Spark)."""
    parser = argparse.ArgumentParser()
    add_pipeline_parser(parser.add_subparsers(dest="command"))
    return run_pipeline(parser.parse_args(["pipeline", *argv]))


def _store_args(options: StoreOptions) -> list[str]:
    return ["--objects", options.objects, "--metadata", options.metadata]


def _status(options: StoreOptions, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert _cli("erase", *_store_args(options), "--status", "--json") == 0
    erasures: list[dict[str, Any]] = json.loads(capsys.readouterr().out)["erasures"]
    return erasures


def _files_with_marker(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and MARKER.encode() in p.read_bytes()]


async def test_exports_holding_erased_messages_are_listed_and_rewritten(
    spark: Any,
    nc: Client,
    options: StoreOptions,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="EXP", subjects=["exp.>"])
    for i in range(4):
        await js.publish(f"exp.{i}", f"keep {i}".encode())
    secret = await js.publish("exp.x", f"payload {MARKER}".encode())
    dest = tmp_path / "export"
    # export_stream is what `pipeline export` runs (whose main stops the session's Spark).
    await asyncio.to_thread(export_stream, spark, options, "EXP", str(dest))
    assert _files_with_marker(dest), "the export holds the message: the scan can see it"

    assert await js.delete_msg("EXP", secret.seq)
    (request,) = await asyncio.to_thread(_status, options, capsys)
    assert (request["state"], request["holders_left"]) == ("pending", 1)
    (held,) = request["exports"]
    assert held["destination"] == dest.resolve().as_uri()
    assert held["through_seq"] == secret.seq
    assert held["rewrite"].endswith(f"--stream EXP --to {dest.resolve().as_uri()} --rewrite")

    # The way out the report names: export the stream again from scratch.
    result = await asyncio.to_thread(export_stream, spark, options, "EXP", str(dest), rewrite=True)
    assert (result.first_seq, result.rows) == (1, 4)
    assert _files_with_marker(dest) == []
    (request,) = await asyncio.to_thread(_status, options, capsys)
    assert request["exports"] == []
    table = pads.dataset(str(dest), format="parquet", partitioning="hive").to_table()
    assert sorted(table.column("seq").to_pylist()) == [1, 2, 3, 4]


# -- a compaction that copied the message just before its erase -------------------------------


async def test_a_copy_compaction_made_before_the_erase_is_rewritten_too(
    spark: Any, nc: Client, options: StoreOptions
) -> None:
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="RACE", subjects=["race.>"])
    for i in range(5):
        await js.publish(f"race.{i}", f"keep {i}".encode())
    secret = await js.publish("race.x", f"payload {MARKER}".encode())
    settings = CompactSettings(min_age_ns=0)
    # Compaction reads the stream while the message is live...
    plan = await plan_compaction(options, settings)
    assert plan.chunks
    # ...the erase lands...
    assert await js.delete_msg("RACE", secret.seq)
    # ...and compaction writes its copy (with the message in it) and swaps it in: the
    # tombstone stays, so it is not served, but the new object holds its bytes.
    results = await asyncio.to_thread(run_chunks, spark, options, settings, plan.chunks)
    swaps = await swap_all(options, plan.chunks, results)
    assert all(s is not None and s.outcome is SwapOutcome.SWAPPED for s in swaps)
    copies = await _referenced(options)
    objects = await _object_bytes(options)
    assert any(MARKER.encode() in objects[k] for k in copies)

    report = await asyncio.to_thread(erase, spark, options)
    assert report.requests_rewritten == 1 and report.chunks_swapped == 1
    objects = await _object_bytes(options)
    assert not any(MARKER.encode() in objects[k] for k in await _referenced(options))
    for i in range(5):
        assert (await js.get_msg("RACE", i + 1)).data == f"keep {i}".encode()
