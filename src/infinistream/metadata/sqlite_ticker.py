"""The ticker of an SQLite store's watches: `data_version` read in a timer callback.

`VersionTicker` ticks in a task: each tick an `asyncio.sleep` (a future and a timer), a task
step and the read's coroutine. SQLite's read needs none of that (a PRAGMA on the loop's own
connection, a few microseconds, never waiting), and the tick runs every 2 ms whenever anything
waits, which on a serving agent is always: on a pull consumer's fetch-and-ack row those wakes
were about 5% of the agent's busy samples. Here a tick is one timer callback and one read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from infinistream.metadata.kv import VersionTicker


class CallbackTicker(VersionTicker):
    """A `VersionTicker` whose `read` is synchronous and cheap enough to run in a callback.

    `read` returns the version, or None when it cannot be learned now (tried again at the next
    tick); an error stops the ticking and wakes the waiters, who meet it in `current`.
    """

    def __init__(self, read: Callable[[], int | None], interval: float) -> None:
        super().__init__(self._read_async, interval)
        self._read_now = read
        self._timer: asyncio.TimerHandle | None = None

    async def _read_async(self) -> int | None:
        return self._read_now()

    def _ticking(self) -> bool:
        return self._timer is not None

    def _start(self) -> None:
        self._schedule(asyncio.get_running_loop())

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_later(self.interval, self._tick_now, loop)

    def _tick_now(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        if not self._waiters:
            return  # nobody waits: read nothing until someone does
        try:
            version = self._read_now()
        except Exception:
            # Woken, the waiters read the version themselves (no tick runs by then) and meet
            # the error there.
            self._wake()
            return
        if version is not None and version != self.version:
            self.version = version
            self._wake()
        self._schedule(loop)
