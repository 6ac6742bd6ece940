"""When an etcd store gives back the history of its own writes.

The agents never read a revision older than their one call (a range's pages, one snapshot), so
etcd's history serves them nothing once a few seconds old, and kept it becomes most of etcd's
database: every flush rewrites the record of each subject it wrote to, and etcd keeps each old
version until its history is compacted (at 100,000 subjects, about 100 bytes a message).
Left to etcd's `--auto-compaction-retention`, what it holds grows with the write rate times
that retention, and a member started without it fills its quota.

So a store compacts history itself, at its writes: once `seconds` have passed since the mark
(a revision it committed), it compacts to that mark and marks its latest commit. etcd then holds
between `seconds` and twice that of history, whatever its own flags say; a store that writes
nothing compacts nothing (it made no history). Compactions run in the background, one at a
time, and never fail a write. Several agents each compacting is harmless: etcd refuses a
revision already compacted past, which the compaction ignores.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

# How old history is when a store compacts it: a read pinned to a revision (the pages of one
# range) has this long at least before etcd may refuse it, and then starts over.
DEFAULT_HISTORY_SECONDS = 10.0


class HistoryTrim:
    """Calls `compact(revision)` as the store's commits (`written`) pass the marks."""

    def __init__(
        self,
        seconds: float,
        compact: Callable[[int], Awaitable[None]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.seconds = seconds
        self._compact = compact
        self._clock = clock
        self._mark: tuple[float, int] | None = None  # (when, revision) of a commit of this store
        self._running: asyncio.Task[None] | None = None
        self.compacted_to = 0  # the last revision compacted to (0: none yet)
        self._warned = False

    def written(self, revision: int) -> None:
        """This store committed at `revision`."""
        if self.seconds <= 0:
            return
        now = self._clock()
        mark = self._mark
        if mark is None:
            self._mark = (now, revision)
            return
        if now - mark[0] < self.seconds:
            return
        if self._running is not None and not self._running.done():
            return  # the mark stays: a write after this compaction ends compacts to it
        self._mark = (now, revision)
        self._running = asyncio.get_running_loop().create_task(self._run(mark[1]))

    async def _run(self, revision: int) -> None:
        try:
            await self._compact(revision)
        except Exception as e:
            # Not the writer's failure: etcd's own auto-compaction, if set, still bounds the
            # history, and the next mark tries again. Said once, not at every mark.
            if not self._warned:
                log.warning("etcd history compaction to revision %d failed: %s", revision, e)
                self._warned = True
            return
        self.compacted_to = max(self.compacted_to, revision)

    async def close(self) -> None:
        running, self._running = self._running, None
        if running is None:
            return
        running.cancel()
        if running.get_loop() is asyncio.get_running_loop():  # a store closed from another
            await asyncio.gather(running, return_exceptions=True)  # loop cannot wait for it
