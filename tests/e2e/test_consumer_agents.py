"""One durable pull consumer served by two agent processes at once (same -sd, different ports).

A consumer's state lives in metadata and changes only by compare-and-set, so any agent serves
any fetch or ack: two agents never hand out the same message (redelivery aside), a killed
agent's unacknowledged deliveries come back through the other after ack_wait, a request
waiting on one agent is woken by a commit through the other, and an ack counts wherever it
arrives.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig

from support.agentpool import connected, running_agents


async def make_consumer(
    js: JetStreamContext, stream: str, durable: str, n: int, ack_wait: float = 30.0
) -> None:
    await js.add_stream(name=stream, subjects=[f"{stream.lower()}.>"])
    acks = await asyncio.gather(
        *(js.publish(f"{stream.lower()}.{i % 3}", b"m-%d" % i) for i in range(1, n + 1))
    )
    assert sorted(a.seq for a in acks) == list(range(1, n + 1))
    await js.add_consumer(
        stream,
        ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT, ack_wait=ack_wait),
    )


async def fetch_some(
    psub: JetStreamContext.PullSubscription, batch: int, timeout: float
) -> list[Msg]:
    try:
        return await psub.fetch(batch, timeout=timeout)
    except TimeoutError:  # nats-py raises both its own and asyncio's
        return []


async def test_two_agents_share_one_durable_consumer_without_double_delivery(
    two_clients: list[Client],
) -> None:
    nc_a, nc_b = two_clients
    js_a, js_b = nc_a.jetstream(timeout=10), nc_b.jetstream(timeout=10)
    n = 300
    await make_consumer(js_a, "SHARE", "WORK", n)
    seen: dict[str, list[Msg]] = {"a": [], "b": []}
    total = 0
    deadline = time.monotonic() + 30

    async def worker(js: JetStreamContext, tag: str) -> None:
        nonlocal total
        psub = await js.pull_subscribe_bind("WORK", stream="SHARE")
        while total < n and time.monotonic() < deadline:
            for msg in await fetch_some(psub, 7, 0.5):
                seen[tag].append(msg)
                total += 1
                await msg.ack()
        await psub.unsubscribe()

    # One client per agent, two fetch loops on each: all four race for the same consumer.
    await asyncio.gather(worker(js_a, "a"), worker(js_b, "b"), worker(js_a, "a"), worker(js_b, "b"))
    every = seen["a"] + seen["b"]
    seqs = sorted(m.metadata.sequence.stream for m in every)
    assert seqs == list(range(1, n + 1)), "a message was lost or handed out twice"
    assert all(m.metadata.num_delivered == 1 for m in every), "a redelivery without a reason"
    # Published concurrently, so which payload got which sequence is not known; the set is.
    assert sorted(m.data for m in every) == sorted(b"m-%d" % i for i in range(1, n + 1))
    # Consumer sequences are per delivery: with no redelivery they are exactly 1..n too.
    assert sorted(m.metadata.sequence.consumer for m in every) == list(range(1, n + 1))
    assert seen["a"] and seen["b"], "one agent served everything: nothing ran concurrently"
    await nc_a.flush()
    await nc_b.flush()
    for _ in range(100):
        info = await js_b.consumer_info("SHARE", "WORK")
        if info.num_ack_pending == 0:
            break
        await asyncio.sleep(0.05)
    assert (info.delivered.stream_seq, info.delivered.consumer_seq) == (n, n)
    assert (info.ack_floor.stream_seq, info.num_ack_pending, info.num_pending) == (n, 0, 0)
    assert info.num_redelivered == 0
    # Both agents report the same progress (num_waiting and the leader name are their own).
    progress = []
    for js in (js_a, js_b):
        i = await js.consumer_info("SHARE", "WORK")
        progress.append((i.delivered, i.ack_floor, i.num_ack_pending, i.num_pending))
    assert progress[0] == progress[1]


async def test_unacked_deliveries_of_a_killed_agent_are_redelivered_by_the_other(
    store_dir: Path,
) -> None:
    ack_wait = 1.0
    with running_agents(store_dir) as (victim, survivor):
        async with connected(victim, survivor, allow_reconnect=False) as (nc_v, nc_s):
            js_v, js_s = nc_v.jetstream(timeout=10), nc_s.jetstream(timeout=10)
            await make_consumer(js_s, "KILL", "K", 10, ack_wait=ack_wait)
            psub_v = await js_v.pull_subscribe_bind("K", stream="KILL")
            got = await psub_v.fetch(10, timeout=5)
            delivered_at = time.monotonic()
            assert [m.metadata.sequence.stream for m in got] == list(range(1, 11))
            acked = {1, 2, 5, 8}
            for msg in got:
                if msg.metadata.sequence.stream in acked:
                    await msg.ack_sync()  # answered only once the ack is committed
            victim.kill()

            psub_s = await js_s.pull_subscribe_bind("K", stream="KILL")
            redelivered: list[Msg] = []
            while len(redelivered) < 6 and time.monotonic() < delivered_at + 10:
                redelivered += await fetch_some(psub_s, 10, 1.0)
            came_back = time.monotonic()
            by_seq = {m.metadata.sequence.stream: m for m in redelivered}
            assert sorted(by_seq) == sorted(set(range(1, 11)) - acked)
            assert len(redelivered) == 6, "a message came back twice"
            assert all(m.metadata.num_delivered == 2 for m in redelivered)
            for m in redelivered:
                original = got[m.metadata.sequence.stream - 1]
                assert m.data == original.data
            # Not before ack_wait: the survivor honours the deadlines the victim committed.
            assert came_back - delivered_at >= ack_wait - 0.1
            for msg in redelivered:
                await msg.ack_sync()

            # Nothing acked, before the kill or after it, ever comes back.
            assert await fetch_some(psub_s, 10, ack_wait * 1.5) == []
            info = await js_s.consumer_info("KILL", "K")
            assert (info.delivered.stream_seq, info.delivered.consumer_seq) == (10, 16)
            assert (info.ack_floor.stream_seq, info.num_ack_pending, info.num_redelivered) == (
                10,
                0,
                0,
            )


async def test_a_fetch_waiting_on_one_agent_is_woken_by_a_publish_through_the_other(
    two_clients: list[Client],
) -> None:
    nc_a, nc_b = two_clients
    js_a, js_b = nc_a.jetstream(timeout=10), nc_b.jetstream(timeout=10)
    await make_consumer(js_a, "WAKE", "W", 0)
    psub_b = await js_b.pull_subscribe_bind("W", stream="WAKE")
    latencies = []
    for i in range(3):
        fetch = asyncio.create_task(psub_b.fetch(1, timeout=5))
        # Wait until B holds the request (num_waiting counts the requests of the agent asked).
        for _ in range(100):
            if (await js_b.consumer_info("WAKE", "W")).num_waiting == 1:
                break
            await asyncio.sleep(0.02)
        else:
            pytest.fail("the fetch never waited on agent B")
        await asyncio.sleep(0.3)  # B is idle, long past its first look at the stream
        sent = time.monotonic()
        ack = await js_a.publish("wake.x", b"wake-%d" % i)
        (msg,) = await fetch
        latency = time.monotonic() - sent
        latencies.append(latency)
        assert (msg.data, msg.metadata.sequence.stream) == (b"wake-%d" % i, ack.seq)
        await msg.ack_sync()
    # Well within the fetch's 5 s: a flush interval (10 ms here) plus B's 0.1 s poll of
    # metadata (about 50 ms measured), with room for a slow machine.
    assert max(latencies) < 0.5, latencies


async def test_acks_count_through_whichever_agent_they_reach(
    two_clients: list[Client],
) -> None:
    nc_a, nc_b = two_clients
    js_a, js_b = nc_a.jetstream(timeout=10), nc_b.jetstream(timeout=10)
    await make_consumer(js_a, "XACK", "X", 4)
    psub_a = await js_a.pull_subscribe_bind("X", stream="XACK")
    got = await psub_a.fetch(4, timeout=5)
    assert [m.metadata.sequence.stream for m in got] == [1, 2, 3, 4]
    m1, m2, m3, m4 = got

    # A plain +ACK published on a connection to B, as msg.ack() would from a client there.
    await nc_b.publish(m1.reply, b"+ACK")
    await nc_b.flush()
    for _ in range(100):
        info = await js_a.consumer_info("XACK", "X")
        if info.ack_floor.stream_seq == 1:
            break
        await asyncio.sleep(0.02)
    assert (info.ack_floor.stream_seq, info.num_ack_pending) == (1, 3)

    # An ack with a reply (what ack_sync sends) is answered by B once committed: A sees it
    # at once.
    await nc_b.request(m3.reply, b"+ACK", timeout=5)
    info = await js_a.consumer_info("XACK", "X")
    assert (info.ack_floor.stream_seq, info.num_ack_pending) == (1, 2)

    # A -NAK through B: A redelivers it at once.
    await nc_b.request(m2.reply, b"-NAK", timeout=5)
    (again,) = await psub_a.fetch(1, timeout=5)
    assert (again.metadata.sequence.stream, again.metadata.num_delivered) == (2, 2)
    assert again.data == m2.data

    # +TERM of the redelivery and +ACK of the last one, both through B.
    await nc_b.request(again.reply, b"+TERM", timeout=5)
    await nc_b.request(m4.reply, b"+ACK", timeout=5)
    for js in (js_a, js_b):
        info = await js.consumer_info("XACK", "X")
        assert (info.delivered.stream_seq, info.delivered.consumer_seq) == (4, 5)
        assert (info.ack_floor.stream_seq, info.ack_floor.consumer_seq) == (4, 5)
        assert (info.num_ack_pending, info.num_redelivered, info.num_pending) == (0, 0, 0)
    assert await fetch_some(psub_a, 4, 0.5) == []
