"""The write buffer: publishes in, one object and one commit per flush, answers out."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from infinistream.jetstream import errors
from infinistream.jetstream.api import StreamConfig
from infinistream.metadata.sqlite import SqliteMetadataStore
from infinistream.storage import ObjectStore, SectionCache
from infinistream.stream.catalog import Catalog
from infinistream.stream.committer import Committer
from infinistream.stream.publish_rules import Outcome
from infinistream.stream.put_budget import PutBudget
from infinistream.stream.write_buffer import WriteBuffer, answers, error_ack
from streamstores import GROUP, Sink, make_streams

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
    sink: Sink,
    budget: PutBudget | None = None,
    batch_bytes: int = 4 * 1024 * 1024,
) -> WriteBuffer:
    committer = Committer(catalog.meta, catalog)
    cache: SectionCache[bytes] = SectionCache(1 << 20)
    return WriteBuffer(
        objects,
        committer,
        cache,
        sink,
        group=GROUP,
        agent_id="test",
        budget=budget,
        batch_bytes=batch_bytes,
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


# -- when batches go: group commit within the PUT budget ---------------------------------------


class SlowStore(ObjectStore):
    """A memory store whose PUTs take a while, so that a flush is in flight for a moment."""

    delay = 0.05

    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        await asyncio.sleep(self.delay)
        await super().put(key, data)


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
    wb = buffer(SlowStore.from_url("memory://"), catalog, sink, PutBudget(rate=1000, burst=10))
    wb.append("A", "a.1", None, b"1", "r1")
    await asyncio.sleep(0.01)  # the first flush is writing now
    for i in range(2, 12):
        wb.append("A", "a.x", None, b"n", f"r{i}")
        await asyncio.sleep(0.001)
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
