"""nats-py's async publishing with its default limits (4,000 in flight) runs to the end, on an
agent as on nats-server; a sequential publisher on the agent is not held by a linger."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
from nats.aio.client import Client

from support.agentproc import running_agent

MESSAGES = 20_000


async def test_publish_async_with_the_default_limit_is_acked_in_full(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await js.add_stream(name="ASYNC", subjects=["async.>"])
    futures = [await js.publish_async(f"async.{i % 7}", b"x" * 128) for i in range(MESSAGES)]
    await asyncio.wait_for(js.publish_async_completed(), 120)
    acks = [f.result() for f in futures]
    # Every publish acked once, in the order sent: sequences 1..N.
    assert [a.seq for a in acks] == list(range(1, MESSAGES + 1))
    assert (await js.stream_info("ASYNC")).state.messages == MESSAGES


async def test_a_sequential_publisher_is_answered_without_waiting_out_a_linger(
    tmp_path: Path,
) -> None:
    # On the embedded defaults a lone publish on an idle agent goes at once: 500 publishes one
    # after another take about a second (with the old 250 ms linger they took two minutes).
    with running_agent(tmp_path / "store", "-m", "0") as proc:
        nc = await nats.connect(proc.url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="SEQ", subjects=["seq"])
        loop = asyncio.get_running_loop()
        started = loop.time()
        for i in range(500):
            assert (await js.publish("seq", str(i).encode())).seq == i + 1
        assert loop.time() - started < 60
        await nc.close()
