"""etcd that fails: a member killed, the leader killed, a majority lost and back, under two
agents sharing a three-member cluster (and one object directory).

A minority lost costs nothing; a leader lost costs an election; with the majority gone no
commit can be made, so nothing is acknowledged until it is back, and then service returns.

Each phase lasts until its events have happened (publishes acknowledged without the member,
refused or unanswered without the majority, acknowledged again), not a number of seconds.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from fault.jepsen import History, check
from fault.workload import (
    LiveConsumer,
    Publisher,
    acked,
    audit,
    connect,
    create_stream,
    not_acked,
    until,
)
from support.agentproc import AgentProcess
from support.etcdserver import EtcdServer, free_port

pytestmark = pytest.mark.fault

PUBLISHERS = 3
MARGIN = 0.1
# Publishes each phase waits for: acknowledged while a member is down or after it is back,
# refused or unanswered while the majority is down.
ACKS = 50
NOT_ACKED = 10


async def leader(etcd: EtcdServer) -> int:
    """The member that leads, once one does (an election may be under way)."""
    found: list[int] = []

    def elected() -> bool:
        try:
            found.append(etcd.leader())
        except RuntimeError:
            return False
        return True

    await until(elected, "an etcd leader")
    return found[-1]


@pytest.mark.timeout(600)
async def test_etcd_member_leader_and_majority_loss(
    tmp_path: Path, fault_report: list[str]
) -> None:
    etcd = EtcdServer(tmp_path / "etcd", members=3)
    etcd.start()
    ports = [free_port(), free_port()]
    agents = [
        AgentProcess(
            [
                "-p",
                str(port),
                "-sd",
                str(tmp_path / "store"),
                "--metadata",
                etcd.url,
                "--linger",
                "20ms",
            ]
        )
        for port in ports
    ]
    try:
        for agent in agents:
            agent.start()
        servers = [f"nats://127.0.0.1:{port}" for port in ports]
        nc = await connect(servers)
        await create_stream(nc)
        await nc.close()
        history = History()
        stop = asyncio.Event()
        consumer = LiveConsumer(servers, history)
        tasks = [
            asyncio.create_task(Publisher(i, servers, history, pace=0.01).run(stop))
            for i in range(PUBLISHERS)
        ]
        tasks.append(asyncio.create_task(consumer.run(stop)))
        marks: dict[str, float] = {}
        await acked(history, ACKS, sent_after=0.0, what="with every member")
        first_leader = await leader(etcd)
        follower = next(i for i in range(3) if i != first_leader)
        marks["follower-down"] = time.monotonic()
        etcd.stop_member(follower, kill=True)
        await acked(history, ACKS, sent_after=marks["follower-down"], what="without a follower")
        await asyncio.to_thread(etcd.start_member, follower)
        marks["follower-up"] = time.monotonic()
        await acked(history, ACKS, sent_after=marks["follower-up"], what="with the follower back")
        old_leader = await leader(etcd)
        marks["leader-down"] = time.monotonic()
        etcd.stop_member(old_leader, kill=True)
        await acked(history, ACKS, sent_after=marks["leader-down"], what="after an election")
        await asyncio.to_thread(etcd.start_member, old_leader)
        marks["leader-up"] = time.monotonic()
        await acked(history, ACKS, sent_after=marks["leader-up"], what="with the leader back")
        majority = [0, 1]
        marks["majority-down"] = time.monotonic()
        for i in majority:
            etcd.stop_member(i, kill=True)
        without = marks["majority-down"] + MARGIN
        await not_acked(history, NOT_ACKED, sent_after=without, what="without the majority")
        marks["majority-restarting"] = time.monotonic()
        await asyncio.gather(*(asyncio.to_thread(etcd.start_member, i) for i in majority))
        marks["majority-up"] = time.monotonic()
        await acked(history, ACKS, sent_after=marks["majority-up"], what="with the majority back")
        stop.set()
        await asyncio.gather(*tasks)
        await consumer.drain(servers)
        stored = await audit(servers)
    finally:
        for agent in agents:
            agent.kill()
        etcd.close()
    verdict = check("etcd member, leader and majority loss", history, stored)

    def acked_in(start: float, end: float) -> int:
        return len([k for k, s in history.sent.items() if s.seq and start <= s.answered_at < end])

    verdict.notes["acked-without-follower"] = acked_in(marks["follower-down"], marks["follower-up"])
    verdict.notes["acked-without-majority"] = len(
        history.acked_between(
            marks["majority-down"],
            marks["majority-restarting"],
            sent_after=marks["majority-down"] + MARGIN,
        )
    )
    back = [
        s.answered_at - marks["majority-up"]
        for s in history.sent.values()
        if s.seq and s.at >= marks["majority-up"]
    ]
    verdict.notes["back-after-majority-s"] = round(min(back), 1) if back else None
    fault_report.append(verdict.line())
    print(verdict.line())
    assert verdict.ok, verdict.problems()
    assert verdict.notes["acked-without-follower"] >= ACKS
    assert verdict.notes["acked-without-majority"] == 0
    assert back
