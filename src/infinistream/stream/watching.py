"""Waiting on a metadata watch for other agents' commits, through the store's failures.

Every loop that follows other agents' commits (the due timers, the republisher, the
consumers served here) waits the same way: a failing watch is logged and waited out, and
the loop carries on as if the wait had timed out.
"""

from __future__ import annotations

import asyncio
import logging

from infinistream.metadata.kv import ChangeWatch


async def other_commits(
    watch: ChangeWatch, timeout: float, *, retry_after: float, log: logging.Logger
) -> bool:
    """Whether `watch` saw a change within `timeout`; False after a failed wait, logged on
    the caller's `log` and followed by `retry_after` seconds of quiet."""
    try:
        return await watch.wait(timeout)
    except Exception:
        log.exception("watching metadata for other agents' commits")
        await asyncio.sleep(retry_after)
        return False
