"""Agents on many machines: metadata in an etcd cluster, objects in one shared store.

Two agent processes share nothing but a three-member etcd and the object directory, as agents on
different hosts share etcd and a bucket. Everything one agent acknowledges, the other serves;
a consumer is shared between them; an etcd member going down does not stop them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from support.agentpool import running_agents
from support.agentproc import AgentProcess
from support.etcdserver import EtcdServer


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    server = EtcdServer(tmp_path_factory.mktemp("etcd"), members=3)
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def two_agents(etcd: EtcdServer, tmp_path: Path) -> Iterator[list[AgentProcess]]:
    """This module's pair: on etcd, each with a directory of its own, the objects shared."""
    etcd.wipe()
    with running_agents(tmp_path, metadata=etcd.url, linger="20ms") as agents:
        yield agents


async def test_what_one_agent_acknowledges_the_other_serves(
    two_agents: list[AgentProcess],
) -> None:
    a, b = two_agents
    nca, ncb = await nats.connect(a.url), await nats.connect(b.url)
    try:
        jsa, jsb = nca.jetstream(timeout=10), ncb.jetstream(timeout=10)
        await jsa.add_stream(name="ORDERS", subjects=["orders.>"])
        acks = await asyncio.gather(
            *(
                js.publish("orders.new", f"{name}{i}".encode())
                for i in range(50)
                for name, js in (("a", jsa), ("b", jsb))
            )
        )
        seqs = sorted(ack.seq for ack in acks)
        assert seqs == list(range(1, 101))
        for js in (jsa, jsb):
            info = await js.stream_info("ORDERS")
            assert info.state.messages == 100
            assert (await js.get_msg("ORDERS", 77)).data == (await jsa.get_msg("ORDERS", 77)).data
    finally:
        await nca.close()
        await ncb.close()


async def test_one_consumer_served_by_both_agents(
    two_agents: list[AgentProcess],
) -> None:
    a, b = two_agents
    nca, ncb = await nats.connect(a.url), await nats.connect(b.url)
    try:
        jsa, jsb = nca.jetstream(timeout=10), ncb.jetstream(timeout=10)
        await jsa.add_stream(name="WORK", subjects=["work.>"])
        for i in range(60):
            await jsb.publish("work.item", str(i).encode())
        config = ConsumerConfig(durable_name="W", ack_policy=AckPolicy.EXPLICIT)
        subs = [
            await jsa.pull_subscribe("work.>", durable="W", config=config),
            await jsb.pull_subscribe("work.>", durable="W", config=config),
        ]
        seen: list[int] = []

        async def drain(sub: nats.js.JetStreamContext.PullSubscription) -> None:
            while len(seen) < 60:
                try:
                    msgs = await sub.fetch(7, timeout=1)
                except TimeoutError:
                    # Once the other agent holds the last messages, this fetch waits out its
                    # expiry. nats.py then raises its own TimeoutError if its timer fires first,
                    # or asyncio's if the server's 408 arrives first: catch their common base.
                    continue
                for msg in msgs:
                    assert msg.metadata.num_delivered == 1
                    seen.append(msg.metadata.sequence.stream)
                    await msg.ack_sync()

        await asyncio.wait_for(asyncio.gather(*(drain(s) for s in subs)), 60)
        assert sorted(seen) == list(range(1, 61))
        info = await jsb.consumer_info("WORK", "W")
        assert info.num_ack_pending == 0
        assert info.ack_floor.stream_seq == 60
    finally:
        await nca.close()
        await ncb.close()


async def test_agents_keep_serving_when_an_etcd_member_stops(
    etcd: EtcdServer, two_agents: list[AgentProcess]
) -> None:
    a, b = two_agents
    nc = await nats.connect(a.url)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="HA", subjects=["ha.>"])
        await js.publish("ha.x", b"before")
        follower = next(i for i in range(3) if i != etcd.leader())
        etcd.stop_member(follower, kill=True)
        try:
            ack = await js.publish("ha.x", b"during")
            assert ack.seq == 2
            ncb = await nats.connect(b.url)
            try:
                msg = await ncb.jetstream(timeout=10).get_msg("HA", 2)
                assert msg.data == b"during"
            finally:
                await ncb.close()
        finally:
            etcd.start_member(follower)
    finally:
        await nc.close()
