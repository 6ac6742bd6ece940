"""The zone-aware object cache, as a reader sees it: bytes of an object from the block's owner.

Each aligned block of an object (`blocks.BlockStore`; an L0 object is one block) has one owner
among the live cache agents of this agent's zone, chosen by rendezvous hashing over them
(`rendezvous.owner`). The owner reads the block with one GET and keeps it; every other agent
of the zone asks the owner for the range it needs (`peers`). So a zone pays about one GET per
block, however many agents and streams read it.

The cache only ever saves requests; it never blocks or fails a read. `read` answers None when
it cannot give the exact bytes (no owner, the owner refused, failed, was slow or gone, the
object is shorter than asked or missing), and the reader then goes to object storage directly,
as it would without a cache. An owner that failed is passed over for `SUSPECT_SECONDS`: its
blocks go to the next owner in rendezvous order, as they will once membership drops it.

Bytes from the cache are checked like bytes from the store: the reader verifies each record,
and goes to object storage when a peer's bytes do not check.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from .blocks import BlockStore
from .cachestats import ZoneCacheStats
from .objects import ObjectStoreError
from .peers import PeerClient, PeerError
from .rendezvous import Peer, owner

__all__ = ["SUSPECT_SECONDS", "ZoneCache"]

log = logging.getLogger(__name__)

SUSPECT_SECONDS = 5.0


class ZoneCache:
    def __init__(
        self,
        blocks: BlockStore,
        client: PeerClient,
        stats: ZoneCacheStats,
        *,
        self_id: str,
        members: Callable[[], Sequence[Peer]],
    ) -> None:
        """`members` gives the live cache agents of this agent's zone (this agent among them
        when it has the cache role)."""
        self.blocks = blocks
        self.client = client
        self.stats = stats
        self.self_id = self_id
        self._members = members
        self._suspects: dict[str, float] = {}  # peer id -> until when it is passed over

    def owner_of(self, key: str, index: int) -> Peer | None:
        """The agent that owns block `index` of object `key` now."""
        now = time.monotonic()
        if self._suspects:
            self._suspects = {p: t for p, t in self._suspects.items() if t > now}
        peers = [p for p in self._members() if p.id not in self._suspects]
        return owner(f"{key}#{index}", peers)

    async def read(self, key: str, start: int, end: int) -> bytes | None:
        """Bytes [start, end) of `key` through the zone's owners, or None: read it directly.

        Raises the store's error (ObjectNotFoundError, ObjectStoreError) when this agent owns
        a block and its GET failed. A peer's failure never raises: the peer is not trusted to
        say that an object is missing.

        An agent alone in its zone over a local directory reads directly: no other agent
        shares its blocks, and a GET there is a file read, so keeping a copy of each block on
        the cache's disk saved nothing and cost its read of the whole block and its write (at
        100M messages, where nearly every cold get reads a block not read before, about as
        much CPU as the rest of the get)."""
        if not 0 <= start < end or self._alone_over_local():
            return None
        size = self.blocks.block_bytes
        first, last = start // size, (end - 1) // size
        parts = await asyncio.gather(
            *(
                self._read_block(key, i, max(start, i * size), min(end, (i + 1) * size))
                for i in range(first, last + 1)
            )
        )
        if any(part is None for part in parts):
            self.stats.fallbacks += 1
            return None
        return parts[0] if len(parts) == 1 else b"".join(p for p in parts if p is not None)

    def _alone_over_local(self) -> bool:
        if self.blocks.objects.local is None:
            return False
        return all(p.id == self.self_id for p in self._members())

    async def _read_block(self, key: str, index: int, start: int, end: int) -> bytes | None:
        self.stats.reads += 1
        peer = self.owner_of(key, index)
        if peer is None:
            return None
        if peer.id == self.self_id:
            # The store's error (a missing object, a failed GET) raises: reading the store
            # directly would make the same request again. The reader keeps what it reads in
            # its own caches: the block is not kept in memory a second time (BlockStore).
            data = await self.blocks.read_range(key, start, end, own=True)
            self.stats.owned_reads += 1
        else:
            try:
                data = await self.client.fetch(peer.url, key, start, end)
            except ObjectStoreError:
                return None
            except PeerError as exc:
                self.stats.peer_failures += 1
                self._suspects[peer.id] = time.monotonic() + SUSPECT_SECONDS
                log.info("cache owner %s passed over for %.0fs: %s", peer.id, SUSPECT_SECONDS, exc)
                return None
            self.stats.peer_reads += 1
            self.stats.peer_bytes += len(data)
        return data if len(data) == end - start else None

    async def close(self) -> None:
        await self.client.close()
        await self.blocks.drain()
