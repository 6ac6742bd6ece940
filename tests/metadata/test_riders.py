"""`Riders`: reads carried by the next snapshot a reader makes, one round trip for both, on
every backend (an etcd Txn of several ranges, one SQLite read transaction)."""

from __future__ import annotations

from infinistream.metadata import Get, MetadataStore, Put, Read, Scan, Snapshot, StoreWrapper
from infinistream.metadata.riders import Riders


class Snapshots(StoreWrapper):
    """The real store, counting the snapshots made of it (each one round trip)."""

    def __init__(self, inner: MetadataStore) -> None:
        super().__init__(inner)
        self.made: list[list[Read]] = []

    async def snapshot(self, reads: list[Read]) -> Snapshot:
        self.made.append(reads)
        return await self.inner.snapshot(reads)


async def test_the_first_snapshot_carries_them(store: MetadataStore) -> None:
    written = await store.txn([], [Put("marker", b"m"), Put("state", b"s"), Put("i/1", b"one")])
    counted = Snapshots(store)
    riders = Riders(counted, [Get("marker"), Get("state"), Get("absent")])
    snap = await riders.snapshot([Scan("i/"), Get("state")])
    # The caller sees its own reads only, as if asked alone.
    assert [[i.key for i in found] for found in snap.found] == [["i/1"], ["state"]]
    assert len(counted.made) == 1
    found = riders.found
    assert found is not None
    assert found.revision == snap.revision == written.revision
    marker, state = found.item(0), found.item(1)
    assert marker is not None and marker.value == b"m"
    assert state is not None and state.mod_revision == written.revision
    assert found.item(2) is None
    # Carried once: later snapshots and `read` make no read of them again.
    await store.txn([], [Put("marker", b"moved")])
    again = await riders.snapshot([Get("marker")])
    moved = again.item(0)
    assert moved is not None and moved.value == b"moved"
    assert counted.made[-1] == [Get("marker")]
    assert await riders.read() is found
    assert len(counted.made) == 2


async def test_read_alone_when_no_snapshot_carried_them(store: MetadataStore) -> None:
    await store.txn([], [Put("marker", b"m")])
    counted = Snapshots(store)
    riders = Riders(counted, [Get("marker")])
    found = await riders.read()
    item = found.item(0)
    assert item is not None and item.value == b"m"
    assert counted.made == [[Get("marker")]]
    assert riders.found is found
