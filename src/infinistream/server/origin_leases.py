"""The leases that make one agent of a pool copy each mirror and each stream's sources
(stream.mirror_runner.OriginLeases over pipeline.lease).

A lease lives `TTL` seconds unless renewed, and is renewed every `RENEW` seconds while its
stream is copied, so an agent that dies (kill -9) frees its streams within `TTL`; one that
leaves the pool (lame duck mode, a clean stop) releases them at once through `LeaseHolders`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from infinistream.metadata.kv import MetadataStore
from infinistream.pipeline.lease import Lease, LeaseHolders, LeaseLost, acquire, release, renew

log = logging.getLogger(__name__)

TTL = 5.0
RENEW = 1.0


@dataclass(eq=False)
class PoolLeases:
    meta: MetadataStore
    group: str
    holder: str
    holders: LeaseHolders | None = None
    ttl: float = TTL
    renew_every: float = RENEW
    _held: dict[str, Lease] = field(default_factory=dict, init=False)
    _renewed: dict[str, float] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        if self.holders is not None:
            self.holders.register(f"origins:{self.group}:{id(self)}", self.release_all)

    async def hold(self, job: str) -> bool:
        if self.holders is not None and self.holders.leaving:
            await self.release(job)
            return False
        lease = self._held.get(job)
        now = time.monotonic()
        if lease is None:
            lease = await acquire(self.meta, self.group, job, self.holder, self.ttl)
            if lease is None:
                return False
            self._held[job], self._renewed[job] = lease, now
            return True
        if now - self._renewed[job] < self.renew_every:
            return True
        try:
            self._held[job] = await renew(self.meta, lease, self.ttl)
        except LeaseLost:
            log.warning("lease %s was taken over", job)
            self._held.pop(job, None)
            return False
        self._renewed[job] = now
        return True

    async def release(self, job: str) -> None:
        lease = self._held.pop(job, None)
        if lease is not None:
            await release(self.meta, lease)

    async def release_all(self) -> None:
        for job in list(self._held):
            await self.release(job)
