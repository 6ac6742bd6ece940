"""A consumer loop's wake-up: an event that can be waited for with a timeout."""

from __future__ import annotations

import asyncio
import math


def _release(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Wake:
    """`asyncio.Event` with `wait(timeout)` built in.

    `asyncio.wait_for(event.wait(), timeout)` makes a task for the wait on Python 3.11, and a
    set event reaches the waiting loop through that task and the outer future: three hops of
    the event loop per round of a consumer served a request at a time. Here `set` resolves the
    waiter's future itself, and the timeout is a timer on that same future.
    """

    __slots__ = ("_flag", "_waiter")

    def __init__(self) -> None:
        self._flag = False
        self._waiter: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        self._flag = True
        waiter = self._waiter
        if waiter is not None:
            _release(waiter)

    def clear(self) -> None:
        self._flag = False

    async def wait(self, timeout: float = math.inf) -> bool:
        """Until set or `timeout` seconds have passed; whether it is set."""
        if self._flag:
            return True
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(timeout, _release, waiter) if timeout < math.inf else None
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if self._waiter is waiter:
                self._waiter = None
        return self._flag
