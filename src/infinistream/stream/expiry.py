"""max_age applies even when nothing is published: a periodic pass expires old messages."""

from __future__ import annotations

import asyncio
import logging
import time

from infinistream.stream.catalog import Catalog
from infinistream.stream.committer import Committer
from infinistream.stream.limits import expire

log = logging.getLogger(__name__)

EXPIRY_POLL_SECONDS = 1.0


class Expiry:
    def __init__(
        self, catalog: Catalog, committer: Committer, interval: float = EXPIRY_POLL_SECONDS
    ) -> None:
        self.catalog = catalog
        self.committer = committer
        self.interval = interval

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.expire_once()

    async def expire_once(self) -> None:
        for name, entry in list(self.catalog.streams.items()):
            if entry.config.max_age <= 0:
                continue
            try:
                view = await self.catalog.view(name)
                if view is None or not view.msgs:
                    continue
                if view.first_ts > time.time_ns() - entry.config.max_age:
                    continue
                await self.committer.change_stream(
                    name, lambda e, changes: expire(e, changes, time.time_ns())
                )
            except Exception:
                log.exception("expiring stream %s failed", name)
