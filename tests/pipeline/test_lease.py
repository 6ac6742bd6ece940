"""Leases on pipeline jobs and their fences, on a real SQLite metadata file shared by handles."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from infinistream.jetstream.api import StreamConfig
from infinistream.metadata import SqliteMetadataStore
from infinistream.metadata.kv import Compare, MetadataStore, Put
from infinistream.pipeline.lease import (
    Fence,
    FenceLost,
    LeaseHolders,
    LeaseLost,
    acquire,
    add_fence_arguments,
    check_fence,
    fence_from_args,
    fenced,
    read_lease,
    release,
    renew,
)
from infinistream.stream import records
from infinistream.stream.catalog import Catalog, StreamEntry
from infinistream.stream.changes import Changes
from infinistream.stream.committer import Committer
from infinistream.stream.records import StreamKeys, StreamRecord, StreamState, catalog_key

GROUP = "default"


@pytest.fixture
async def meta(tmp_path: Path) -> AsyncIterator[MetadataStore]:
    store = SqliteMetadataStore(tmp_path / "meta.db")
    yield store
    await store.close()


@pytest.fixture
async def other(tmp_path: Path) -> AsyncIterator[MetadataStore]:
    """A second handle on the same file, as another agent process would have."""
    store = SqliteMetadataStore(tmp_path / "meta.db")
    yield store
    await store.close()


async def test_two_contenders_one_wins(meta: MetadataStore, other: MetadataStore) -> None:
    won = await asyncio.gather(
        acquire(meta, GROUP, "janitor", "agent-a"),
        acquire(other, GROUP, "janitor", "agent-b"),
    )
    winners = [lease for lease in won if lease is not None]
    assert len(winners) == 1
    state = await read_lease(meta, GROUP, "janitor")
    assert state is not None and state.record.holder == winners[0].holder
    assert state.fence == winners[0].fence
    # A lease is per job: the other job is still free.
    assert await acquire(other, GROUP, "compact", "agent-b") is not None
    # And per group.
    assert await acquire(other, "other-group", "janitor", "agent-b") is not None


async def test_held_lease_is_refused_until_it_expires(
    meta: MetadataStore, other: MetadataStore
) -> None:
    a = await acquire(meta, GROUP, "janitor", "agent-a", ttl=0.3)
    assert a is not None
    assert await acquire(other, GROUP, "janitor", "agent-b", ttl=30) is None
    await asyncio.sleep(0.4)
    b = await acquire(other, GROUP, "janitor", "agent-b", ttl=30)
    assert b is not None, "an expired lease can be taken over"
    assert b.fence.revision > a.fence.revision
    state = await read_lease(meta, GROUP, "janitor")
    assert state is not None and state.record.holder == "agent-b" and not state.expired()
    # The old holder learns it lost the lease, and cannot release the new holder's.
    with pytest.raises(LeaseLost):
        await renew(meta, a)
    assert not await release(meta, a)
    assert (await read_lease(meta, GROUP, "janitor")) is not None


async def test_renewal_keeps_the_fence(meta: MetadataStore) -> None:
    lease = await acquire(meta, GROUP, "compact", "agent-a", ttl=0.3)
    assert lease is not None
    for _ in range(3):
        await asyncio.sleep(0.15)
        lease = await renew(meta, lease, ttl=0.3)
    # Renewed past its first expiry: still ours, and the token handed to the job still holds.
    assert await acquire(meta, GROUP, "compact", "agent-b") is None
    await check_fence(meta, lease.fence)
    result = await fenced(meta, lease.fence).txn([], [Put("default/x", b"1")])
    assert result.succeeded
    assert await release(meta, lease)
    assert await read_lease(meta, GROUP, "compact") is None
    with pytest.raises(FenceLost):
        await check_fence(meta, lease.fence)


async def test_stale_holder_cannot_commit(meta: MetadataStore, other: MetadataStore) -> None:
    stale = await acquire(meta, GROUP, "compact", "agent-a", ttl=0.1)
    assert stale is not None
    await asyncio.sleep(0.2)
    current = await acquire(other, GROUP, "compact", "agent-b")
    assert current is not None

    # A raw transaction fenced by the old token fails, loudly, and writes nothing.
    with pytest.raises(FenceLost):
        await fenced(meta, stale.fence).txn([], [Put("default/x", b"stale")])
    assert await meta.get("default/x") is None
    # The same done with an explicit compare, as a job building its own transaction would.
    result = await meta.txn(
        [Compare("default/x", 0), stale.fence.compare()], [Put("default/x", b"1")]
    )
    assert not result.succeeded
    # The new holder commits.
    assert (await fenced(other, current.fence).txn([], [Put("default/x", b"new")])).succeeded
    assert (await meta.get("default/x")).value == b"new"  # type: ignore[union-attr]


async def test_stale_holder_cannot_change_a_stream(
    meta: MetadataStore, other: MetadataStore
) -> None:
    """The committer, given a fenced store, stops at once instead of retrying the conflict."""
    await _create_stream(meta, "ORDERS")
    stale = await acquire(meta, GROUP, "janitor", "agent-a", ttl=0.1)
    assert stale is not None
    await asyncio.sleep(0.2)
    assert await acquire(other, GROUP, "janitor", "agent-b") is not None

    def move_head(entry: StreamEntry, changes: Changes) -> None:
        changes.kill_below(5)

    stale_meta = fenced(meta, stale.fence)
    committer = Committer(stale_meta, Catalog(stale_meta, GROUP))
    with pytest.raises(FenceLost):
        await committer.change_stream("ORDERS", move_head)
    assert committer.conflicts == 0
    state = records.decode_state((await meta.get(StreamKeys(GROUP, "ORDERS").state)).value)  # type: ignore[union-attr]
    assert state.first_seq == 1

    # Unfenced (or with a live fence) the same change commits.
    await Committer(meta, Catalog(meta, GROUP)).change_stream("ORDERS", move_head)
    state = records.decode_state((await meta.get(StreamKeys(GROUP, "ORDERS").state)).value)  # type: ignore[union-attr]
    assert state.first_seq == 5


def test_fence_on_the_command_line() -> None:
    parser = argparse.ArgumentParser()
    add_fence_arguments(parser)
    fence = Fence("default/fences/compact", 42)
    assert fence_from_args(parser.parse_args(fence.args())) == fence
    assert fence_from_args(parser.parse_args([])) is None
    with pytest.raises(ValueError):
        fence_from_args(parser.parse_args(["--fence-key", "k"]))
    with pytest.raises(ValueError):
        fence_from_args(parser.parse_args(["--fence-key", "k", "--fence-revision", "0"]))


async def _create_stream(meta: MetadataStore, name: str) -> None:
    keys = StreamKeys(GROUP, name)
    cfg = StreamConfig(name=name, subjects=[f"{name.lower()}.>"])
    record = StreamRecord(config=cfg, created_ns=1, uid="u1")
    state = StreamState(uid="u1", first_seq=1, last_seq=0)
    result = await meta.txn(
        [Compare(keys.config, 0)],
        [
            Put(keys.config, records.encode(record)),
            Put(keys.state, records.encode(state)),
            Put(catalog_key(GROUP), b"u1"),
        ],
    )
    assert result.succeeded


async def test_leaving_hands_every_lease_over(meta: MetadataStore, other: MetadataStore) -> None:
    holders = LeaseHolders(leave_timeout=0.5)
    lease = await acquire(meta, GROUP, "compact", "leaving-agent", ttl=60)
    assert lease is not None
    handed: list[str] = []

    async def release_compaction() -> None:
        assert lease is not None
        await release(meta, lease)
        handed.append("compact")

    async def never_done() -> None:
        await asyncio.Event().wait()

    holders.register("jobs", release_compaction)
    holders.register("mirror M", never_done)
    with pytest.raises(ValueError, match="registered already"):
        holders.register("jobs", release_compaction)
    unregister = holders.register("gone", never_done)
    unregister()
    # Another agent's attempt is refused while the lease is held, and wins once it is handed
    # over, long before its TTL.
    assert await acquire(other, GROUP, "compact", "other-agent", ttl=60) is None
    assert await holders.leave() == ["mirror M"]
    assert holders.leaving and handed == ["compact"]
    taken = await acquire(other, GROUP, "compact", "other-agent", ttl=60)
    assert taken is not None and taken.holder == "other-agent"
    # Nothing is handed over twice.
    assert await holders.leave() == []
