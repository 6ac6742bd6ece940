"""The `infinistream` Spark data source against a real agent: batch reads with filters,
deleted messages, corrupt objects, and the streaming reader in micro-batches."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest

from infinistream.pipeline.datasource import register
from infinistream.pipeline.export import export_stream
from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.reading import load_snapshot
from infinistream.pipeline.snapshot import run
from infinistream.stream.sections import read_segment
from support.agentproc import AgentProcess, running_agent
from support.rawnats import CONNECT_HEADERS, RawClient, hpub
from support.storeinspect import damage_object

MULTI_HEADERS = b"NATS/1.0\r\nTrace: a\r\nTrace: b\r\nOne: 1\r\n\r\n"


@dataclass
class Published:
    seq: int
    subject: str
    data: bytes
    headers: dict[str, list[str]] | None


@dataclass
class World:
    agent: AgentProcess
    store_dir: Path
    options: StoreOptions
    orders: list[Published]
    events: list[Published]
    wave_two_first: int  # first ORDERS seq published after a pause

    def reader(self, spark: Any, stream: str, **opts: str) -> Any:
        r = spark.read.format("infinistream").option("store_dir", str(self.store_dir))
        r = r.option("stream", stream)
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load()


Item = tuple[str, bytes, dict[str, str] | None]


async def _publish(url: str, stream: str, items: Sequence[Item]) -> list[Published]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        acks = await asyncio.gather(
            *[js.publish(subject, data, headers=h) for subject, data, h in items]
        )
        return [
            Published(ack.seq, subject, data, {k: [v] for k, v in h.items()} if h else None)
            for ack, (subject, data, h) in zip(acks, items, strict=True)
        ]
    finally:
        await nc.close()


async def _setup(url: str, port: int) -> tuple[list[Published], list[Published], int]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    await js.add_stream(name="EVENTS", subjects=["events.>"])
    await nc.close()
    regions = ["eu", "us", "ap"]
    wave1 = [
        (f"orders.{regions[i % 3]}.{i}", f"order {i}".encode(), {"Id": str(i), "Kind": "order"})
        for i in range(30)
    ]
    orders = await _publish(url, "ORDERS", wave1)
    events = await _publish(url, "EVENTS", [(f"events.{i}", b"e%d" % i, None) for i in range(7)])
    await asyncio.sleep(0.05)  # so that the second wave is stamped later
    wave2 = [(f"orders.eu.x{i}", b"late %d" % i, None) for i in range(10)]
    second = await _publish(url, "ORDERS", wave2)
    orders += second
    # A header repeated, which nats-py cannot send: the raw protocol.
    raw = await RawClient.open(port)
    raw.send(CONNECT_HEADERS + b"SUB _INBOX.raw 1\r\n")
    raw.send(hpub("orders.multi", MULTI_HEADERS, b"multi", reply="_INBOX.raw"))
    ack = await raw.read_until(b"}\r\n")
    await raw.close()
    seq = int(ack.split(b'"seq":')[1].split(b"}")[0].split(b",")[0])
    orders.append(Published(seq, "orders.multi", b"multi", {"Trace": ["a", "b"], "One": ["1"]}))
    return orders, events, second[0].seq


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Iterator[World]:
    register(spark)
    store_dir = tmp_path_factory.mktemp("ds") / "store"
    with running_agent(store_dir, "--linger", "20ms") as agent:
        orders, events, wave_two = asyncio.run(_setup(agent.url, agent.port))
        options = StoreOptions(
            objects=(store_dir / "objects").resolve().as_uri(),
            metadata="sqlite:///" + str((store_dir / "meta.db").resolve()).lstrip("/"),
        )
        yield World(agent, store_dir, options, orders, events, wave_two)


def _rows(df: Any) -> list[Any]:
    return sorted(df.collect(), key=lambda r: r.seq)


def test_batch_read_returns_exactly_what_was_published(spark: Any, world: World) -> None:
    df = world.reader(spark, "ORDERS")
    assert df.columns == ["stream", "seq", "subject", "time", "headers", "data"]
    assert [f.dataType.simpleString() for f in df.schema.fields] == [
        "string",
        "bigint",
        "string",
        "timestamp",
        "map<string,array<string>>",
        "binary",
    ]
    rows = _rows(df)
    want = sorted(world.orders, key=lambda p: p.seq)
    assert [(r.seq, r.subject, bytes(r.data), r.headers) for r in rows] == [
        (p.seq, p.subject, p.data, p.headers) for p in want
    ]
    assert {r.stream for r in rows} == {"ORDERS"}
    times = [r.time for r in rows]
    assert times == sorted(times)

    # The same messages as the server serves them, time included (both in microseconds).
    async def server_view() -> list[Any]:
        nc = await nats.connect(world.agent.url)
        try:
            js = nc.jetstream()
            return [await js.get_msg("ORDERS", seq) for seq in (1, 15, want[-1].seq)]
        finally:
            await nc.close()

    by_seq = {r.seq: r for r in rows}
    for msg in asyncio.run(server_view()):
        row = by_seq[msg.seq]
        assert row.subject == msg.subject and bytes(row.data) == msg.data
        assert row.time.replace(tzinfo=dt.UTC) == msg.time

    # Small partitions: many Spark partitions, the same rows.
    small = world.reader(spark, "ORDERS", partitionBytes="200")
    assert small.rdd.getNumPartitions() > 3
    assert [(r.seq, bytes(r.data)) for r in _rows(small)] == [(r.seq, bytes(r.data)) for r in rows]

    events = _rows(world.reader(spark, "EVENTS"))
    assert [(r.seq, r.subject, bytes(r.data), r.headers) for r in events] == [
        (p.seq, p.subject, p.data, None) for p in world.events
    ]


def test_filters(spark: Any, world: World) -> None:
    all_rows = _rows(world.reader(spark, "ORDERS"))

    eu = _rows(world.reader(spark, "ORDERS", subject="orders.eu.*"))
    assert [r.seq for r in eu] == [r.seq for r in all_rows if r.subject.startswith("orders.eu.")]
    assert len(eu) == 20
    deep = _rows(world.reader(spark, "ORDERS", subject="orders.>"))
    assert len(deep) == len(all_rows)
    assert _rows(world.reader(spark, "ORDERS", subject="nothing.here")) == []

    between = _rows(world.reader(spark, "ORDERS", startSeq="5", endSeq="12"))
    assert [r.seq for r in between] == list(range(5, 13))
    both = _rows(world.reader(spark, "ORDERS", startSeq="3", endSeq="20", subject="orders.us.*"))
    assert [r.seq for r in both] == [
        r.seq for r in all_rows if 3 <= r.seq <= 20 and r.subject.startswith("orders.us.")
    ]

    # Time bounds: start inclusive, end exclusive, ISO 8601 or nanoseconds.
    split = next(r.time for r in all_rows if r.seq == world.wave_two_first)
    iso = split.replace(tzinfo=dt.UTC).isoformat().replace("+00:00", "Z")
    late = _rows(world.reader(spark, "ORDERS", startTime=iso))
    assert [r.seq for r in late] == [r.seq for r in all_rows if r.time >= split]
    assert world.wave_two_first in {r.seq for r in late}
    assert 1 not in {r.seq for r in late}
    split_ns = str(int(split.replace(tzinfo=dt.UTC).timestamp() * 1_000_000) * 1000)
    early = _rows(world.reader(spark, "ORDERS", endTime=split_ns))
    assert [r.seq for r in early] == [r.seq for r in all_rows if r.time < split]
    assert len(early) + len(late) == len(all_rows)


def test_deleted_messages_do_not_appear(spark: Any, world: World) -> None:
    async def scenario() -> None:
        nc = await nats.connect(world.agent.url)
        js = nc.jetstream()
        await js.add_stream(name="GONE", subjects=["gone.>"])
        for i in range(12):
            await js.publish(f"gone.{i}", b"%d" % i)
        await js.delete_msg("GONE", 7)  # erase (the default of MSG.DELETE)
        await js.delete_msg("GONE", 9)
        await js.purge_stream("GONE", seq=4)  # everything below 4
        await nc.close()

    asyncio.run(scenario())
    rows = _rows(world.reader(spark, "GONE"))
    assert [r.seq for r in rows] == [4, 5, 6, 8, 10, 11, 12]
    assert [bytes(r.data) for r in rows] == [b"3", b"4", b"5", b"7", b"9", b"10", b"11"]


def test_missing_stream_is_named(spark: Any, world: World) -> None:
    with pytest.raises(Exception, match="NOPE") as info:
        world.reader(spark, "NOPE").collect()
    assert "not found" in str(info.value)
    assert world.options.metadata in str(info.value)

    # A metadata store that cannot be reached (here: opened) is named too.
    dead = "sqlite:///nonexistent/dir/meta.db"
    reader = spark.read.format("infinistream").option("stream", "ORDERS")
    reader = reader.option("objects", world.options.objects).option("metadata", dead)
    with pytest.raises(Exception, match="cannot read stream 'ORDERS'") as info:
        reader.load().collect()
    assert dead in str(info.value)


def test_corrupt_object_is_reported_and_skipped(
    spark: Any, world: World, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    async def scenario() -> None:
        nc = await nats.connect(world.agent.url)
        js = nc.jetstream()
        await js.add_stream(name="ROT", subjects=["rot.>"])
        for i in range(6):  # one flush each: each its own object
            await js.publish("rot.x", b"payload-%d" % i)
        await nc.close()

    asyncio.run(scenario())
    snapshot = run(load_snapshot(world.options, "ROT"))
    victim = next(ref for ref in snapshot.entries if ref.section().holds(3))
    seg = run(read_segment(world.options.open_objects(), victim.key, victim.entry))
    pos = seg.index_of(3)
    assert pos is not None
    at = seg.offset + seg.offsets[pos] + seg.lengths[pos] - 1  # last byte of seq 3's data
    damage_object(world.store_dir / "objects", victim.entry.obj, at, 0xFF)

    rows = _rows(world.reader(spark, "ROT"))
    assert [r.seq for r in rows] == [1, 2, 4, 5, 6]
    with pytest.raises(Exception, match="checksum") as info:
        world.reader(spark, "ROT", onCorrupt="fail").collect()
    assert victim.entry.obj in str(info.value)

    # The export job reports it, by object and sequence, and exports the rest.
    result = export_stream(spark, world.options, "ROT", str(tmp_path / "rot"))
    assert result.rows == 5
    assert len(result.problems) == 1
    assert victim.entry.obj in result.problems[0] and "seq 3" in result.problems[0]


def test_a_compressed_stream_reads_and_exports_as_published(
    spark: Any, world: World, tmp_path: Path
) -> None:
    """compression s2: the agent stores the stream's sections compressed; the data source and
    the export job read every message back as it was published."""
    from nats.js.api import StoreCompression

    from infinistream.storage import CODEC_ZSTD

    body = b'{"sku": "SKU-%04d", "qty": %d, "note": "compressible text compressible text"}'
    items: list[Item] = [
        (f"zip.{i % 5}", body % (i, i % 7), {"N": str(i)} if i % 4 == 0 else None)
        for i in range(400)
    ]

    async def scenario() -> list[Published]:
        nc = await nats.connect(world.agent.url)
        js = nc.jetstream()
        info = await js.add_stream(name="ZIP", subjects=["zip.>"], compression=StoreCompression.S2)
        assert info.config.compression == StoreCompression.S2
        await nc.close()
        published: list[Published] = []
        for start in range(0, len(items), 100):  # a few flushes, a few objects
            published += await _publish(world.agent.url, "ZIP", items[start : start + 100])
        nc = await nats.connect(world.agent.url)
        await nc.jetstream().delete_msg("ZIP", 7)
        await nc.close()
        return [p for p in published if p.seq != 7]

    published = asyncio.run(scenario())
    snapshot = run(load_snapshot(world.options, "ZIP"))
    assert snapshot.entries and all(ref.entry.codec == CODEC_ZSTD for ref in snapshot.entries)
    stored = sum(ref.entry.length for ref in snapshot.entries)
    plain = sum(ref.section().size for ref in snapshot.entries)
    assert stored * 3 < plain, (stored, plain)

    want = [(p.seq, p.subject, p.data, p.headers) for p in published]
    rows = _rows(world.reader(spark, "ZIP"))
    assert [(r.seq, r.subject, bytes(r.data), r.headers) for r in rows] == want
    # Small partitions cannot cut a compressed section: the same rows.
    small = _rows(world.reader(spark, "ZIP", partitionBytes="200", subject="zip.3"))
    assert [r.seq for r in small] == [p.seq for p in published if p.subject == "zip.3"]

    result = export_stream(spark, world.options, "ZIP", str(tmp_path / "zip"))
    assert (result.rows, result.problems) == (len(published), [])
    import pyarrow.dataset as pads  # type: ignore[import-untyped]

    table = pads.dataset(str(tmp_path / "zip"), format="parquet", partitioning="hive").to_table()
    seqs, data = table.column("seq").to_pylist(), table.column("data").to_pylist()
    exported = sorted(zip(seqs, data, strict=True))
    assert exported == [(p.seq, p.data) for p in published]


def test_streaming_reader_delivers_new_messages_in_micro_batches(
    spark: Any, world: World, tmp_path: Path
) -> None:
    url = world.agent.url

    async def create_and_publish(first: int, n: int, create: bool = False) -> None:
        nc = await nats.connect(url)
        js = nc.jetstream()
        if create:
            await js.add_stream(name="TICKS", subjects=["ticks.>"])
        for i in range(first, first + n):
            await js.publish(f"ticks.{i % 2}", b"tick %d" % i, headers={"N": str(i)})
        await nc.close()

    asyncio.run(create_and_publish(0, 5, create=True))
    stream_df = (
        spark.readStream.format("infinistream")
        .option("store_dir", str(world.store_dir))
        .option("stream", "TICKS")
        .load()
    )
    batches: list[tuple[int, list[int]]] = []

    def collect(batch: Any, batch_id: int) -> None:
        seqs = sorted(r.seq for r in batch.select("seq").collect())
        if seqs:
            batches.append((batch_id, seqs))

    query = (
        stream_df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        _wait(lambda: sum(len(s) for _, s in batches) >= 5)
        asyncio.run(create_and_publish(5, 3))
        _wait(lambda: sum(len(s) for _, s in batches) >= 8)
        # Let the last batch commit to the checkpoint, or a restart would replay it.
        query.processAllAvailable()
    finally:
        query.stop()
    assert [seq for _, seqs in batches for seq in seqs] == list(range(1, 9))
    assert len(batches) >= 2
    assert batches[0][1] == [1, 2, 3, 4, 5]

    # Restarted from its checkpoint, with Trigger.AvailableNow and a per-batch limit: only the
    # messages published since, in batches of at most 2 sequences.
    asyncio.run(create_and_publish(8, 5))
    batches.clear()
    (
        spark.readStream.format("infinistream")
        .option("store_dir", str(world.store_dir))
        .option("stream", "TICKS")
        .option("maxRecordsPerBatch", "2")
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
        .awaitTermination(60)
    )
    assert [seq for _, seqs in batches for seq in seqs] == list(range(9, 14))
    assert all(len(seqs) <= 2 for _, seqs in batches)


def _wait(predicate: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("streaming query did not deliver in time")
        time.sleep(0.1)


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_compacted_and_partly_refused_sections(tmp_path: Path, codec: str) -> None:
    """Sections whose sequences have gaps (compaction output: explicit seqs and timestamps) and
    sections with records refused at commit, cut into many pieces (plain sections) or read
    whole (compressed ones): no Spark needed."""
    from array import array

    from infinistream.pipeline.reading import ReadSpec, plan_read, read_task
    from infinistream.storage import (
        CODEC_NONE,
        CODEC_ZSTD,
        ObjectBuilder,
        ObjectStore,
        encode_record,
    )
    from infinistream.stream.loader import EntryRef, StreamSnapshot
    from infinistream.stream.records import IndexEntry, StreamKeys, StreamState

    options = StoreOptions(objects=(tmp_path / "objects").as_uri(), metadata="sqlite://:memory:")
    objects = ObjectStore.from_url(options.objects)
    names = ["a.x", "a.y"]

    def section(obj: str, count: int, tag: str) -> tuple[int, int, list[bytes]]:
        records = [
            encode_record(
                names[i % 2],
                b"NATS/1.0\r\nI: %d\r\n\r\n" % i if i % 3 else b"",
                tag.encode() + b"%d" % i,
            )
            for i in range(count)
        ]
        builder = ObjectBuilder()
        ref = builder.add_section("S", records, section_codec)
        run(objects.put(obj, builder.finish()))
        return ref.offset, ref.length, records

    section_codec = CODEC_ZSTD if codec == "zstd" else CODEC_NONE

    # Compacted: 8 live records holding seqs 10..24 with gaps, stamps 1000 ns apart.
    seqs = [10, 11, 13, 14, 17, 20, 21, 24]
    off, length, recs = section("g/c1", len(seqs), "c")
    compacted = IndexEntry(
        obj="g/c1",
        offset=off,
        length=length,
        first_seq=10,
        ts=0,
        subjects=names,
        subject_ids=array("I", [i % 2 for i in range(8)]).tobytes(),
        lengths=array("I", [len(r) for r in recs]).tobytes(),
        seqs=array("Q", seqs).tobytes(),
        timestamps=array("Q", [5_000_000 + s * 1000 for s in seqs]).tobytes(),
        codec=section_codec,
    )
    # An agent's section of 6 records, of which records 1 and 4 were refused: seqs 25..28.
    off, length, recs = section("g/l0", 6, "l")
    refused = IndexEntry(
        obj="g/l0",
        offset=off,
        length=length,
        first_seq=25,
        ts=9_000_000,
        subjects=names,
        subject_ids=array("I", [i % 2 for i in range(6)]).tobytes(),
        lengths=array("I", [len(r) for r in recs]).tobytes(),
        skipped=[1, 4],
        codec=section_codec,
    )
    keys = StreamKeys("default", "S")
    snapshot = StreamSnapshot(
        name="S",
        keys=keys,
        config=None,  # type: ignore[arg-type]  # reading needs no config
        created_ns=0,
        state=StreamState(uid="u", first_seq=11, last_seq=28),
        state_revision=1,
        entries=[
            EntryRef(keys.index(10), 1, compacted),
            EntryRef(keys.index(25), 1, refused),
        ],
        tombstones=frozenset({20, 26}),
    )

    def read(spec: ReadSpec, partition_bytes: int = 40) -> list[tuple[int, str, bytes, Any, Any]]:
        tasks = plan_read(snapshot, options, spec, partition_bytes=partition_bytes)
        out = []
        for task in tasks:
            for batch in read_task(task):
                out += [
                    (r["seq"], r["subject"], r["data"], r["headers"], r["time"])
                    for r in batch.to_pylist()
                ]
        return out

    rows = read(ReadSpec())
    # seq 10 is below first_seq, 20 and 26 are tombstoned; 25..28 are records 0, 2, 3, 5.
    assert [r[0] for r in rows] == [11, 13, 14, 17, 21, 24, 25, 27, 28]
    assert [r[2] for r in rows] == [b"c1", b"c2", b"c3", b"c4", b"c6", b"c7", b"l0", b"l3", b"l5"]
    assert [r[1] for r in rows] == ["a.y", "a.x", "a.y", "a.x", "a.x", "a.y", "a.x", "a.y", "a.y"]
    assert rows[0][3] == [("I", ["1"])] and rows[6][3] is None
    stamps = [int(r[4].timestamp() * 1_000_000) for r in rows]
    assert stamps[:6] == [5_000 + s for s in (11, 13, 14, 17, 21, 24)]
    assert stamps[6:] == [9_000, 9_000, 9_000]  # 9_000_000 ns + position, in microseconds
    # The same rows in one task, and with filters.
    assert read(ReadSpec(), partition_bytes=1 << 20) == rows
    assert [r[0] for r in read(ReadSpec(subject="a.x"))] == [13, 17, 21, 25]
    assert [r[0] for r in read(ReadSpec(start_seq=14, end_seq=25))] == [14, 17, 21, 24, 25]
    window = ReadSpec(start_ns=5_000_000 + 14_000, end_ns=5_000_000 + 21_000)
    assert [r[0] for r in read(window)] == [14, 17]

    pieces = [
        p for t in plan_read(snapshot, options, ReadSpec(), partition_bytes=40) for p in t.pieces
    ]
    if section_codec == CODEC_NONE:
        assert len(pieces) > 2  # cut by bytes
        return
    # A compressed section is one piece, fetched whole: one GET per section.
    assert [(p.obj, p.offset, p.length) for p in pieces] == [
        (e.obj, e.offset, e.length) for e in (compacted, refused)
    ]
    # A compressed section that does not decode (here its frame's magic is damaged) loses its
    # rows, reported as one problem; the rest is read. (Damage that decodes is caught record
    # by record, as in a plain section: tests/storage/test_segment.py.)
    damage_object(tmp_path / "objects", "g/l0", refused.offset, 0x40)
    problems: list[Any] = []
    tasks = plan_read(snapshot, options, ReadSpec(), partition_bytes=1 << 20)
    rows = [
        r["seq"]
        for t in tasks
        for b in read_task(t, on_problem=problems.append)
        for r in b.to_pylist()
    ]
    assert rows == [11, 13, 14, 17, 21, 24]
    assert [(p.obj, p.first_seq, p.last_seq) for p in problems] == [("g/l0", 25, 28)]
    with pytest.raises(Exception, match="g/l0"):
        for t in tasks:
            list(read_task(t, fail_on_corrupt=True))


def test_stream_reader_offsets(world: World) -> None:
    """The streaming reader's offset protocol, called as Spark calls it (no Spark needed)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from infinistream.pipeline.datasource import InfiniStreamDataSource
    from infinistream.pipeline.reading import ReadError

    async def js_do(*steps: tuple[str, Any]) -> None:
        nc = await nats.connect(world.agent.url)
        js = nc.jetstream()
        for op, arg in steps:
            if op == "create":
                await js.add_stream(name="OFFS", subjects=["offs.>"])
            elif op == "delete":
                await js.delete_stream("OFFS")
            else:
                for i in range(arg):
                    await js.publish("offs.x", b"%d" % i)
        await nc.close()

    asyncio.run(js_do(("create", None), ("publish", 4)))
    opts = {"store_dir": str(world.store_dir), "stream": "OFFS", "maxRecordsPerBatch": "3"}
    reader = InfiniStreamDataSource(opts).streamReader(InfiniStreamDataSource(opts).schema())
    start = reader.initialOffset()
    assert start["seq"] == 1
    assert reader.getDefaultReadLimit() == ReadMaxRows(3)
    end = reader.latestOffset(start, ReadMaxRows(3))
    assert end["seq"] == 4
    assert reader.latestOffset(start, ReadAllAvailable())["seq"] == 5
    parts = reader.partitions(start, end)
    rows = [r for p in parts for b in reader.read(p) for r in b.to_pylist()]
    assert [r["seq"] for r in rows] == [1, 2, 3]
    assert reader.partitions(end, end) == []

    # Trigger.AvailableNow: nothing published after the query started is read.
    reader.prepareForTriggerAvailableNow()
    asyncio.run(js_do(("publish", 2)))
    assert reader.latestOffset(end, ReadAllAvailable())["seq"] == 5
    latest = InfiniStreamDataSource({**opts, "startingOffsets": "latest"})
    assert latest.streamReader(latest.schema()).initialOffset()["seq"] == 7

    # The stream deleted and created again: the query fails instead of waiting for seq 5.
    asyncio.run(js_do(("delete", None), ("create", None), ("publish", 9)))
    with pytest.raises(ReadError, match="deleted and created again"):
        reader.latestOffset(end, ReadAllAvailable())
