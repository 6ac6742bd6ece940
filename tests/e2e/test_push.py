"""Push consumers with nats-py, run against an agent and against nats-server.

`js.subscribe` (ephemeral, durable, queue groups, ordered consumers), acks, redelivery,
max_ack_pending, headers_only, flow control and idle heartbeats as a subscriber sees them on the
wire, deliver subject changes, push_bound, and nats-server's errors for push configs that make
no sense. Every test runs against both servers: what passes against nats-server is the
behaviour the agent must have.
"""

from __future__ import annotations

import asyncio
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from support.jsapi import api, error, status
from support.polling import until
from support.servers import Server

S = 1_000_000_000


async def stream(js: JetStreamContext, **kw: Any) -> None:
    await js.add_stream(name="S", subjects=["s.>"], **kw)


async def publish(js: JetStreamContext, n: int, subject: str = "s.{}", size: int = 0) -> None:
    for i in range(n):
        data = b"%d" % i if not size else bytes([i % 256]) * size
        await js.publish(subject.format(i), data)


async def take(sub: Any, n: int, timeout: float = 10) -> list[Msg]:
    return [await sub.next_msg(timeout=timeout) for _ in range(n)]


async def unbound(js: JetStreamContext, stream: str, name: str, limit: float = 10) -> bool:
    """Whether the push consumer comes unbound (`push_bound` false) within `limit` seconds."""
    deadline = asyncio.get_running_loop().time() + limit
    while (await js.consumer_info(stream, name)).push_bound:
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def nothing_more(sub: Any, wait: float = 0.5) -> bool:
    try:
        await sub.next_msg(timeout=wait)
    except nats.errors.TimeoutError:
        return True
    return False


# -- js.subscribe ---------------------------------------------------------------------------


async def test_ordered_consumer_gets_every_message_in_order(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js)
    await publish(js, 5)
    sub = await js.subscribe("s.>", ordered_consumer=True)
    first = await take(sub, 5)
    assert [(m.subject, m.data) for m in first] == [(f"s.{i}", b"%d" % i) for i in range(5)]
    assert [m.metadata.sequence.consumer for m in first] == [1, 2, 3, 4, 5]
    assert [m.metadata.num_pending for m in first] == [4, 3, 2, 1, 0]
    # Published after the subscription: pushed as it arrives.
    await publish(js, 3, "s.late.{}")
    late = await take(sub, 3)
    assert [m.subject for m in late] == ["s.late.0", "s.late.1", "s.late.2"]
    assert [m.metadata.sequence.stream for m in late] == [6, 7, 8]
    info = await sub.consumer_info()
    cfg = info.config
    assert (cfg.ack_policy, cfg.flow_control, cfg.idle_heartbeat) == (AckPolicy.NONE, True, 5.0)
    assert (cfg.max_deliver, cfg.filter_subject, cfg.inactive_threshold) == (1, "s.>", 5.0)
    assert info.push_bound is True
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (8, 8)
    # Ack none: the floor is what was delivered.
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (8, 8)
    assert info.num_pending == 0 and info.num_ack_pending == 0


async def test_durable_push_consumer_with_acks_and_redelivery(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js)
    await publish(js, 4)
    sub = await js.subscribe(
        "s.>", durable="d", manual_ack=True, config=ConsumerConfig(ack_wait=1.0)
    )
    msgs = await take(sub, 4)
    assert [m.metadata.sequence.stream for m in msgs] == [1, 2, 3, 4]
    await msgs[0].ack_sync()
    await msgs[1].ack_sync()
    await msgs[3].ack_sync()
    # The unacked one comes again after ack_wait, its delivery count raised.
    again = await sub.next_msg(timeout=10)
    assert (again.metadata.sequence.stream, again.metadata.num_delivered) == (3, 2)
    assert again.metadata.sequence.consumer == 5
    await again.ack_sync()
    info = await js.consumer_info("S", "d")
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (5, 4)
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (5, 4)
    assert (info.num_ack_pending, info.num_redelivered, info.num_pending) == (0, 0, 0)
    assert info.config.deliver_subject and info.push_bound is True
    await sub.unsubscribe()
    await server_nc.flush()
    # The server learns of the lost interest on its own time (nats-server through its internal
    # interest notifications): the consumer comes unbound, however long that takes.
    assert await unbound(js, "S", "d")
    # Bound again: delivery resumes where the consumer is.
    await publish(js, 1, "s.again.{}")
    sub = await js.subscribe("s.>", durable="d", manual_ack=True)
    msg = await sub.next_msg(timeout=10)
    assert (msg.subject, msg.metadata.sequence.stream, msg.metadata.sequence.consumer) == (
        "s.again.0",
        5,
        6,
    )


