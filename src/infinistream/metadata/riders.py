"""Reads that ride along with another: what a reader must read anyway, carried by the next
read it makes for another reason, so that both cost one round trip to metadata.

A catalog must read its marker and a stream's state before it trusts what it holds of the
stream; a question asked of the stream's view then often reads what the view lacks (a page of
its index). Made through `Riders`, the first snapshot carries the marker and the state too: one
etcd Txn of several Range requests, one SQLite read transaction, all at one revision.
"""

from __future__ import annotations

from infinistream.metadata.kv import MetadataStore, Read, Snapshot, StoreWrapper


class Riders(StoreWrapper):
    """`inner`, whose first snapshot also makes `reads` (after its own), keeping what they
    found in `found`; every other call, and every later snapshot, is `inner`'s alone."""

    def __init__(self, inner: MetadataStore, reads: list[Read]) -> None:
        super().__init__(inner)
        self.reads = reads
        # What `reads` found, as of the revision of the snapshot that carried them (None: no
        # snapshot has yet).
        self.found: Snapshot | None = None

    async def snapshot(self, reads: list[Read]) -> Snapshot:
        if self.found is not None:
            return await self.inner.snapshot(reads)
        snap = await self.inner.snapshot([*reads, *self.reads])
        asked = len(reads)
        self.found = Snapshot(snap.revision, snap.found[asked:])
        return Snapshot(snap.revision, snap.found[:asked])

    async def read(self) -> Snapshot:
        """What `reads` found: read now, on their own, when no snapshot has carried them."""
        if self.found is None:
            self.found = await self.inner.snapshot(self.reads)
        return self.found
