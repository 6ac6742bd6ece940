"""Commits whose durability a pack's record makes (`txn_recorded`), their barrier, and their
replay after a power loss."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from infinistream.metadata import SqliteMetadataStore
from infinistream.metadata.commitrecord import decode_record, encode_record, needless_at
from infinistream.metadata.kv import Compare, Delete, DeletePrefix, Op, Put
from support.comparereads import CompareReads


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteMetadataStore]:
    s = SqliteMetadataStore(tmp_path / "meta.db")
    try:
        yield s
    finally:
        await s.close()


async def test_a_commit_is_recorded_only_on_the_stores_own_last_commit(
    store: SqliteMetadataStore, tmp_path: Path
) -> None:
    # Nothing committed by this store yet: the commit before may be another's, unsynced.
    first = await store.txn_recorded([], [Put("g/a", b"1")])
    assert first.result is None and first.record is None
    assert await store.get("g/a") is None
    await store.txn([], [Put("g/a", b"1")])
    made = await store.txn_recorded([Compare("g/a", 1)], [Put("g/a", b"2"), Delete("g/x")])
    assert made.result is not None and made.result.succeeded and made.result.revision == 2
    assert made.record is not None
    store.recorded_done(durable=True)
    record = decode_record(made.record)
    assert record is not None and record.revision == 2
    assert record.as_ops() == [Put("g/a", b"2"), Delete("g/x")]
    # Another connection commits: the next one is not recorded, the caller commits durably.
    other = SqliteMetadataStore(tmp_path / "meta.db")
    try:
        await other.txn([], [Put("g/b", b"x")])
    finally:
        await other.close()
    assert (await store.txn_recorded([], [Put("g/a", b"3")])).result is None
    # A failed compare is answered as such, and nothing needs a record.
    await store.txn([], [Put("g/a", b"3")])
    lost = await store.txn_recorded([Compare("g/a", 1)], [Put("g/a", b"4")])
    assert lost.result is not None and not lost.result.succeeded and lost.record is None


async def test_compares_of_what_the_last_commit_left_are_answered_without_a_read(
    store: SqliteMetadataStore,
) -> None:
    await store.txn([], [Put("g/a", b"1"), Put("g/b", b"1"), Put("g/d/1", b"x")])
    reads = CompareReads(store)

    async def recorded(compares: list[Compare], ops: list[Op]) -> bool | None:
        made = await store.txn_recorded(compares, ops)
        if made.record is not None:
            store.recorded_done(durable=True)
        return None if made.result is None else made.result.succeeded

    # Compares of the keys the commit before wrote, durable or recorded, need no read.
    assert await recorded([Compare("g/a", 1)], [Put("g/a", b"2")]) and reads() == 0
    assert await recorded([Compare("g/a", 2)], [Put("g/a", b"3"), Delete("g/b")])
    assert reads() == 0
    assert await recorded([Compare("g/a", 3), Compare("g/b", 0)], [Put("g/c", b"1")])
    assert reads() == 0
    # A compare the memory does not bear out, or of a key the last commit did not touch, is
    # read: a stale one fails as it would have.
    assert await recorded([Compare("g/a", 2)], [Put("g/a", b"x")]) is False and reads() == 1
    assert await recorded([Compare("g/d/1", 1)], [DeletePrefix("g/d/")]) and reads() == 1
    # The range deleted is not known key by key any more: read, and found gone.
    assert await recorded([Compare("g/d/1", 1)], [Put("g/e", b"1")]) is False
    assert reads() == 1
    assert (await store.get("g/a")).value == b"3"  # type: ignore[union-attr]
    assert await store.get("g/b") is None and await store.get("g/d/1") is None


async def test_no_wal_sync_while_a_recorded_commit_is_unsynced(
    store: SqliteMetadataStore, tmp_path: Path
) -> None:
    await store.txn([], [Put("g/a", b"1")])
    made = await store.txn_recorded([], [Put("g/a", b"2")])
    assert made.record is not None
    other = SqliteMetadataStore(tmp_path / "meta.db")
    try:
        # The other's durable commit would sync the WAL: it waits for the pack's sync.
        waiting = asyncio.ensure_future(other.txn([], [Put("g/b", b"x")]))
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert not waiting.done()
        assert await other.get("g/b") is None
        store.recorded_done(durable=True)
        result = await asyncio.wait_for(waiting, 10)
        assert result.succeeded and result.revision == 3
    finally:
        await other.close()


async def test_replay_makes_again_what_the_database_lacks_in_order(
    store: SqliteMetadataStore, tmp_path: Path
) -> None:
    await store.txn([], [Put("g/a", b"1"), Put("g/d/1", b"x"), Put("g/d/2", b"y")])
    shutil.copy(tmp_path / "meta.db", tmp_path / "kept.db")
    records = [
        encode_record(4, [Put("g/a", b"4"), DeletePrefix("g/d/")]),
        encode_record(1, [Put("g/a", b"old")]),  # the database has it already
        encode_record(2, [Put("g/a", b"2"), Put("g/b", b"2")]),
        b"not a record",
    ]
    await store.replay(records)
    assert await store.revision() == 4
    a = await store.get("g/a")
    assert a is not None and (a.value, a.mod_revision) == (b"4", 4)
    b = await store.get("g/b")
    assert b is not None and b.mod_revision == 2
    assert await store.range("g/d/") == []
    # Replayed twice (two agents starting together): nothing changes.
    await store.replay(records)
    assert await store.revision() == 4


async def test_settle_waits_for_recorded_commits_and_answers_the_revision_they_reach(
    store: SqliteMetadataStore, tmp_path: Path
) -> None:
    await store.txn([], [Put("g/a", b"1")])
    made = await store.txn_recorded([], [Put("g/a", b"2")])
    assert made.result is not None and made.record is not None
    other = SqliteMetadataStore(tmp_path / "meta.db")
    try:
        # Its sync would make the commit durable before its pack: it waits for that sync.
        settling = asyncio.ensure_future(other.settle())
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert not settling.done()
        store.recorded_done(durable=True)
        settled = await asyncio.wait_for(settling, 10)
    finally:
        await other.close()
    # It changes nothing: the revision is the recorded commit's, and its record is needless.
    assert settled == made.result.revision == await store.revision()
    assert needless_at(settled)(made.record)
    assert not needless_at(settled - 1)(made.record)
    later = await store.txn_recorded([], [Put("g/a", b"3")])
    assert later.record is not None and not needless_at(settled)(later.record)
    store.recorded_done(durable=True)
