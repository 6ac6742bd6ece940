"""The write buffer: publishes in, one object and one commit per flush, answers out."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from infinistream.jetstream import errors
from infinistream.jetstream.api import StreamConfig
from infinistream.metadata.kv import Op, Put
from infinistream.metadata.sqlite import SqliteMetadataStore
from infinistream.storage import (
    CODEC_NONE,
    CODEC_ZSTD,
    ObjectStore,
    SectionCache,
    decode_records,
    parse_object,
    read_directory,
)
from infinistream.storage.packcommits import commit_records
from infinistream.stream import records, write_buffer
from infinistream.stream.catalog import Catalog
from infinistream.stream.committer import Committer, SectionWrite, StagedObject
from infinistream.stream.compression import StreamCodecs
from infinistream.stream.config import normalize
from infinistream.stream.damage import DamageLog
from infinistream.stream.publish_rules import Outcome
from infinistream.stream.put_budget import PutBudget
from infinistream.stream.reader import MessageReader
from infinistream.stream.records import (
    SectionEntry,
    StreamKeys,
    StreamRecord,
    catalog_key,
    decode_entry,
)
from infinistream.stream.sections import Segment
from infinistream.stream.write_buffer import AckSink, SubjectRun, WriteBuffer, answers, error_ack
from support.streamstores import GROUP, Sink, make_streams

# -- answers ------------------------------------------------------------------------------------


def test_answers_spell_pubacks_duplicates_and_errors_as_nats_server() -> None:
    err = errors.stream_message_exceeds_maximum()
    got = answers("S", [Outcome(seq=7), Outcome(seq=3, duplicate=True), Outcome(error=err)])
    assert got == [
        b'{"stream":"S","seq":7}',
        b'{"stream":"S","seq":3,"duplicate": true}',
        error_ack("S", err),
    ]
    assert json.loads(got[2]) == {
        "error": {"code": 400, "err_code": 10054, "description": err.description},
        "stream": "S",
        "seq": 0,
    }


def test_answers_keep_a_percent_sign_in_the_stream_name() -> None:
    assert answers("100%d", [Outcome(seq=1)]) == [b'{"stream":"100%d","seq":1}']


# -- a whole flush ------------------------------------------------------------------------------


class FailingStore(ObjectStore):
    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        raise OSError("disk on fire")


@pytest.fixture
async def meta(tmp_path: Path) -> AsyncIterator[SqliteMetadataStore]:
    store = SqliteMetadataStore(tmp_path / "meta.db")
    yield store
    await store.close()


def buffer(
    objects: ObjectStore,
    catalog: Catalog,
    sink: AckSink,
    budget: PutBudget | None = None,
    batch_bytes: int = 4 * 1024 * 1024,
    cache: SectionCache[bytes] | None = None,
) -> WriteBuffer:
    committer = Committer(catalog.meta, catalog)
    return WriteBuffer(
        objects,
        committer,
        SectionCache(1 << 20) if cache is None else cache,
        sink,
        group=GROUP,
        agent_id="test",
        budget=budget,
        batch_bytes=batch_bytes,
        codec_of=StreamCodecs(catalog),
    )


async def test_one_flush_answers_each_stream_in_order(meta: SqliteMetadataStore) -> None:
    catalog = await make_streams(
        meta,
        A=StreamConfig(name="A", subjects=["a.>"], max_msg_size=40),
        B=StreamConfig(name="B", subjects=["b.>"]),
    )
    sink = Sink()
    wb = buffer(ObjectStore.from_url("memory://"), catalog, sink)
    wb.append("A", "a.1", None, b"one", "r1")
    wb.append("B", "b.1", None, b"two", "r2")
    wb.append("A", "a.2", None, b"3" * 41, "r3")  # over max_msg_size
    wb.append("A", "a.3", None, b"four", None)  # asked for no answer
    wb.append("A", "a.4", b"NATS/1.0\r\nNats-Msg-Id: x\r\n\r\n", b"", "r5")
    await wb.drain()
    assert [replies for replies, _ in sink.calls] == [["r1", "r3", "r5"], ["r2"]]
    got = sink.answers()
    assert got["r1"] == {"stream": "A", "seq": 1}
    assert got["r2"] == {"stream": "B", "seq": 1}
    assert got["r3"]["error"]["err_code"] == 10054
    assert got["r5"] == {"stream": "A", "seq": 3}
    assert (wb.stats.flushes, wb.stats.messages) == (1, 5)


async def test_what_runs_after_an_answer_sees_what_it_acked(meta: SqliteMetadataStore) -> None:
    """A publisher's ack leaves the moment its batch is durable, and the bookkeeping after it
    (the stream's view, the listeners that wake consumers) runs in the same loop turn: a
    request the loop handles after the ack, as the publisher's next one, finds the message."""
    catalog = await make_streams(meta, A=StreamConfig(name="A", subjects=["a.>"]))
    sink = Sink()
    seen_next: list[int | None] = []

    def next_request() -> None:
        view = catalog.cached_view("A")
        seen_next.append(None if view is None else view.last_seq)

    def ack(replies: list[str | bytes], payloads: list[bytes]) -> None:
        sink(replies, payloads)
        asyncio.get_running_loop().call_soon(next_request)

    wb = buffer(ObjectStore.from_url("memory://"), catalog, ack)
    announced: list[int] = []
    wb.on_commit = lambda streams: announced.append(len(sink.calls))
    wb.append("A", "a.1", None, b"one", "r1")
    await wb.drain()
    await asyncio.sleep(0)
    assert sink.answers()["r1"] == {"stream": "A", "seq": 1}
    assert announced == [1]
    assert seen_next == [1]


async def test_failed_object_write_answers_every_publisher_with_an_error(
    meta: SqliteMetadataStore,
) -> None:
    catalog = await make_streams(meta, A=StreamConfig(name="A", subjects=["a.>"]))
    sink = Sink()
    wb = buffer(FailingStore.from_url("memory://"), catalog, sink)
    wb.append("A", "a.1", None, b"one", "r1")
    wb.append("A", "a.2", None, b"two", None)
    wb.append("A", "a.3", None, b"three", "r3")
    await wb.drain()
    got = sink.answers()
    assert sorted(got) == ["r1", "r3"]
    assert all(a["error"]["err_code"] == 10077 and a["seq"] == 0 for a in got.values())
    assert wb.stats.failed_batches == 1


class FullDisk(ObjectStore):
    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f"/var/lib/objects/{key}")


