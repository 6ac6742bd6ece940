"""Mirrors and sources in a pool of two agents on one store.

- One agent copies each mirror and each stream's sources at a time (the one holding its
  lease): stream info on that agent says it is active, on the other it does not.
- kill -9 of that agent while the origin takes publishes: the other takes the lease over and
  resumes, and the mirror and the sourced stream end up with every origin message exactly
  once (the mirror at the origin's sequences, the sourced stream with each origin sequence in
  one `Nats-Stream-Source` header).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nats.aio.client import Client
from nats.js.api import StreamSource

from support.agentproc import AgentProcess

TIMEOUT = 60.0
BEFORE = 200
DURING = 300


async def info(nc: Client, stream: str) -> dict[str, Any]:
    msg = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=10)
    answer: dict[str, Any] = json.loads(msg.data)
    return answer


async def wait_for(nc: Client, stream: str, messages: int) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + TIMEOUT
    while True:
        got = await info(nc, stream)
        if got["state"]["messages"] >= messages:
            return got
        assert asyncio.get_running_loop().time() < deadline, got["state"]
        await asyncio.sleep(0.1)


def active(answer: dict[str, Any]) -> bool:
    origins = [answer["mirror"]] if "mirror" in answer else answer["sources"]
    return all(o["active"] >= 0 for o in origins)


async def origin_seqs(nc: Client, stream: str, count: int) -> list[int]:
    """The origin sequence each message of a sourced stream came from, in order."""
    js = nc.jetstream(timeout=10)
    seqs = []
    for seq in range(1, count + 1):
        msg = await js.get_msg(stream, seq)
        assert msg.headers is not None
        seqs.append(int(msg.headers["Nats-Stream-Source"].split(" ")[1]))
    return seqs


async def test_one_agent_copies_and_a_kill_9_loses_and_repeats_nothing(
    two_agents: list[AgentProcess], two_clients: list[Client]
) -> None:
    js = two_clients[0].jetstream(timeout=10)
    await js.add_stream(name="ORIGIN", subjects=["o.>"])
    for i in range(BEFORE):
        await js.publish(f"o.{i % 7}", str(i).encode())
    await js.add_stream(name="MIRROR", mirror=StreamSource(name="ORIGIN"))
    await js.add_stream(name="SOURCED", sources=[StreamSource(name="ORIGIN")])
    for stream in ("MIRROR", "SOURCED"):
        await wait_for(two_clients[0], stream, BEFORE)
    # One agent holds each stream's lease: it says its copying is active, the other not.
    holders = {}
    for stream in ("MIRROR", "SOURCED"):
        answers = [await info(nc, stream) for nc in two_clients]
        running = [i for i, a in enumerate(answers) if active(a)]
        assert len(running) == 1, answers
        holders[stream] = running[0]
    # Kill the agent copying the mirror while the origin takes more publishes on the other.
    victim = holders["MIRROR"]
    survivor = 1 - victim
    publisher = two_clients[survivor].jetstream(timeout=10)
    for i in range(DURING):
        await publisher.publish(f"o.{i % 7}", str(BEFORE + i).encode())
        if i == DURING // 3:
            two_agents[victim].kill()
    total = BEFORE + DURING
    nc = two_clients[survivor]
    mirror = await wait_for(nc, "MIRROR", total)
    assert (mirror["state"]["first_seq"], mirror["state"]["last_seq"]) == (1, total)
    assert mirror["state"]["messages"] == total
    sourced = await wait_for(nc, "SOURCED", total)
    # Given time to copy anything twice, it holds each origin message once.
    await asyncio.sleep(1.0)
    sourced = await info(nc, "SOURCED")
    assert sourced["state"]["messages"] == total
    assert await origin_seqs(nc, "SOURCED", total) == list(range(1, total + 1))
    get = nc.jetstream(timeout=10)
    for seq in (1, BEFORE, BEFORE + DURING // 3 + 1, total):
        copy, original = await get.get_msg("MIRROR", seq), await get.get_msg("ORIGIN", seq)
        assert (copy.subject, copy.data) == (original.subject, original.data)