async def test_a_bound_durable_refuses_a_second_subscriber(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js)
    await js.subscribe("s.>", durable="one")
    with pytest.raises(nats.js.errors.Error, match="already bound"):
        await js.subscribe("s.>", durable="one")


async def test_deliver_group_shares_messages_between_its_members(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js)
    got: dict[str, list[int]] = {"a": [], "b": []}
    done = asyncio.Event()

    def handler(member: str) -> Any:
        async def cb(msg: Msg) -> None:
            got[member].append(msg.metadata.sequence.stream)
            if len(got["a"]) + len(got["b"]) >= 60:
                done.set()

        return cb

    await js.subscribe("s.>", queue="workers", cb=handler("a"))
    await js.subscribe("s.>", queue="workers", cb=handler("b"))
    info = await js.consumer_info("S", "workers")
    assert (info.config.deliver_group, info.config.durable_name) == ("workers", "workers")
    await publish(js, 60)
    await asyncio.wait_for(done.wait(), 20)
    await asyncio.sleep(0.3)
    # Each message to one member only, and every message to some member.
    assert sorted(got["a"] + got["b"]) == list(range(1, 61))
    info = await js.consumer_info("S", "workers")
    assert info.num_ack_pending == 0 and info.ack_floor.stream_seq == 60


async def test_max_ack_pending_holds_delivery_until_acks(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js)
    await publish(js, 5)
    sub = await js.subscribe(
        "s.>", durable="m", manual_ack=True, config=ConsumerConfig(max_ack_pending=2)
    )
    first = await take(sub, 2)
    assert await nothing_more(sub)
    await first[0].ack()
    third = await sub.next_msg(timeout=10)
    assert third.metadata.sequence.stream == 3
    assert await nothing_more(sub)


async def test_headers_only_pushes_the_size_instead_of_the_data(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js)
    await js.publish("s.h", b"twelve bytes", headers={"k": "v"})
    sub = await js.subscribe("s.>", ordered_consumer=True, headers_only=True)
    msg = await sub.next_msg(timeout=10)
    assert msg.data == b""
    assert msg.headers is not None
    assert (msg.headers["k"], msg.headers["Nats-Msg-Size"]) == ("v", "12")


async def test_deliver_policies_of_push_consumers(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js)
    for key, value in [("a", b"1"), ("b", b"2"), ("a", b"3")]:
        await js.publish(f"s.{key}", value)
    sub = await js.subscribe(
        "s.>", ordered_consumer=True, deliver_policy=DeliverPolicy.LAST_PER_SUBJECT
    )
    msgs = await take(sub, 2)
    assert [(m.subject, m.data) for m in msgs] == [("s.b", b"2"), ("s.a", b"3")]
    new = await js.subscribe("s.>", ordered_consumer=True, deliver_policy=DeliverPolicy.NEW)
    await js.publish("s.c", b"4")
    assert (await new.next_msg(timeout=10)).data == b"4"


async def test_an_unsubscribed_ephemeral_goes_after_its_inactive_threshold(
    server_nc: Client,
) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js)
    sub = await js.subscribe("s.>", ordered_consumer=True, inactive_threshold=1.0)
    name = (await sub.consumer_info()).name
    # Subscribed: in use however long it waits.
    await asyncio.sleep(2.5)
    assert (await js.consumer_info("S", name)).push_bound is True
    await sub.unsubscribe()
    for _ in range(100):
        await asyncio.sleep(0.1)
        if name not in [c.name for c in await js.consumers_info("S")]:
            break
    with pytest.raises(nats.js.errors.NotFoundError):
        await js.consumer_info("S", name)


async def test_ack_all_and_interest_retention_with_push(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js, retention="interest")
    sub = await js.subscribe(
        "s.>", durable="all", manual_ack=True, config=ConsumerConfig(ack_policy=AckPolicy.ALL)
    )
    await publish(js, 4)
    msgs = await take(sub, 4)
    # One ack for everything up to it; an interest stream then lets those messages go.
    await msgs[2].ack_sync()
    info = await js.consumer_info("S", "all")
    assert (info.ack_floor.stream_seq, info.num_ack_pending) == (3, 1)
    for _ in range(50):
        if (await js.stream_info("S")).state.messages == 1:
            break
        await asyncio.sleep(0.1)
    assert (await js.stream_info("S")).state.messages == 1


