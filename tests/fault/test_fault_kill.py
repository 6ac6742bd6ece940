"""kill -9 of agents: two agents on one store, killed in turn while publishers and a consumer
work through both. Nothing acknowledged may be lost; nothing is duplicated or reordered."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from fault.jepsen import History, check
from fault.workload import LiveConsumer, Publisher, audit, connect, create_stream
from support.agentproc import AgentProcess
from support.etcdserver import free_port

pytestmark = pytest.mark.fault

PUBLISHERS = 4
DURATION = 16.0
KILL_EVERY = 2.0


@pytest.mark.timeout(240)
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
        started = time.monotonic()
        while time.monotonic() - started < DURATION:
            await asyncio.sleep(KILL_EVERY)
            victim = agents[kills % 2]
            victim.kill()
            kills += 1
            await asyncio.sleep(0.3)
            await asyncio.to_thread(victim.start)
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
    # The run did what it says: both agents served, and many publishes were acknowledged.
    assert kills >= 6 and verdict.acked > 500
