"""The `MetadataStore.snapshot` contract: several reads as of one revision, on every backend.

A snapshot reads what `get` and `range` read with the same arguments, all at one revision, so a
reader of keys that change together (a stream's state and its index) never sees part of a
transaction. Paging of long scans at the snapshot's revision (etcd) is in test_etcd.py.
"""

from __future__ import annotations

import asyncio

import pytest

from infinistream.metadata import Get, MetadataStore, Put, Scan, Snapshot
from support.metadatabackends import SHARED_BACKENDS


async def fill(store: MetadataStore) -> int:
    keys = [f"s/{c}" for c in "abcdefgh"] + ["s/b/1", "s/b/2", "t/x", "s0"]
    result = await store.txn([], [Put(k, k.encode()) for k in keys])
    assert result.succeeded
    return result.revision


SCANS = [
    Scan("s/"),
    Scan("s/", reverse=True),
    Scan("s/", limit=3),
    Scan("s/", limit=3, reverse=True),
    Scan("s/", start="s/b/15", end="s/e"),
    Scan("s/", end="s/d", reverse=True, limit=1),
    Scan("s/", keys_only=True),
    Scan("s/", start="s/e", end="s/c"),
    Scan("s/", limit=0),
    Scan("nothing/"),
    Scan(""),
]


async def test_reads_what_get_and_range_read(store: MetadataStore) -> None:
    revision = await fill(store)
    snap = await store.snapshot([Get("s/a"), Get("s/missing"), *SCANS, Get("t/x")])
    assert snap.revision == revision == await store.revision()
    assert snap.item(0) == await store.get("s/a") and snap.item(0) is not None
    assert snap.item(1) is None
    for i, scan in enumerate(SCANS, start=2):
        expected = await store.range(
            scan.prefix,
            start=scan.start,
            end=scan.end,
            limit=scan.limit,
            reverse=scan.reverse,
            keys_only=scan.keys_only,
        )
        assert snap.items(i) == expected, scan
    assert snap.item(len(SCANS) + 2) == await store.get("t/x")


async def test_no_reads(store: MetadataStore) -> None:
    revision = await fill(store)
    assert await store.snapshot([]) == Snapshot(revision, ())


async def test_a_scan_refuses_what_range_refuses(store: MetadataStore) -> None:
    with pytest.raises(ValueError):
        await store.snapshot([Get("s/a"), Scan("s/", limit=-1)])


async def test_a_long_scan_reads_every_key(store: MetadataStore) -> None:
    keys = [f"l/{i:05d}" for i in range(2500)]
    revision = (await store.txn([], [Put(k, b"v") for k in keys])).revision
    snap = await store.snapshot([Scan("l/"), Scan("l/", keys_only=True, reverse=True)])
    assert [i.key for i in snap.items(0)] == keys
    assert [i.key for i in snap.items(1)] == keys[::-1]
    assert {i.mod_revision for i in snap.items(0)} == {revision}


@pytest.mark.parametrize("backend", SHARED_BACKENDS, indirect=True)
async def test_reads_one_revision_while_another_client_writes(
    store: MetadataStore, second_handle: MetadataStore
) -> None:
    # The writer moves a counter and adds a key under c/ in each commit: a snapshot that saw
    # two revisions would find the counter and the number of keys disagreeing.
    await second_handle.txn([], [Put("n", b"0")])
    stop = asyncio.Event()
    commits = 0

    async def write() -> None:
        nonlocal commits
        while not stop.is_set():
            commits += 1
            ops = [Put("n", str(commits).encode()), Put(f"c/{commits:06d}", b"")]
            await second_handle.txn([], ops)
            await asyncio.sleep(0)

    task = asyncio.create_task(write())
    seen: set[int] = set()
    try:
        while len(seen) < 20:
            snap = await store.snapshot([Get("n"), Scan("c/", keys_only=True), Get("n")])
            counter = snap.item(0)
            assert counter is not None and snap.item(2) == counter
            assert int(counter.value) == len(snap.items(1))
            assert snap.revision >= counter.mod_revision
            seen.add(int(counter.value))
            await asyncio.sleep(0)  # a store that answers without waiting lets the writer run
    finally:
        stop.set()
        await task
