"""Waiting for an event rather than for time to pass.

    await until(lambda: client.is_connected, 30)             # a plain condition
    elapsed = await until(lambda: marker_placed(js), 15)     # or a coroutine's result

A test that needs something to have happened (an expiry, a redelivery, a schedule's fire, a
member dropping out) asks for it again and again until it holds, so it waits as long as the
machine needs and no longer. The timeout is a safety net only: it fails the test, saying what
did not happen.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

INTERVAL = 0.05


async def until(
    condition: Callable[[], bool | Awaitable[bool]],
    timeout: float,
    what: str = "the condition",
    interval: float = INTERVAL,
) -> float:
    """Seconds until `condition()` (or the coroutine it returns) is true; fails after `timeout`."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        elapsed = loop.time() - start
        if held:
            return elapsed
        if elapsed > timeout:
            raise AssertionError(f"{what} did not hold within {timeout}s")
        await asyncio.sleep(interval)
