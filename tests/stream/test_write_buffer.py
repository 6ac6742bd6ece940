"""The write buffer: publishes in, one object and one commit per flush, answers out."""

from __future__ import annotations

import json
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


def buffer(objects: ObjectStore, catalog: Catalog, sink: Sink) -> WriteBuffer:
    committer = Committer(catalog.meta, catalog)
    cache: SectionCache[bytes] = SectionCache(1 << 20)
    return WriteBuffer(objects, committer, cache, sink, group=GROUP, agent_id="test")


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
    committer = Committer(catalog.meta, catalog)
    cache: SectionCache[bytes] = SectionCache(1 << 20)
    wb = WriteBuffer(
        ObjectStore.from_url("memory://"),
        committer,
        cache,
        sink,
        group=GROUP,
        agent_id="test",
        batch_bytes=1000,
    )
    hdr = b"NATS/1.0\r\nNats-Batch-Id: b\r\n\r\n"
    wb.append("A", "a.0", None, b"before", None)
    wb.append_batch("A", [(f"a.{i}", hdr, b"x" * 100) for i in range(1, 31)], "r", "b")
    await wb.drain()
    # Over batch_bytes many times, but one flush: one commit took the whole batch.
    assert wb.stats.flushes == 1
    assert sink.answers() == {"r": {"stream": "A", "seq": 31, "batch": "b", "count": 30}}