class BrokenCommitter(Committer):
    async def commit_sections(
        self,
        sections: list[SectionWrite],
        staged: StagedObject | None = None,
        durable: Callable[[dict[str, list[Outcome]]], None] | None = None,
    ) -> dict[str, list[Outcome]]:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")


async def test_a_failed_write_is_told_without_exception_text_or_path(
    meta: SqliteMetadataStore,
) -> None:
    """Publishers learn what failed and the system's reason; the exception (which can name
    files and code) goes to the log only."""
    catalog = await make_streams(meta, A=StreamConfig(name="A", subjects=["a.>"]))
    sink = Sink()
    wb = buffer(FullDisk.from_url("memory://"), catalog, sink)
    wb.append("A", "a.1", None, b"one", "r1")
    await wb.drain()
    error = sink.answers()["r1"]["error"]
    assert error == {
        "code": 503,
        "err_code": 10077,
        "description": "object storage write failed: No space left on device",
    }
    sink = Sink()
    wb = buffer(ObjectStore.from_url("memory://"), catalog, sink)
    wb.committer = BrokenCommitter(catalog.meta, catalog)
    wb.append("A", "a.1", None, b"one", "r1")
    await wb.drain()
    assert sink.answers()["r1"]["error"]["description"] == "metadata commit failed"


async def test_an_atomic_batch_larger_than_a_flush_is_not_split(
    meta: SqliteMetadataStore,
) -> None:
    catalog = await make_streams(
        meta, A=StreamConfig(name="A", subjects=["a.>"], allow_atomic=True)
    )
    sink = Sink()
    wb = buffer(ObjectStore.from_url("memory://"), catalog, sink, batch_bytes=1000)
    hdr = b"NATS/1.0\r\nNats-Batch-Id: b\r\n\r\n"
    wb.append("A", "a.0", None, b"before", None)
    wb.append_batch("A", [(f"a.{i}", hdr, b"x" * 100) for i in range(1, 31)], "r", "b")
    await wb.drain()
    # Over batch_bytes many times, but one flush: one commit took the whole batch.
    assert wb.stats.flushes == 1
    assert sink.answers() == {"r": {"stream": "A", "seq": 31, "batch": "b", "count": 30}}


