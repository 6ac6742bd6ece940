"""Streams with many subjects: 100,000 subjects across ten streams, and the other clients of
the agent keep being served while they are created.

Overlap checks used to compare every pair of subjects (a stream of 10,000 subjects stalled the
agent for 22 s); they walk a subject tree now. The bounds are generous, for a busy 2-core
machine: what they catch is the stall, not a few seconds either way.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from support.agentproc import AgentProcess

STREAMS = 10
PER_STREAM = 10_000
# Generous: every create, all ten, and the slowest bystander publish meanwhile.
ALL_CREATES_WITHIN = 120.0
BYSTANDER_ACK_WITHIN = 5.0


def subjects(stream: int) -> list[str]:
    return [f"m{stream:02d}.s{i:05d}.x" for i in range(PER_STREAM)]


async def api(nc: Client, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else b""
    reply = await nc.request("$JS.API." + subject, data, timeout=60)
    return json.loads(reply.data)  # type: ignore[no-any-return]


async def bystander(url: str, stop: asyncio.Event, latencies: list[float]) -> None:
    """Another client of the agent, publishing to its own stream all along."""
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=60)
    await js.add_stream(name="BYSTANDER", subjects=["bystander"])
    while not stop.is_set():
        start = time.monotonic()
        await js.publish("bystander", b"x")
        latencies.append(time.monotonic() - start)
        await asyncio.sleep(0.05)
    await nc.close()


@pytest.mark.timeout(300)
async def test_100k_subjects_across_streams_do_not_stall_other_clients(
    agent: AgentProcess, nc: Client
) -> None:
    stop = asyncio.Event()
    latencies: list[float] = []
    other = asyncio.create_task(bystander(agent.url, stop, latencies))
    while not latencies:
        await asyncio.sleep(0.05)
    started = time.monotonic()
    for n in range(STREAMS):
        resp = await api(nc, f"STREAM.CREATE.M{n}", {"name": f"M{n}", "subjects": subjects(n)})
        assert "error" not in resp, resp.get("error")
    took = time.monotonic() - started
    stop.set()
    await other
    assert took < ALL_CREATES_WITHIN, f"{STREAMS} creates took {took:.1f} s"
    assert max(latencies) < BYSTANDER_ACK_WITHIN, f"a bystander waited {max(latencies):.1f} s"

    # Publishes find their stream among the 100,000 subjects.
    js = nc.jetstream(timeout=10)
    for n in (0, 5, 9):
        ack = await js.publish(f"m{n:02d}.s09999.x", b"hello")
        assert ack.stream == f"M{n}"
    # An overlapping subject is refused, found through the tree as well.
    resp = await api(nc, "STREAM.CREATE.CLASH", {"name": "CLASH", "subjects": ["m07.*.x"]})
    assert resp["error"]["err_code"] == 10065
    resp = await api(nc, "STREAM.NAMES", {"subject": "m03.>"})
    assert resp["streams"] == ["M3"]
    # An update of a stream of 10,000 subjects (adding one) is checked as quickly.
    started = time.monotonic()
    resp = await api(
        nc, "STREAM.UPDATE.M4", {"name": "M4", "subjects": [*subjects(4), "m04.extra"]}
    )
    assert "error" not in resp, resp.get("error")
    assert time.monotonic() - started < ALL_CREATES_WITHIN / STREAMS


async def test_a_stream_overlapping_itself_is_refused_among_many_subjects(nc: Client) -> None:
    many = [f"big.{i}" for i in range(30_000)]
    resp = await api(nc, "STREAM.CREATE.BIG", {"name": "BIG", "subjects": [*many, "big.*"]})
    assert resp["error"] == {
        "code": 500,
        "err_code": 10052,
        "description": 'subject "big.0" overlaps with "big.*"',
    }
