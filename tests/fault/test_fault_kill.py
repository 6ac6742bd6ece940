"""kill -9 of agents: two agents on one store, killed in turn while publishers and a consumer
work through both. Nothing acknowledged may be lost; nothing is duplicated or reordered.

The run counts kills, not seconds: each kill comes once the agent killed before is ready again
and publishes have been acknowledged since, however long that takes on the machine.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from fault.jepsen import History, check
from fault.workload import (
    SAFETY_NET,
    LiveConsumer,
    Publisher,
    acked,
    audit,
    connect,
    create_stream,
)
from support.agentproc import AgentProcess
from support.etcdserver import free_port

pytestmark = pytest.mark.fault

PUBLISHERS = 4
KILLS = 6
# Publishes acknowledged between two kills (and after the last), counted from the moment the
# agent killed last is ready again: about 2 s of traffic on an idle machine.
ACKS_BETWEEN_KILLS = 150


# Six restarts and their traffic: minutes on a busy machine (each wait has its safety net).
@pytest.mark.timeout(600)
async def test_kill_9_of_agents_loses_nothing_acknowledged(
    tmp_path: Path, fault_report: list[str]
) -> None:
    store = tmp_path / "store"
    ports = [free_port(), free_port()]
    agents = [
        AgentProcess(["-p", str(port), "-sd", str(store), "--linger", "20ms"]) for port in ports
    ]
    for agent in agents:
        agent.start()
    servers = [f"nats://127.0.0.1:{port}" for port in ports]
    try:
        nc = await connect(servers)
        await create_stream(nc)
        await nc.close()
        history = History()
        stop = asyncio.Event()
        consumer = LiveConsumer(servers, history)
        tasks = [
            asyncio.create_task(Publisher(i, servers, history).run(stop)) for i in range(PUBLISHERS)
        ]
        tasks.append(asyncio.create_task(consumer.run(stop)))
        kills = 0
        ready = time.monotonic()
        while kills < KILLS:
            before = f"before kill {kills + 1}"
            await acked(history, ACKS_BETWEEN_KILLS, sent_after=ready, what=before)
            victim = agents[kills % 2]
            victim.kill()
            kills += 1
            await asyncio.sleep(0.3)
            await asyncio.to_thread(victim.start, SAFETY_NET)
            ready = time.monotonic()
        await acked(history, ACKS_BETWEEN_KILLS, sent_after=ready, what="after the last kill")
        stop.set()
        await asyncio.gather(*tasks)
        await consumer.drain(servers)
        stored = await audit(servers)
    finally:
        for agent in agents:
            agent.kill()
    verdict = check("kill -9 of agents", history, stored)
    verdict.notes["kills"] = kills
    fault_report.append(verdict.line())
    print(verdict.line())
    assert verdict.ok, verdict.problems()
    # The run did what it says: every kill was made, each after publishes were acknowledged.
    assert kills == KILLS and verdict.acked >= (KILLS + 1) * ACKS_BETWEEN_KILLS
