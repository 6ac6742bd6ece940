"""Helpers of the mirror and source tests: waiting for a copy, reading a message raw."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client
from nats.js import JetStreamContext

TIMEOUT = 30.0


async def wait_info(js: JetStreamContext, stream: str, done: Callable[[Any], bool]) -> Any:
    """The stream's info once `done` says it is as awaited."""
    deadline = asyncio.get_running_loop().time() + TIMEOUT
    while True:
        info = await js.stream_info(stream)
        if done(info):
            return info
        assert asyncio.get_running_loop().time() < deadline, info.state
        await asyncio.sleep(0.05)


async def wait_last_seq(js: JetStreamContext, stream: str, last: int) -> Any:
    """The stream's info once its last sequence reached `last`."""
    return await wait_info(js, stream, lambda info: info.state.last_seq >= last)


async def wait_messages(js: JetStreamContext, stream: str, count: int) -> Any:
    """The stream's info once it holds `count` messages or more."""
    return await wait_info(js, stream, lambda info: info.state.messages >= count)


async def raw_get(nc: Client, stream: str, seq: int) -> dict[str, Any] | None:
    """Message `seq` of `stream` as STREAM.MSG.GET answers it (None: it has none)."""
    msg = await nc.request(
        f"$JS.API.STREAM.MSG.GET.{stream}", json.dumps({"seq": seq}).encode(), timeout=10
    )
    message: dict[str, Any] | None = json.loads(msg.data).get("message")
    return message
