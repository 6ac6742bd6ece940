"""A pull request waiting on one agent wakes on another agent's publish by the watch, not a poll.

Agent B holds a waiting pull request; a message is published through agent A; the time from
the publish to the fetch's return is the cross-agent wakeup (plus A's commit). Without the
watch, B would notice A's commits only when its wait on metadata times out
(`POLL_SECONDS`): at a random moment of that wait, half the wakeups would come more than half
a poll late. With an etcd watch (or SQLite's data_version, read every 2 ms) nearly none do.

Each cross-agent wakeup is paired with a same-agent one (the pull waiting on A itself, woken by
A's own commit) measured just before it: the pair shares the machine's load and A's commit, so
their difference is what crossing agents adds. The test counts the wakeups that crossing
delayed by half a poll or more, rather than bounding a latency that a loaded machine inflates
for every path alike. How fast a wakeup is lives in the benchmarks (`bench --scale wakeup`).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.js import JetStreamContext

from infinistream.consumer.service import POLL_SECONDS
from support.agentpool import running_agents
from support.agentproc import AgentProcess
from support.etcdserver import EtcdServer

PAIRS = 20
# Under a poll, about half the pairs would be late by half a poll or more; the watch leaves
# only those that the machine's own hiccups delay (a poll passes this 1 time in 50).
MOST_LATE = PAIRS // 4


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    server = EtcdServer(tmp_path_factory.mktemp("etcd"))
    server.start()
    try:
        yield server
    finally:
        server.close()


async def wakeup(
    publisher: JetStreamContext, sub: JetStreamContext.PullSubscription, payload: bytes
) -> float:
    """Seconds from a publish to the return of a pull request that waited for it."""
    fetching = asyncio.ensure_future(sub.fetch(1, timeout=10))
    # The pull request is waiting, at a random moment of any poll the agent might run.
    await asyncio.sleep(0.15 + random.random() * POLL_SECONDS)
    assert not fetching.done()
    start = time.monotonic()
    await publisher.publish("wake.x", payload)
    got = await fetching
    elapsed = time.monotonic() - start
    assert [m.data for m in got] == [payload]
    return elapsed


async def crossing_delays(a: AgentProcess, b: AgentProcess) -> list[float]:
    """Per pair, the cross-agent wakeup less the same-agent one just before it."""
    nca, ncb = await nats.connect(a.url), await nats.connect(b.url)
    try:
        jsa, jsb = nca.jetstream(timeout=10), ncb.jetstream(timeout=10)
        await jsa.add_stream(name="WAKE", subjects=["wake.>"])
        await jsa.add_consumer("WAKE", durable_name="HERE", ack_policy="none")
        await jsb.add_consumer("WAKE", durable_name="THERE", ack_policy="none")
        here = await jsa.pull_subscribe_bind("HERE", stream="WAKE")
        there = await jsb.pull_subscribe_bind("THERE", stream="WAKE")
        delays = []
        for i in range(PAIRS):
            # Each consumer sees every message: the other's message is first taken unwaited.
            same = await wakeup(jsa, here, b"here %d" % i)
            assert [m.data for m in await there.fetch(1, timeout=10)] == [b"here %d" % i]
            cross = await wakeup(jsa, there, b"there %d" % i)
            assert [m.data for m in await here.fetch(1, timeout=10)] == [b"there %d" % i]
            delays.append(cross - same)
        return delays
    finally:
        await nca.close()
        await ncb.close()


def late(delays: list[float]) -> list[float]:
    return [d for d in delays if d >= POLL_SECONDS / 2]


async def test_a_pull_waiting_on_one_agent_is_woken_by_the_watch_on_another_sqlite(
    store_dir: Path,
) -> None:
    with running_agents(store_dir, linger="1ms") as (a, b):
        delays = await crossing_delays(a, b)
    assert len(late(delays)) <= MOST_LATE, delays


async def test_a_pull_waiting_on_one_agent_is_woken_by_the_watch_on_another_etcd(
    etcd: EtcdServer, tmp_path: Path
) -> None:
    etcd.wipe()
    with running_agents(tmp_path, metadata=etcd.url, linger="1ms") as (a, b):
        delays = await crossing_delays(a, b)
    assert len(late(delays)) <= MOST_LATE, delays
