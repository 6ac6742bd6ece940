"""This agent's part in its zone's object cache (storage.zonecache): the parts built from the
settings, the pool's shared secret, and the cache channel's life.

The secret is created by the first agent of the pool that needs it (a random key, written
only if no agent wrote one first) and read by every other: agents of one group share it, and
no client can learn it (the metadata store is the agents'; no API reads this key).
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from infinistream.metadata.kv import Compare, MetadataStore, Put
from infinistream.pool import LiveMembers
from infinistream.pool.members import CACHE
from infinistream.server.info import advertised
from infinistream.settings import Settings
from infinistream.storage import (
    BlockStore,
    ObjectStore,
    Peer,
    PeerClient,
    PeerServer,
    PoolSecret,
    ZoneCache,
    ZoneCacheStats,
    claim_directory,
)

log = logging.getLogger(__name__)

SECRET_BYTES = 32


def secret_key(group: str) -> str:
    return f"{group}/cache/secret"


async def pool_secret(meta: MetadataStore, group: str) -> bytes:
    """The group's cache channel secret, created if no agent has yet."""
    key = secret_key(group)
    item = await meta.get(key)
    if item is None:
        # Only if still absent: two agents starting at once agree on the first one written.
        await meta.txn([Compare(key, 0)], [Put(key, os.urandom(SECRET_BYTES))])
        item = await meta.get(key)
        assert item is not None
    return item.value


def cache_peers(pool: LiveMembers, zone: str) -> Callable[[], Sequence[Peer]]:
    """The live agents of `zone` with the cache role and a cache channel, as the zone cache
    reads them: from the pool's view, recomputed when membership changes it."""
    last: tuple[int, list[Peer]] = (-1, [])

    def peers() -> list[Peer]:
        nonlocal last
        if last[0] != pool.generation:
            found = [
                Peer(m.id, f"http://{m.cache_address}", m.zone)
                for m in pool.with_role(CACHE, zone)
                if m.cache_address
            ]
            last = (pool.generation, found)
        return last[1]

    return peers


@dataclass(eq=False)
class ZoneCacheChannel:
    """The zone cache of one agent and its channel's server, started and stopped with it."""

    settings: Settings
    cache: ZoneCache
    server: PeerServer
    stats: ZoneCacheStats
    port: int = 0
    _lock: IO[bytes] | None = field(default=None, repr=False)

    async def start(self) -> None:
        """Listen for the zone's readers (an agent with the cache role); membership then
        advertises `address`."""
        s = self.settings
        if CACHE in s.roles:
            self.port = await self.server.start(s.host, s.cache_port)
            log.info("Zone cache channel on %s:%d", s.host, self.port)

    def address(self) -> str | None:
        """host:port of the channel, as the zone's agents reach it; None when not listening."""
        if not self.port:
            return None
        s = self.settings
        host = s.client_advertise.rpartition(":")[0] if s.client_advertise else s.host
        return f"{advertised(host)}:{self.port}"

    async def stop(self) -> None:
        await self.server.close()
        await self.cache.close()
        if self._lock is not None:
            self._lock.close()


def cache_root(s: Settings) -> Path:
    """Where the zone cache's directories go: `cache_dir`; else in the store directory when the
    agent uses it (an embedded store), else in the system's temporary directory (an agent on
    S3 and etcd creates no store directory)."""
    if s.cache_dir:
        return Path(s.cache_dir)
    if not s.objects or not s.metadata:
        return Path(s.store_dir, "cache")
    return Path(tempfile.gettempdir(), "infinistream-cache")


def build_zone_cache(
    s: Settings,
    meta: MetadataStore,
    objects: ObjectStore,
    *,
    self_id: str,
    members: Callable[[], Sequence[Peer]],
) -> ZoneCacheChannel:
    stats = ZoneCacheStats()
    directory: Path | None = None
    lock: IO[bytes] | None = None
    if s.cache_size > 0:
        directory, lock = claim_directory(cache_root(s))
    blocks = BlockStore(
        objects,
        memory_bytes=s.cache_memory,
        disk_bytes=s.cache_size,
        directory=directory,
        stats=stats,
    )
    secret = PoolSecret(lambda: pool_secret(meta, s.group))
    cache = ZoneCache(
        blocks,
        PeerClient(secret, timeout=s.cache_timeout),
        stats,
        self_id=self_id,
        members=members,
    )
    server = PeerServer(secret, blocks.read_range, stats)
    return ZoneCacheChannel(s, cache, server, stats, _lock=lock)
