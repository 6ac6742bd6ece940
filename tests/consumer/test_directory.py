"""The push directory: entries kept in step with consumers' records, reread when they change."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from infinistream.consumer.directory import PushDirectory, target_ops
from infinistream.consumer.records import ConsumerKeys, PushTarget
from infinistream.metadata.sqlite import SqliteMetadataStore
from infinistream.stream.records import StreamKeys


@pytest.fixture
async def meta(tmp_path: Path) -> AsyncIterator[SqliteMetadataStore]:
    store = SqliteMetadataStore(tmp_path / "meta.db")
    yield store
    await store.close()


def keys(stream: str, name: str) -> ConsumerKeys:
    return ConsumerKeys(StreamKeys("g", stream), name)


async def test_entries_follow_targets_and_agents_reread_them(meta: SqliteMetadataStore) -> None:
    here, there = PushDirectory(meta, "g"), PushDirectory(meta, "g")
    assert await here.refresh() == []
    a = PushTarget("in.a", "uid-a")
    assert target_ops("g", keys("S", "a"), a, a) == []  # unchanged: nothing to write
    await meta.txn([], target_ops("g", keys("S", "a"), None, a))
    await meta.txn([], target_ops("g", keys("T", "b"), None, PushTarget("in.b", "uid-b")))
    assert sorted(await there.refresh()) == [("S", "a"), ("T", "b")]
    assert await there.refresh() == []  # the marker has not moved: not read again
    assert there.target("S", "a") == a
    # Moved, and deleted.
    moved = PushTarget("in.moved", "uid-a")
    await meta.txn([], target_ops("g", keys("S", "a"), a, moved))
    await meta.txn([], target_ops("g", keys("T", "b"), PushTarget("in.b", "uid-b"), None))
    assert await there.refresh() == [("S", "a")]
    assert there.target("S", "a") == moved and there.target("T", "b") is None
    assert there.delivering_to("in.a") == []
    assert there.delivering_to("in.moved") == [("S", "a")]


async def test_deliver_subjects_found_by_subscription(meta: SqliteMetadataStore) -> None:
    directory = PushDirectory(meta, "g")
    directory.set("S", "a", PushTarget("_INBOX.x.1", "u1"))
    directory.set("S", "b", PushTarget("_INBOX.x.2", "u2"))
    directory.set("T", "c", PushTarget("_INBOX.x.1", "u3"))
    assert directory.delivering_to("_INBOX.x.1") == [("S", "a"), ("T", "c")]
    # A wildcard subscription receives every deliver subject it matches.
    assert directory.delivering_to("_INBOX.x.*") == [("S", "a"), ("S", "b"), ("T", "c")]
    assert directory.delivering_to("_INBOX.>") == [("S", "a"), ("S", "b"), ("T", "c")]
    directory.set("S", "a", None)
    assert directory.delivering_to("_INBOX.x.1") == [("T", "c")]
