"""Push consumers with subscribers on two agents of one store.

Each agent delivers to its own subscribers and claims through the shared consumer state: a
deliver group spread over two agents gets every message once, a consumer created through one
agent is served by the other where its subscriber is, and what a killed agent delivered but
nobody acked goes out again, through the other agent, after ack_wait. (One nats-server has no
such thing to compare with; the single-server behaviour is compared in test_push.py.)
"""

from __future__ import annotations

import asyncio

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig

from support.agentproc import AgentProcess
from support.polling import until
from support.written import written


async def test_a_deliver_group_over_two_agents_gets_each_message_once(
    two_clients: list[Client],
) -> None:
    nc_a, nc_b = two_clients
    js_a, js_b = nc_a.jetstream(timeout=10), nc_b.jetstream(timeout=10)
    await js_a.add_stream(name="S", subjects=["s.>"])
    got: dict[str, list[int]] = {"a": [], "b": []}
    total = 300
    done = asyncio.Event()

    def handler(member: str) -> object:
        async def cb(msg: Msg) -> None:
            got[member].append(msg.metadata.sequence.stream)
            await msg.ack()
            if len(got["a"]) + len(got["b"]) >= total:
                done.set()

        return cb

    # Created through A; B's member subscribes to a consumer it learns of from the directory.
    await js_a.subscribe("s.>", queue="workers", cb=handler("a"), manual_ack=True)  # type: ignore[arg-type]
    await js_b.subscribe("s.>", queue="workers", cb=handler("b"), manual_ack=True)  # type: ignore[arg-type]
    for i in range(total):
        await (js_a if i % 2 else js_b).publish(f"s.{i}", b"%d" % i)
    await asyncio.wait_for(done.wait(), 30)
    await asyncio.sleep(0.5)
    assert sorted(got["a"] + got["b"]) == list(range(1, total + 1))
    assert got["a"] and got["b"], "both agents delivered to their own member"

    async def all_acked() -> bool:
        # Acks are fire-and-forget: each agent commits those it received with its next claim.
        info = await js_a.consumer_info("S", "workers")
        return info.num_ack_pending == 0 and info.ack_floor.stream_seq == total

    await until(all_acked, 30, "every ack committed")


async def test_a_subscriber_on_another_agent_is_served_within_a_poll(
    two_clients: list[Client],
) -> None:
    nc_a, nc_b = two_clients
    js_a = nc_a.jetstream(timeout=10)
    await js_a.add_stream(name="S", subjects=["s.>"])
    await js_a.publish("s.1", b"one")
    sub = await nc_b.subscribe("elsewhere.in")
    await written(nc_b)
    # Created through A after B's client subscribed.
    await js_a.add_consumer("S", ConsumerConfig(durable_name="far", deliver_subject="elsewhere.in"))
    msg = await sub.next_msg(timeout=10)
    assert (msg.subject, msg.data) == ("s.1", b"one")


async def test_a_killed_agents_unacked_deliveries_come_again_through_the_other(
    two_agents: list[AgentProcess], two_clients: list[Client]
) -> None:
    a, _ = two_agents
    nc_a, nc_b = two_clients
    js_a, js_b = nc_a.jetstream(timeout=10), nc_b.jetstream(timeout=10)
    await js_a.add_stream(name="S", subjects=["s.>"])
    for i in range(5):
        await js_a.publish(f"s.{i}", b"%d" % i)
    sub_a = await nc_a.subscribe("work.in")
    await js_a.add_consumer(
        "S",
        ConsumerConfig(
            durable_name="w", deliver_subject="work.in", ack_policy=AckPolicy.EXPLICIT, ack_wait=1
        ),
    )
    first = [await sub_a.next_msg(timeout=10) for _ in range(5)]
    await first[0].ack_sync()
    a.kill()
    sub_b = await nc_b.subscribe("work.in")
    again = [await sub_b.next_msg(timeout=15) for _ in range(4)]
    assert sorted(m.metadata.sequence.stream for m in again) == [2, 3, 4, 5]
    assert {m.metadata.num_delivered for m in again} == {2}
    for msg in again:
        await msg.ack_sync()
    info = await js_b.consumer_info("S", "w")
    assert info.num_ack_pending == 0 and info.ack_floor.stream_seq == 5