# -- compression ---------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [50, 3])  # built on the loop, and (over 256 KiB) on a thread
async def test_a_compressed_stream_gets_a_compressed_section_in_the_same_object(
    meta: SqliteMetadataStore, n: int
) -> None:
    catalog = await make_streams(
        meta,
        Z=StreamConfig(name="Z", subjects=["z.>"], compression="s2"),
        P=StreamConfig(name="P", subjects=["p.>"]),
    )
    objects = ObjectStore.from_url("memory://")
    cache: SectionCache[bytes] = SectionCache(16 << 20)
    sink = Sink()
    wb = buffer(objects, catalog, sink, cache=cache)

    def payload(i: int) -> bytes:
        return (b'{"status": "shipped", "note": "%d"}' % i) * (1 if n > 10 else 5000)

    for i in range(n):
        wb.append("Z", f"z.{i % 4}", None, payload(i), f"z{i}")
        wb.append("P", f"p.{i % 4}", None, payload(i), f"p{i}")
    await wb.drain()
    assert wb.stats.objects == 1
    assert sink.answers()[f"z{n - 1}"] == {"stream": "Z", "seq": n}

    (key,) = [info.key for info in await objects.list("")]
    refs = {r.stream: r for r in parse_object(await objects.get(key))}
    assert (refs["Z"].codec, refs["P"].codec) == (CODEC_ZSTD, CODEC_NONE)
    assert refs["Z"].plain_length == refs["P"].length  # the same records, stored two ways
    assert refs["Z"].length * 4 < refs["P"].length

    # Metadata says how each section is stored; the cache holds plain bytes for both.
    segments = {}
    for name in ("Z", "P"):
        (item,) = await meta.range(StreamKeys(GROUP, name).index_prefix)
        entry = decode_entry(item.value)
        assert isinstance(entry, SectionEntry) and entry.codec == refs[name].codec
        assert (entry.offset, entry.length) == (refs[name].offset, refs[name].length)
        assert entry.plain_length == refs[name].records_length
        assert (entry.dir_offset, entry.dir_length) == (
            refs[name].index_offset,
            refs[name].index_length,
        )
        cached = cache.get(key, entry.offset)
        assert cached is not None and len(decode_records(cached, n)) == n
        directory = await read_directory(objects, key, entry.dir_offset, entry.dir_length)
        segments[name] = Segment.from_directory(item.key, entry, directory)

    # A reader with an empty cache: one GET of the whole compressed section, then the cache.
    reader = MessageReader(objects, SectionCache(16 << 20), DamageLog(), whole_section_bytes=64)
    before = objects.stats.snapshot()
    got = await reader.read_run(segments["Z"], 2, 3)
    assert [(m.seq, m.subject, m.data) for m in got] == [
        (2, "z.1", payload(1)),
        (3, "z.2", payload(2)),
    ]
    delta = objects.stats - before
    assert (delta.gets, delta.bytes_got) == (1, refs["Z"].length)
    assert [m.data for m in await reader.read_run(segments["Z"], 1, n)] == [
        payload(i) for i in range(n)
    ]
    assert (objects.stats - before).gets == 1


