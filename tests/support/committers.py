"""Committers over a shared metadata store, as the agents of a pool commit, without an agent.

    meta = Forwarding(SqliteMetadataStore(path))   # subclass it to count or interleave reads
    await create_stream(meta, GROUP, "S")
    a = CommittingAgent(meta, GROUP, "a")
    seqs = await a.commit([Publish("s.1", None, 3, 20, "reply")])

Each commit names a made-up object of its own: the committer and the catalog only ever see the
object's key, never its bytes.
"""

from __future__ import annotations

from typing import Any

from infinistream.jetstream.api import StreamConfig
from infinistream.metadata import (
    Compare,
    Item,
    MetadataStore,
    Op,
    Put,
    Read,
    Snapshot,
    TxnResult,
)
from infinistream.metadata.kv import ChangeWatch
from infinistream.stream import records
from infinistream.stream.catalog import Catalog
from infinistream.stream.committer import Committer, SectionWrite
from infinistream.stream.config import normalize
from infinistream.stream.publish_rules import Publish


class Forwarding(MetadataStore):
    """A metadata store that hands every call of the base interface to `inner`: a base for
    tests that watch or interleave one agent's reads. Unlike `kv.StoreWrapper` it passes on no
    optional fast path (`txn_recorded` and the rest keep the base's defaults), so a test's
    `txn` or `snapshot` sees every commit and read the agent makes."""

    def __init__(self, inner: MetadataStore) -> None:
        self.inner = inner

    async def get(self, key: str) -> Item | None:
        return await self.inner.get(key)

    async def get_many(self, keys: list[str]) -> dict[str, Item]:
        return await self.inner.get_many(keys)

    async def range(self, prefix: str, **kw: Any) -> list[Item]:
        return await self.inner.range(prefix, **kw)

    async def snapshot(self, reads: list[Read]) -> Snapshot:
        return await self.inner.snapshot(reads)

    async def txn(
        self, compares: list[Compare], ops: list[Op], *, durable: bool = True
    ) -> TxnResult:
        return await self.inner.txn(compares, ops, durable=durable)

    async def revision(self) -> int:
        return await self.inner.revision()

    def watch(self, prefix: str) -> ChangeWatch:
        return self.inner.watch(prefix)

    async def close(self) -> None:
        await self.inner.close()


class Reads(Forwarding):
    """The real store, counting its reads, each one round trip: gets, multi-gets, ranges and
    snapshots (writes pass uncounted)."""

    def __init__(self, inner: MetadataStore) -> None:
        super().__init__(inner)
        self.reads = 0

    async def get(self, key: str) -> Item | None:
        self.reads += 1
        return await self.inner.get(key)

    async def get_many(self, keys: list[str]) -> dict[str, Item]:
        self.reads += 1
        return await self.inner.get_many(keys)

    async def range(self, prefix: str, **kw: Any) -> list[Item]:
        self.reads += 1
        return await self.inner.range(prefix, **kw)

    async def snapshot(self, reads: list[Read]) -> Snapshot:
        self.reads += 1
        return await self.inner.snapshot(reads)

    def counted(self) -> int:
        """The reads since the last call."""
        reads, self.reads = self.reads, 0
        return reads


async def create_stream(meta: MetadataStore, group: str, name: str, subjects: str = "s.>") -> None:
    """A stream's config, its empty state and the catalog's key, as a stream create writes them."""
    keys = records.StreamKeys(group, name)
    cfg = normalize(StreamConfig(name=name, subjects=[subjects]))
    record = records.StreamRecord(config=cfg, created_ns=1, uid="u")
    state = records.StreamState(uid="u", first_seq=1, last_seq=0)
    await meta.txn(
        [],
        [
            Put(keys.config, records.encode(record)),
            Put(keys.state, records.encode(state)),
            Put(records.catalog_key(group), b"1"),
        ],
    )


class CommittingAgent:
    """A catalog and a committer over one metadata handle: what an agent's flush commits."""

    def __init__(self, meta: MetadataStore, group: str, name: str) -> None:
        self.meta = meta
        self.group = group
        self.name = name
        self.catalog = Catalog(meta, group)
        self.committer = Committer(meta, self.catalog)
        self.objects = 0

    async def commit(self, publishes: list[Publish], stream: str = "S") -> list[int]:
        """Commit `publishes` as one section of a new object; their sequences."""
        self.objects += 1
        obj = f"{self.group}/objects/l0/{self.objects:08d}-{self.name}.iso"
        size = sum(p.size for p in publishes)
        section = SectionWrite(stream, obj, 8, size, publishes)
        outcomes = await self.committer.commit_sections([section])
        return [o.seq for o in outcomes[stream]]