async def test_rate_limit_slows_delivery(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js, max_msg_size=200 * 1024)
    await publish(js, 30, size=100 * 1024)
    sub = await js.subscribe(
        "s.>",
        durable="slow",
        config=ConsumerConfig(ack_policy=AckPolicy.NONE, rate_limit_bps=8 * 1024 * 1024),
    )
    started = asyncio.get_running_loop().time()
    msgs = await take(sub, 30, timeout=20)
    elapsed = asyncio.get_running_loop().time() - started
    assert [m.metadata.sequence.stream for m in msgs] == list(range(1, 31))
    # 3 MiB at 1 MiB/s (nats-server lets up to max_msg_size through at once): over a second,
    # where unlimited delivery takes a fraction of that.
    assert elapsed > 1.0


# -- on the wire ----------------------------------------------------------------------------


async def test_idle_heartbeats_name_the_last_sequences(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js)
    await publish(js, 3)
    inbox = server_nc.new_inbox()
    sub = await server_nc.subscribe(inbox)
    await js.add_consumer(
        "S",
        ConsumerConfig(
            durable_name="hb", deliver_subject=inbox, ack_policy=AckPolicy.NONE, idle_heartbeat=0.2
        ),
    )
    msgs = await take(sub, 3)
    assert [m.subject for m in msgs] == ["s.0", "s.1", "s.2"]
    beat = await sub.next_msg(timeout=5)
    assert status(beat) == ("100", "Idle Heartbeat")
    assert beat.subject == inbox and beat.reply == "" and beat.data == b""
    assert beat.headers is not None
    assert (beat.headers["Nats-Last-Consumer"], beat.headers["Nats-Last-Stream"]) == ("3", "3")


async def test_flow_control_stalls_delivery_until_answered(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js, max_msg_size=2 * 1024 * 1024)
    # 4 MiB in 100 KiB messages: nats-server's first window is 2 MiB, asked about at half.
    size, count = 100 * 1024, 40
    await publish(js, count, size=size)
    inbox = server_nc.new_inbox()
    sub = await server_nc.subscribe(inbox, pending_bytes_limit=64 * 1024 * 1024)
    await js.add_consumer(
        "S",
        ConsumerConfig(
            durable_name="fc",
            deliver_subject=inbox,
            ack_policy=AckPolicy.NONE,
            flow_control=True,
            idle_heartbeat=0.5,
        ),
    )
    data: list[Msg] = []
    requests: list[Msg] = []
    stalled: list[Msg] = []
    while not stalled:
        msg = await sub.next_msg(timeout=10)
        code, description = status(msg)
        if not code:
            data.append(msg)
        elif description == "FlowControl Request":
            requests.append(msg)
        elif description == "Idle Heartbeat" and msg.headers.get("Nats-Consumer-Stalled"):
            stalled.append(msg)
    # Delivery stopped short of everything, waiting on the one unanswered request.
    assert len(requests) == 1 and 0 < len(data) < count
    fc = requests[0]
    assert fc.subject == inbox and fc.reply.startswith("$JS.FC.S.fc.")
    assert stalled[0].headers["Nats-Consumer-Stalled"] == fc.reply
    # Answering lets the rest through (answering each further request as a client does).
    await server_nc.publish(fc.reply, b"")
    while len(data) < count:
        msg = await sub.next_msg(timeout=10)
        code, description = status(msg)
        if not code:
            data.append(msg)
        elif description == "FlowControl Request":
            await server_nc.publish(msg.reply, b"")
    assert [m.metadata.sequence.stream for m in data] == list(range(1, count + 1))


async def test_ordered_consumer_with_flow_control_takes_many_large_messages(
    server_nc: Client,
) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js, max_msg_size=2 * 1024 * 1024)
    count = 60
    await publish(js, count, size=128 * 1024)
    sub = await js.subscribe("s.>", ordered_consumer=True)
    msgs = await take(sub, count, timeout=20)
    assert [m.metadata.sequence.stream for m in msgs] == list(range(1, count + 1))
    assert all(len(m.data) == 128 * 1024 for m in msgs)


# -- changing the deliver subject ------------------------------------------------------------


