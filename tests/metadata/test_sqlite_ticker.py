"""The SQLite store's ticker: a timer callback per tick, reading only while someone waits."""

from __future__ import annotations

import asyncio

import pytest

from infinistream.metadata.kv import PollWatch
from infinistream.metadata.sqlite_ticker import CallbackTicker


class Version:
    """A version that a test moves by hand, counting how often it is read."""

    def __init__(self) -> None:
        self.value: int | None = 0
        self.reads = 0
        self.fails: Exception | None = None

    def read(self) -> int | None:
        self.reads += 1
        if self.fails is not None:
            raise self.fails
        return self.value


async def test_a_change_wakes_the_waiter_and_the_ticks_stop_with_no_one_waiting() -> None:
    version = Version()
    watch = PollWatch(CallbackTicker(version.read, 0.001))
    assert await watch.wait(0.0)  # the first version seen counts as a change
    waiting = asyncio.ensure_future(watch.wait(5.0))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    version.value = 1
    assert await asyncio.wait_for(waiting, 1.0)
    # Nobody waits now: after at most one more tick, nothing is read.
    await asyncio.sleep(0.01)
    reads = version.reads
    await asyncio.sleep(0.02)
    assert version.reads == reads


async def test_a_quiet_wait_times_out() -> None:
    version = Version()
    watch = PollWatch(CallbackTicker(version.read, 0.001))
    assert await watch.wait(0.0)
    assert not await watch.wait(0.02)
    assert version.reads > 2  # it did tick meanwhile


async def test_a_failing_read_wakes_the_waiter_who_meets_the_error() -> None:
    version = Version()
    watch = PollWatch(CallbackTicker(version.read, 0.001))
    assert await watch.wait(0.0)
    waiting = asyncio.ensure_future(watch.wait(5.0))
    await asyncio.sleep(0.005)
    version.fails = RuntimeError("store closed")
    with pytest.raises(RuntimeError, match="store closed"):
        await asyncio.wait_for(waiting, 1.0)


async def test_an_unreadable_version_is_tried_again_at_the_next_tick() -> None:
    version = Version()
    ticker = CallbackTicker(version.read, 0.001)
    watch = PollWatch(ticker)
    assert await watch.wait(0.0)
    version.value = None  # another process holds the file exclusively
    waiting = asyncio.ensure_future(watch.wait(5.0))
    await asyncio.sleep(0.01)
    assert not waiting.done() and ticker.version == 0
    version.value = 7
    assert await asyncio.wait_for(waiting, 1.0)
    assert ticker.version == 7
