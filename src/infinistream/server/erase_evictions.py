"""Dropping this agent's cached copies of erased bytes: an erase must reach every copy.

An erase request (stream/erase.py) names the objects that held the erased bytes. Every agent,
not only the one that took the request, watches the erase requests of every group it may hold
blocks of (the zone cache serves the whole pool, whichever account a block belongs to) and,
for each request not complete yet, evicts its objects from its caches: the reader's section
cache and the zone cache's blocks, in memory and on disk. Until the request is complete (the
janitor deleted the objects) the caches refuse those objects, so a read of the old object's
other messages cannot put the erased bytes back; then they are readmitted, which only frees
the memory of remembering them (the objects are gone).

Nothing here is needed for correctness of what is served (every read checks the stream's
state in metadata first): it is about the bytes physically held.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from infinistream.metadata.kv import ChangeWatch, MetadataStore
from infinistream.stream.erase import erase_requests

log = logging.getLogger(__name__)

# How long a quiet watch waits before the requests are read anyway (a commit of this process
# may not wake its own watch: the request this agent took is read by then).
POLL_SECONDS = 2.0
# At most one read of the requests per this long: under load the watch wakes at every commit.
MIN_INTERVAL_SECONDS = 0.5


class ObjectCache(Protocol):
    def evict(self, object_key: str) -> int: ...

    def readmit(self, object_key: str) -> None: ...


@dataclass(eq=False)
class EraseEvictions:
    """Applies the pending erase requests of `groups()` to `caches`, once each."""

    meta: MetadataStore
    groups: Callable[[], Iterable[str]]
    caches: Sequence[ObjectCache]
    watch: ChangeWatch
    # Request key -> the objects it names, for the requests applied and not complete.
    applied: dict[str, list[str]] = field(init=False, default_factory=dict)

    async def run(self) -> None:
        while True:
            try:
                await self.watch.wait(POLL_SECONDS)
                await self.apply()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("applying erase requests to the caches")
            await asyncio.sleep(MIN_INTERVAL_SECONDS)

    async def apply(self) -> int:
        """Evict the objects of requests not applied yet, readmit those of requests complete
        (or gone); how many blocks and sections were dropped."""
        pending: dict[str, list[str]] = {}
        for group in sorted(set(self.groups())):
            for item, request in await erase_requests(self.meta, group):
                if not request.completed_ns:
                    pending[item.key] = request.holders
        dropped = 0
        for key, holders in pending.items():
            if key in self.applied:
                continue
            for obj in holders:
                for cache in self.caches:
                    dropped += cache.evict(obj)
            self.applied[key] = holders
        if dropped:
            log.info("erase: %d cached blocks and sections dropped", dropped)
        still = {obj for holders in pending.values() for obj in holders}
        for key in [k for k in self.applied if k not in pending]:
            for obj in self.applied.pop(key):
                if obj not in still:
                    for cache in self.caches:
                        cache.readmit(obj)
        return dropped