async def test_a_stream_updated_to_compression_compresses_from_the_next_flush(
    meta: SqliteMetadataStore,
) -> None:
    catalog = await make_streams(meta, A=StreamConfig(name="A", subjects=["a.>"]))
    objects = ObjectStore.from_url("memory://")
    wb = buffer(objects, catalog, Sink())
    wb.append("A", "a.1", None, b"x" * 500, None)
    await wb.drain()
    # The update as StreamApi commits it: a new config record and a catalog bump.
    config = normalize(StreamConfig(name="A", subjects=["a.>"], compression="s2"))
    record = StreamRecord(config=config, created_ns=1, uid="uid-A")
    ops: list[Op] = [Put(StreamKeys(GROUP, "A").config, records.encode(record))]
    assert (await meta.txn([], [*ops, Put(catalog_key(GROUP), b"2")])).succeeded
    await catalog.refresh()
    wb.append("A", "a.1", None, b"x" * 500, None)
    await wb.drain()
    entries = [decode_entry(i.value) for i in await meta.range(StreamKeys(GROUP, "A").index_prefix)]
    assert [e.codec for e in entries] == [CODEC_NONE, CODEC_ZSTD]


# -- when batches go: group commit within the PUT budget ---------------------------------------


class GatedStore(ObjectStore):
    """A memory store whose PUTs wait for the test to open the gate, so that a flush is in
    flight for as long as the test needs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writing = asyncio.Event()
        self.gate = asyncio.Event()

    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        self.writing.set()
        await self.gate.wait()
        await super().put(key, data)


@pytest.mark.parametrize("messages", [1, 64])
async def test_a_flush_to_a_local_disk_takes_one_sync_small_or_large(
    meta: SqliteMetadataStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, messages: int
) -> None:
    # Its object is staged in its pack and its commit recorded after it: one fdatasync of the
    # pack makes both durable, where a put and a durable commit would sync twice.
    catalog = await make_streams(meta, A=StreamConfig(name="A", subjects=["a.>"]))
    sink = Sink()
    root = tmp_path / "objects"
    objects = ObjectStore.from_url(root.as_uri())
    wb = buffer(objects, catalog, sink)
    try:
        wb.append("A", "a.1", None, b"first", "r0")  # the pack is made (and synced) here
        await wb.drain()
        synced: list[int] = []
        real = os.fdatasync

        def fdatasync(fd: int) -> None:
            synced.append(fd)
            real(fd)

        monkeypatch.setattr(os, "fdatasync", fdatasync)
        for n in range(messages):
            wb.append("A", "a.1", None, os.urandom(4096), f"r{n + 1}")
        await wb.drain()
        assert wb.stats.flushes == 2
        assert len(synced) == 1
        assert len(list(commit_records(str(root)))) == 2
        assert sink.answers()[f"r{messages}"] == {"stream": "A", "seq": messages + 1}
    finally:
        objects.close()


async def test_a_lone_publish_goes_at_once_on_an_idle_agent(meta: SqliteMetadataStore) -> None:
    catalog = await make_streams(meta, A=StreamConfig(name="A", subjects=["a.>"]))
    sink = Sink()
    # A budget of one PUT a minute: only its burst lets anything go soon.
    wb = buffer(ObjectStore.from_url("memory://"), catalog, sink, PutBudget(rate=1 / 60))
    started = time.monotonic()
    wb.append("A", "a.1", None, b"one", "r1")
    while not sink.calls:
        await asyncio.sleep(0.001)
        assert time.monotonic() - started < 5
    assert time.monotonic() - started < 1
    assert sink.answers() == {"r1": {"stream": "A", "seq": 1}}


async def test_publishes_during_a_flush_go_together_when_it_has_committed(
    meta: SqliteMetadataStore,
) -> None:
    catalog = await make_streams(meta, A=StreamConfig(name="A", subjects=["a.>"]))
    sink = Sink()
    store = GatedStore.from_url("memory://")
    assert isinstance(store, GatedStore)
    wb = buffer(store, catalog, sink, PutBudget(rate=1000, burst=10))
    wb.append("A", "a.1", None, b"1", "r1")
    await asyncio.wait_for(store.writing.wait(), 10)  # the first flush is writing now
    for i in range(2, 12):
        wb.append("A", "a.x", None, b"n", f"r{i}")
        await asyncio.sleep(0.001)
    store.gate.set()
    await wb.drain()
    # One flush for the first publish, one for everything that arrived while it was written.
    assert [replies for replies, _ in sink.calls] == [["r1"], [f"r{i}" for i in range(2, 12)]]
    assert wb.stats.flushes == 2


async def test_an_empty_budget_holds_the_next_flush_back(meta: SqliteMetadataStore) -> None:
    catalog = await make_streams(meta, A=StreamConfig(name="A", subjects=["a.>"]))
    sink = Sink()
    wb = buffer(ObjectStore.from_url("memory://"), catalog, sink, PutBudget(rate=5, burst=1))
    wb.append("A", "a.1", None, b"1", "r1")
    while not sink.calls:
        await asyncio.sleep(0.001)
    started = time.monotonic()
    wb.append("A", "a.2", None, b"2", "r2")
    while len(sink.calls) < 2:
        await asyncio.sleep(0.001)
    # The burst was spent on the first: the second waits for the budget (1/5 s), not longer.
    assert 0.1 < time.monotonic() - started < 1.0


async def test_a_full_batch_goes_at_once_whatever_the_budget(meta: SqliteMetadataStore) -> None:
    catalog = await make_streams(meta, A=StreamConfig(name="A", subjects=["a.>"]))
    sink = Sink()
    wb = buffer(
        ObjectStore.from_url("memory://"), catalog, sink, PutBudget(rate=1 / 60), batch_bytes=1024
    )
    wb.append("A", "a.0", None, b"0", "r0")  # spends the burst
    while not sink.calls:
        await asyncio.sleep(0.001)
    started = time.monotonic()
    for i in range(1, 40):
        wb.append("A", "a.x", None, b"y" * 100, f"r{i}")
    while sum(len(replies) for replies, _ in sink.calls) < 10:
        await asyncio.sleep(0.001)
    # The budget is empty for a minute, but a batch over batch_bytes did not wait for it.
    assert time.monotonic() - started < 5
    await wb.drain()
    assert len(sink.answers()) == 40


class RecordingStore(ObjectStore):
    """A memory store that notes when each PUT starts and ends."""

    events: list[str]

    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        self.events.append("put")
        await asyncio.sleep(0.02)
        await super().put(key, data)
        self.events.append("stored")


class SlowCommitter(Committer):
    """A committer whose commits take a while, noting when each starts and ends."""

    events: list[str]

    async def commit_sections(
        self,
        sections: list[SectionWrite],
        staged: StagedObject | None = None,
        durable: Callable[[dict[str, list[Outcome]]], None] | None = None,
    ) -> dict[str, list[Outcome]]:
        self.events.append("commit")
        await asyncio.sleep(0.05)
        outcomes = await super().commit_sections(sections, staged, durable)
        self.events.append("committed")
        return outcomes


async def test_the_next_batch_is_written_while_the_one_before_commits(
    meta: SqliteMetadataStore,
) -> None:
    catalog = await make_streams(meta, A=StreamConfig(name="A", subjects=["a.>"]))
    sink = Sink()
    events: list[str] = []
    objects = RecordingStore.from_url("memory://")
    objects.events = events
    committer = SlowCommitter(catalog.meta, catalog)
    committer.events = events
    wb = WriteBuffer(
        objects,
        committer,
        SectionCache(1 << 20),
        sink,
        group=GROUP,
        agent_id="test",
        budget=PutBudget(rate=1000, burst=10),
    )
    wb.append("A", "a.1", None, b"1", "r1")
    await asyncio.sleep(0.005)  # the first object is being written
    wb.append("A", "a.2", None, b"2", "r2")
    while len(sink.calls) < 2:
        await asyncio.sleep(0.001)
    # The second batch's PUT starts as soon as the first object is stored, before the first
    # commit ends; the commits themselves still come one after the other, in batch order.
    assert events == [
        *("put", "stored", "put", "commit", "stored"),
        *("committed", "commit", "committed"),
    ]
    assert [replies for replies, _ in sink.calls] == [["r1"], ["r2"]]
    assert sink.answers() == {"r1": {"stream": "A", "seq": 1}, "r2": {"stream": "A", "seq": 2}}


async def test_a_run_of_one_subject_is_stored_as_lone_publishes_are(
    meta: SqliteMetadataStore,
) -> None:
    catalog = await make_streams(meta, A=StreamConfig(name="A", subjects=["a.>"]))
    sink = Sink()
    objects = ObjectStore.from_url("memory://")
    wb = buffer(objects, catalog, sink)
    wb.append_run(
        "A", SubjectRun("a.x", b"a.x", [b"_INBOX.1", None, b"_INBOX.3"], [b"one", b"two", b""])
    )
    wb.append("A", "a.y", None, b"four", "_INBOX.4")
    await wb.drain()
    [(replies, _)] = sink.calls
    assert replies == [b"_INBOX.1", b"_INBOX.3", "_INBOX.4"]
    assert [json.loads(a)["seq"] for a in sink.calls[0][1]] == [1, 3, 4]
    [info] = await objects.list()
    [section] = parse_object(await objects.get(info.key))
    stored = decode_records((await objects.get(info.key))[section.offset : section.end])
    assert [(r.subject, r.headers, r.data) for r in stored] == [
        ("a.x", b"", b"one"),
        ("a.x", b"", b"two"),
        ("a.x", b"", b""),
        ("a.y", b"", b"four"),
    ]


@pytest.mark.parametrize("more", [True, False])
async def test_a_run_with_more_on_the_way_waits_for_it(
    meta: SqliteMetadataStore, monkeypatch: pytest.MonkeyPatch, more: bool
) -> None:
    monkeypatch.setattr(write_buffer, "REFILL_WAIT", 3600.0)
    catalog = await make_streams(meta, A=StreamConfig(name="A", subjects=["a.>"]))
    sink = Sink()
    wb = buffer(ObjectStore.from_url("memory://"), catalog, sink)
    wb.append_run("A", SubjectRun("a.x", b"a.x", [b"r1"], [b"one"]), more=more)
    # The loop's next turns: reads that bring the rest, the last with nothing after it.
    for _ in range(3):
        await asyncio.sleep(0)
    wb.append_run("A", SubjectRun("a.x", b"a.x", [b"r2"], [b"two"]), more=more)
    await asyncio.sleep(0)
    wb.append_run("A", SubjectRun("a.x", b"a.x", [b"r3"], [b"three"]))
    await wb.drain()
    # The rest joins the flush only when the runs before said more was on their way; a run
    # that did not goes at once, as a lone publish does.
    assert sink.calls[0][0] == ([b"r1", b"r2", b"r3"] if more else [b"r1"])
    assert sink.answers() == {
        b"r1": {"stream": "A", "seq": 1},
        b"r2": {"stream": "A", "seq": 2},
        b"r3": {"stream": "A", "seq": 3},
    }


async def test_more_on_the_way_is_waited_for_a_moment_only(meta: SqliteMetadataStore) -> None:
    catalog = await make_streams(meta, A=StreamConfig(name="A", subjects=["a.>"]))
    sink = Sink()
    wb = buffer(ObjectStore.from_url("memory://"), catalog, sink)
    wb.append_run("A", SubjectRun("a.x", b"a.x", [b"r1"], [b"one"]), more=True)
    # Nothing follows: the flush goes by itself once REFILL_WAIT has passed.
    while not sink.calls:
        await asyncio.sleep(0.001)
    assert sink.answers() == {b"r1": {"stream": "A", "seq": 1}}
    assert wb.stats.flushes == 1


async def test_a_large_batch_waits_one_turn_only_for_more(
    meta: SqliteMetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(write_buffer, "REFILL_WAIT", 3600.0)
    monkeypatch.setattr(write_buffer, "REFILL_BYTES", 16)
    catalog = await make_streams(meta, A=StreamConfig(name="A", subjects=["a.>"]))
    sink = Sink()
    wb = buffer(ObjectStore.from_url("memory://"), catalog, sink)
    # Past REFILL_BYTES already: its object is written off the loop while more is read.
    wb.append_run("A", SubjectRun("a.x", b"a.x", [b"r1"], [b"x" * 32]), more=True)
    await asyncio.sleep(0)
    wb.append_run("A", SubjectRun("a.x", b"a.x", [b"r2"], [b"two"]), more=True)
    for _ in range(3):
        await asyncio.sleep(0)
    wb.append_run("A", SubjectRun("a.x", b"a.x", [b"r3"], [b"three"]))
    await wb.drain()
    assert sink.calls[0][0] == [b"r1", b"r2"]
