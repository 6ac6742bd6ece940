"""The stall watch: a loop held past the threshold is logged with where it was held, and how
long, once it runs again; a loop that keeps running is not."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import pytest

from infinistream.server.stalls import StallWatch


async def hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # holding the loop is what is under test


async def watched(
    caplog: pytest.LogCaptureFixture, work: Callable[[], Awaitable[None]]
) -> list[str]:
    """The warnings logged while `work` runs on a watched loop."""
    watch = StallWatch(threshold=0.2)
    task = asyncio.create_task(watch.run())
    with caplog.at_level(logging.WARNING, logger="infinistream.server.stalls"):
        await asyncio.sleep(0.1)
        await work()
        await asyncio.sleep(0.3)  # the loop beats again and the watcher sees it
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return [r.getMessage() for r in caplog.records]


async def test_a_held_loop_is_logged_with_where_and_how_long(
    caplog: pytest.LogCaptureFixture,
) -> None:
    messages = await watched(caplog, lambda: hold_the_loop(0.6))
    assert len(messages) == 2, messages
    assert messages[0].startswith("the event loop has not run for 0.")
    assert "in hold_the_loop" in messages[0] and "time.sleep(seconds)" in messages[0]
    ran_again_after = float(messages[1].split()[-2])
    assert messages[1].startswith("the event loop ran again after")
    assert 0.5 <= ran_again_after <= 1.0, messages[1]


async def test_a_loop_that_keeps_running_is_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def busy_but_yielding() -> None:
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:
            time.sleep(0.01)  # short holds, as a busy loop has
            await asyncio.sleep(0)

    assert await watched(caplog, busy_but_yielding) == []