async def test_deliver_subject_moves_and_pending_messages_follow(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js)
    await publish(js, 2)
    first, second = server_nc.new_inbox(), server_nc.new_inbox()
    sub = await server_nc.subscribe(first)
    cfg = ConsumerConfig(durable_name="mv", deliver_subject=first, ack_policy=AckPolicy.EXPLICIT)
    await js.add_consumer("S", cfg)
    msgs = await take(sub, 2)
    await msgs[0].ack_sync()
    # Bound: the deliver subject may not move.
    cfg.deliver_subject = second
    resp = await api(server_nc, "CONSUMER.CREATE.S.mv", {"stream_name": "S", "config": _wire(cfg)})
    assert error(resp) == (400, 10013, "consumer name already in use")
    await sub.unsubscribe()
    await server_nc.flush()
    await asyncio.sleep(0.2)
    # Unbound: it moves, and the unacked message goes out again to the new subject.
    sub2 = await server_nc.subscribe(second)
    info = await js.add_consumer("S", cfg)
    assert info.config.deliver_subject == second
    again = await sub2.next_msg(timeout=10)
    assert (again.metadata.sequence.stream, again.metadata.num_delivered) == (2, 2)


def _wire(cfg: ConsumerConfig) -> dict[str, Any]:
    return cfg.as_dict()  # type: ignore[no-any-return]


# -- refused configs -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {"flow_control": True},
            (400, 10108, "consumer with flow control also needs heartbeats"),
        ),
        ({"deliver_subject": "a..b"}, (400, 10112, "invalid push consumer deliver subject")),
        ({"deliver_subject": "d.*"}, (400, 10079, "consumer deliver subject has wildcards")),
        ({"deliver_subject": "d.>"}, (400, 10079, "consumer deliver subject has wildcards")),
        ({"deliver_subject": "s.x"}, (400, 10081, "consumer deliver subject forms a cycle")),
        (
            {"max_waiting": 10},
            (400, 10080, "consumer in push mode can not set max waiting"),
        ),
        (
            {"ack_policy": "none", "max_ack_pending": 5},
            (400, 10082, "consumer requires ack policy for max ack pending"),
        ),
        (
            {"idle_heartbeat": 50_000_000},
            (400, 10083, "consumer idle heartbeat needs to be >= 100ms"),
        ),
        # Several wrongs: the first in nats-server's order is the one reported.
        (
            {"flow_control": True, "idle_heartbeat": 50_000_000, "max_waiting": 3},
            (400, 10080, "consumer in push mode can not set max waiting"),
        ),
    ],
)
async def test_push_configs_nats_server_refuses(
    server_nc: Client, config: dict[str, Any], expected: tuple[int, int, str]
) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js)
    body = {"durable_name": "x", "ack_policy": "explicit", "deliver_subject": "d.x", **config}
    resp = await api(server_nc, "CONSUMER.CREATE.S.x", {"stream_name": "S", "config": body})
    assert error(resp) == expected


async def test_push_bound_is_reported_once_subscribed(server: Server, server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js)
    await js.add_consumer("S", ConsumerConfig(durable_name="pb", deliver_subject="pb.in"))
    assert not (await js.consumer_info("S", "pb")).push_bound
    await server_nc.subscribe("pb.in")
    await server_nc.flush()

    async def bound() -> bool:
        return (await js.consumer_info("S", "pb")).push_bound is True

    # nats-server learns of the interest on a goroutine of its own, after the flush's PONG.
    await until(bound, 10, "push_bound after the subscription")


# -- restarts ------------------------------------------------------------------------------


async def test_ordered_consumer_carries_on_across_a_server_restart(server: Server) -> None:
    nc = await nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        js = nc.jetstream(timeout=10)
        await stream(js)
        got: list[int] = []
        cb_done = asyncio.Event()

        async def cb(msg: Msg) -> None:
            got.append(msg.metadata.sequence.stream)
            if len(got) >= 20:
                cb_done.set()

        # A short heartbeat: a client that misses two recreates its consumer from where it was.
        await js.subscribe("s.>", cb=cb, ordered_consumer=True, idle_heartbeat=0.5)
        await publish(js, 10)
        for _ in range(100):
            if len(got) >= 10:
                break
            await asyncio.sleep(0.05)
        server.restart()
        # Published after the restart, once the client is back.
        for i in range(10, 20):
            for _ in range(100):
                try:
                    await js.publish(f"s.{i}", b"%d" % i)
                    break
                except (TimeoutError, nats.errors.Error, nats.js.errors.Error):
                    await asyncio.sleep(0.2)
        await asyncio.wait_for(cb_done.wait(), 30)
        # Every message once, in order: nothing lost or repeated across the restart.
        assert got == list(range(1, 21))
    finally:
        await nc.close()
