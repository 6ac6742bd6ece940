"""Acks from nats-py against a running agent: every ack policy and ack kind, redelivery, limits.

Each CONSUMER.INFO expectation (delivered, ack floor, ack pending, redelivered, waiting,
pending) is what nats-server 2.15.1 reports after the same steps: the scenarios were run
against both and the numbers compared.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import nats.errors
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig

from support.agentproc import running_agent
from support.consumerinfo import info, state
from support.moduleagent import one_agent_per_module

agent, no_streams = one_agent_per_module()

# -- helpers ----------------------------------------------------------------------------------


async def setup(js: JetStreamContext, n: int, **cfg: Any) -> JetStreamContext.PullSubscription:
    """Stream S on s.>, n messages s.0 m0, s.1 m1, ..., durable pull consumer d."""
    await js.add_stream(name="S", subjects=["s.>"])
    for i in range(n):
        await js.publish(f"s.{i}", f"m{i}".encode())
    cfg.setdefault("ack_policy", AckPolicy.EXPLICIT)
    return await js.pull_subscribe("s.>", durable="d", stream="S", config=ConsumerConfig(**cfg))


def meta(msgs: list[Msg]) -> list[tuple[int, int, int, int]]:
    """(stream seq, consumer seq, deliveries, pending) of each message."""
    return [
        (
            m.metadata.sequence.stream,
            m.metadata.sequence.consumer,
            m.metadata.num_delivered,
            m.metadata.num_pending,
        )
        for m in msgs
    ]


async def fetch(sub: JetStreamContext.PullSubscription, n: int, timeout: float) -> list[Msg]:
    """What a fetch returns within `timeout`; [] when nothing came."""
    try:
        return await sub.fetch(n, timeout=timeout)
    except TimeoutError:  # nats-py raises its own or asyncio.TimeoutError, by a race
        return []


async def no_wait(nc: Client, batch: int = 10, expires: float = 0) -> list[tuple[int, int, int]]:
    """A no_wait pull: (stream seq, consumer seq, deliveries) of what is available right now.

    Unlike a fetch that times out, it leaves no request waiting on the consumer. When
    max_ack_pending holds back messages nats-server answers a no_wait request only at its
    expiry, so such checks pass `expires`.
    """
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    request: dict[str, Any] = {"batch": batch, "no_wait": True}
    if expires:
        request["expires"] = int(expires * 1e9)
    body = json.dumps(request).encode()
    await nc.publish("$JS.API.CONSUMER.MSG.NEXT.S.d", body, reply=inbox)
    out = []
    try:
        while True:
            msg = await sub.next_msg(timeout=5)
            if msg.headers and msg.headers.get("Status"):
                assert msg.headers["Status"] in ("404", "408"), msg.headers
                break
            md = msg.metadata
            out.append((md.sequence.stream, md.sequence.consumer, md.num_delivered))
            if len(out) == batch:
                break
    finally:
        await sub.unsubscribe()
    return out


async def eventually(check: Any, timeout: float = 5.0) -> None:
    """Retry an async assertion until it passes or the deadline is reached."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            await check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


# -- ack policy explicit --------------------------------------------------------------------


async def test_explicit_acks_step_by_step(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s.>"])
    for i in range(5):
        await js.publish(f"s.{i % 2}", f"m{i}".encode())
    sub = await js.pull_subscribe("s.>", durable="d", config=ConsumerConfig(ack_wait=0.5))
    assert await info(js) == state((0, 0), (0, 0), 0, pending=5)
    msgs = await sub.fetch(3, timeout=2)
    assert [m.data for m in msgs] == [b"m0", b"m1", b"m2"]
    assert meta(msgs) == [(1, 1, 1, 4), (2, 2, 1, 3), (3, 3, 1, 2)]
    assert await info(js) == state((3, 3), (0, 0), 3, pending=2)
    await msgs[1].ack_sync()
    # Acked out of order: the floor stays below the oldest unacked message.
    assert await info(js) == state((3, 3), (0, 0), 2, pending=2)
    await msgs[0].ack_sync()
    assert await info(js) == state((3, 3), (2, 2), 1, pending=2)
    # Message 3 is not acked: after ack_wait it comes back first, then the rest.
    await asyncio.sleep(0.7)
    assert await info(js) == state((3, 3), (2, 2), 1, pending=2)
    msgs = await sub.fetch(5, timeout=2)
    assert [m.data for m in msgs] == [b"m2", b"m3", b"m4"]
    assert meta(msgs) == [(3, 4, 2, 2), (4, 5, 1, 1), (5, 6, 1, 0)]
    assert await info(js) == state((6, 5), (2, 2), 3, redelivered=1)
    for m in msgs:
        await m.ack_sync()
    assert await info(js) == state((6, 5), (6, 5), 0)


async def test_plain_ack_is_committed_without_a_reply(nc: Client, js: JetStreamContext) -> None:
    sub = await setup(js, 2)
    msgs = await sub.fetch(2, timeout=2)
    for m in msgs:
        await m.ack()

    async def acked() -> None:
        assert await info(js) == state((2, 2), (2, 2), 0)

    await eventually(acked)


async def test_info_right_after_plain_acks_reflects_them(js: JetStreamContext) -> None:
    # Acks nobody waits on may linger for a claim to carry them, but an answer about the
    # consumer commits them first: like nats-server, which has processed a connection's acks
    # before the request that follows them.
    sub = await setup(js, 3)
    msgs = await sub.fetch(3, timeout=2)
    for m in msgs:
        await m.ack()
    assert await info(js) == state((3, 3), (3, 3), 0)


async def test_filtered_consumer_floor(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s.>"])
    for subject in ["s.a", "s.b", "s.a", "s.c", "s.b", "s.a"]:
        await js.publish(subject, b"x")
    sub = await js.pull_subscribe("s.a", durable="d", config=ConsumerConfig(ack_wait=30))
    msgs = await sub.fetch(10, timeout=2)
    assert meta(msgs) == [(1, 1, 1, 2), (3, 2, 1, 1), (6, 3, 1, 0)]
    assert await info(js) == state((3, 6), (0, 0), 3)
    await msgs[1].ack_sync()
    assert await info(js) == state((3, 6), (0, 0), 2)
    await msgs[0].ack_sync()
    assert await info(js) == state((3, 6), (2, 5), 1)
    await msgs[2].ack_sync()
    assert await info(js) == state((3, 6), (3, 6), 0)
    for subject in ["s.b", "s.c", "s.a"]:
        await js.publish(subject, b"y")
    msgs = await sub.fetch(10, timeout=2)
    assert meta(msgs) == [(9, 4, 1, 0)]
    await msgs[0].ack_sync()
    assert await info(js) == state((4, 9), (4, 9), 0)


async def test_double_ack_is_harmless(nc: Client, js: JetStreamContext) -> None:
    sub = await setup(js, 2, ack_wait=30)
    msgs = await sub.fetch(2, timeout=2)
    await msgs[1].ack_sync()
    # nats-py refuses a second ack_sync itself; the same ack again on the wire is answered.
    for _ in range(2):
        reply = await nc.request(msgs[1].reply, b"+ACK", timeout=2)
        assert reply.data == b""
    assert await info(js) == state((2, 2), (0, 0), 1)
    await msgs[0].ack_sync()
    assert await info(js) == state((2, 2), (2, 2), 0)


async def test_garbage_and_unknown_acks_are_silent_and_harmless(
    nc: Client, js: JetStreamContext
) -> None:
    sub = await setup(js, 2, ack_wait=30)
    msgs = await sub.fetch(2, timeout=2)
    for subject, body in [
        ("$JS.ACK.S.nope.1.1.1.1.1", b"+ACK"),  # no such consumer
        ("$JS.ACK.NOPE.d.1.1.1.1.1", b"+ACK"),  # no such stream
        ("$JS.ACK.S.d.x.y", b"+ACK"),  # too few tokens
        ("$JS.ACK.S.d.a.b.c.d.e", b"+ACK"),  # not numbers
        ("$JS.ACK.S.d.1.99.99.1.1", b"+ACK"),  # never delivered
        ("$JS.ACK.S.d.1.99.99.1.1", b"-NAK"),
        (msgs[0].reply, b"garbage"),  # not an ack kind
        (msgs[0].reply, b"+WPIX"),
    ]:
        await nc.publish(subject, body)
    await nc.flush()
    # An ack of a message past what was delivered is not answered, as in nats-server.
    with pytest.raises(TimeoutError):
        await nc.request("$JS.ACK.S.d.1.99.99.1.1", b"+ACK", timeout=0.5)
    assert await info(js) == state((2, 2), (0, 0), 2)
    assert await no_wait(nc) == []
    await msgs[0].ack_sync()
    await msgs[1].ack_sync()
    assert await info(js) == state((2, 2), (2, 2), 0)


# -- ack policy all and none ----------------------------------------------------------------


async def test_ack_all_acks_everything_up_to_the_message(js: JetStreamContext) -> None:
    sub = await setup(js, 5, ack_policy=AckPolicy.ALL, ack_wait=30)
    msgs = await sub.fetch(5, timeout=2)
    await msgs[2].ack_sync()
    assert await info(js) == state((5, 5), (3, 3), 2)
    await msgs[1].ack_sync()  # below the floor: nothing changes
    assert await info(js) == state((5, 5), (3, 3), 2)
    await msgs[4].nak()
    redelivered = await sub.fetch(5, timeout=2)
    assert meta(redelivered) == [(5, 6, 2, 0)]
    await msgs[3].term()  # +TERM acks everything up to it, too

    async def termed() -> None:
        assert await info(js) == state((6, 5), (4, 4), 1, redelivered=1)

    await eventually(termed)
    await redelivered[0].ack_sync()
    assert await info(js) == state((6, 5), (6, 5), 0)


async def test_term_under_ack_all_acks_the_messages_below(nc: Client, js: JetStreamContext) -> None:
    sub = await setup(js, 6, ack_policy=AckPolicy.ALL, ack_wait=30)
    msgs = await sub.fetch(6, timeout=2)
    await msgs[3].term()

    async def termed() -> None:
        assert await info(js) == state((6, 6), (4, 4), 2)

    await eventually(termed)
    # A nak of an acked message changes nothing: it is not redelivered.
    await msgs[1].nak()
    await nc.flush()
    assert await no_wait(nc) == []
    assert await info(js) == state((6, 6), (4, 4), 2)


async def test_ack_none_needs_no_acks(nc: Client, js: JetStreamContext) -> None:
    sub = await setup(js, 3, ack_policy=AckPolicy.NONE)
    msgs = await sub.fetch(2, timeout=2)
    assert meta(msgs) == [(1, 1, 1, 2), (2, 2, 1, 1)]
    assert [m.reply.split(".")[4:7] for m in msgs] == [["1", "1", "1"], ["1", "2", "2"]]
    assert await info(js) == state((2, 2), (2, 2), 0, pending=1)
    await msgs[0].ack()
    await msgs[1].nak()
    await nc.flush()
    assert await no_wait(nc) == [(3, 3, 1)]
    assert await info(js) == state((3, 3), (3, 3), 0)


# -- nak, progress, term --------------------------------------------------------------------


async def test_nak_redelivers_and_nak_with_delay_waits(js: JetStreamContext) -> None:
    sub = await setup(js, 3, ack_wait=30)
    msgs = await sub.fetch(3, timeout=2)
    await msgs[0].nak()
    await msgs[1].nak(delay=0.8)
    await msgs[2].term()

    async def applied() -> None:
        assert await info(js) == state((3, 3), (0, 0), 2)

    await eventually(applied)
    nakked_at = time.monotonic()
    first = await sub.fetch(3, timeout=2)
    assert meta(first) == [(1, 4, 2, 0)]
    assert await info(js) == state((4, 3), (0, 0), 2, redelivered=1)
    # The delayed one is not back before its delay, and comes back after it.
    second = await sub.fetch(3, timeout=3)
    waited = time.monotonic() - nakked_at
    assert meta(second) == [(2, 5, 2, 0)]
    assert 0.6 <= waited < 2.5
    assert await info(js) == state((5, 3), (0, 0), 2, redelivered=2)
    for m in first + second:
        await m.ack_sync()
    # The terminated one never came back.
    assert await info(js) == state((5, 3), (5, 3), 0)


async def test_nak_delay_in_the_body_forms_nats_server_reads(
    nc: Client, js: JetStreamContext
) -> None:
    sub = await setup(js, 1, ack_wait=30)
    (msg,) = await sub.fetch(1, timeout=2)
    start = time.monotonic()
    await nc.publish(msg.reply, b'-NAK {"delay": 500000000}')
    assert await fetch(sub, 1, 0.3) == []
    (msg,) = await sub.fetch(1, timeout=2)
    assert meta([msg]) == [(1, 2, 2, 0)]
    assert time.monotonic() - start >= 0.45
    start = time.monotonic()
    await nc.publish(msg.reply, b"-NAK 400ms")
    (msg,) = await sub.fetch(1, timeout=2)
    assert meta([msg]) == [(1, 3, 3, 0)]
    assert time.monotonic() - start >= 0.35
    # A delay nats-server can not read is a plain nak: redelivered at once.
    await nc.publish(msg.reply, b"-NAK garbage")
    (msg,) = await sub.fetch(1, timeout=0.5)
    assert meta([msg]) == [(1, 4, 4, 0)]
    assert await info(js) == state((4, 1), (0, 0), 1, redelivered=1)


async def test_in_progress_resets_the_ack_wait(nc: Client, js: JetStreamContext) -> None:
    sub = await setup(js, 1, ack_wait=0.5)
    (msg,) = await sub.fetch(1, timeout=2)
    for _ in range(3):
        await asyncio.sleep(0.3)
        await msg.in_progress()
    await nc.flush()
    # 0.9 s after delivery, well past ack_wait, still not redelivered.
    assert await no_wait(nc) == []
    assert await info(js) == state((1, 1), (0, 0), 1)
    (again,) = await sub.fetch(1, timeout=2)
    assert meta([again]) == [(1, 2, 2, 0)]
    assert await info(js) == state((2, 1), (0, 0), 1, redelivered=1)


async def test_term_is_never_redelivered(nc: Client, js: JetStreamContext) -> None:
    sub = await setup(js, 2, ack_wait=0.3)
    msgs = await sub.fetch(2, timeout=2)
    await msgs[0].term()
    await msgs[1].ack_sync()
    await asyncio.sleep(0.5)
    assert await no_wait(nc) == []
    assert await info(js) == state((2, 2), (2, 2), 0)


async def test_ack_next_acks_and_asks_for_more(nc: Client, js: JetStreamContext) -> None:
    sub = await setup(js, 3, ack_wait=30)
    (msg,) = await sub.fetch(1, timeout=2)
    # A plain subscription, not nc.request: nats-py's request matches answers by the message
    # subject, which for a delivered message is the stream subject.
    inbox = nc.new_inbox()
    replies = await nc.subscribe(inbox)
    await nc.publish(msg.reply, b"+NXT", reply=inbox)
    nxt = await replies.next_msg(timeout=2)
    assert nxt.data == b"m1"
    assert nxt.metadata.sequence.stream == 2
    await nc.publish(nxt.reply, b'+NXT {"batch": 1}', reply=inbox)
    more = await replies.next_msg(timeout=2)
    assert more.data == b"m2"
    assert await info(js) == state((3, 3), (2, 2), 1)


# -- redelivery limits ----------------------------------------------------------------------


async def test_ack_wait_redelivers(js: JetStreamContext) -> None:
    sub = await setup(js, 1, ack_wait=0.5)
    (msg,) = await sub.fetch(1, timeout=2)
    start = time.monotonic()
    (again,) = await sub.fetch(1, timeout=3)
    assert 0.35 <= time.monotonic() - start < 2
    assert again.data == msg.data == b"m0"
    assert meta([again]) == [(1, 2, 2, 0)]
    assert again.metadata.num_delivered == 2


async def test_backoff_schedule(nc: Client, js: JetStreamContext) -> None:
    sub = await setup(js, 1, backoff=[0.2, 0.6], max_deliver=4)
    assert len(await sub.fetch(1, timeout=2)) == 1
    start = time.monotonic()
    seen = []
    for _ in range(3):
        (msg,) = await sub.fetch(1, timeout=3)
        seen.append((meta([msg])[0], time.monotonic() - start))
    assert [s[0] for s in seen] == [(1, 2, 2, 0), (1, 3, 3, 0), (1, 4, 4, 0)]
    # Redelivered after 0.2 s, then every 0.6 s (the last step repeats).
    gaps = [seen[0][1], seen[1][1] - seen[0][1], seen[2][1] - seen[1][1]]
    assert 0.15 <= gaps[0] < 0.5
    assert 0.5 <= gaps[1] < 1.0
    assert 0.5 <= gaps[2] < 1.0
    # max_deliver 4: never a fifth time.
    await asyncio.sleep(0.8)
    assert await no_wait(nc) == []
    assert await info(js) == state((4, 1), (0, 0), 0, redelivered=1)


async def test_max_deliver_is_honoured(nc: Client, js: JetStreamContext) -> None:
    sub = await setup(js, 2, max_deliver=2, ack_wait=0.3)
    assert meta(await sub.fetch(5, timeout=2)) == [(1, 1, 1, 1), (2, 2, 1, 0)]
    await asyncio.sleep(0.4)
    assert await info(js) == state((2, 2), (0, 0), 2)
    assert meta(await sub.fetch(5, timeout=2)) == [(1, 3, 2, 0), (2, 4, 2, 0)]
    assert await info(js) == state((4, 2), (0, 0), 2, redelivered=2)
    await asyncio.sleep(0.4)
    assert await no_wait(nc) == []
    # Past max_deliver they no longer await an ack, but still count as redelivered and hold
    # the floor, as in nats-server.
    assert await info(js) == state((4, 2), (0, 0), 0, redelivered=2)
    await js.publish("s.z", b"new")
    (msg,) = await sub.fetch(5, timeout=2)
    assert meta([msg]) == [(3, 5, 1, 0)]
    assert await info(js) == state((5, 3), (0, 0), 1, redelivered=2)
    await msg.ack_sync()
    assert await info(js) == state((5, 3), (5, 3), 0, redelivered=2)


async def test_max_deliver_one_and_acking_a_dead_message(nc: Client, js: JetStreamContext) -> None:
    sub = await setup(js, 3, max_deliver=1, ack_wait=0.2)
    msgs = await sub.fetch(3, timeout=2)
    await msgs[2].ack_sync()
    await asyncio.sleep(0.3)
    assert await no_wait(nc) == []
    assert await info(js) == state((3, 3), (0, 0), 0)
    await msgs[0].ack_sync()  # too late: only forgets it
    assert await info(js) == state((3, 3), (0, 0), 0)
    await js.publish("s.n", b"n")
    (msg,) = await sub.fetch(3, timeout=2)
    assert meta([msg]) == [(4, 4, 1, 0)]
    assert await info(js) == state((4, 4), (0, 0), 1)
    await msg.ack_sync()
    assert await info(js) == state((4, 4), (4, 4), 0)


async def test_max_ack_pending_limits_outstanding_messages(
    nc: Client, js: JetStreamContext
) -> None:
    sub = await setup(js, 5, max_ack_pending=2, ack_wait=30)
    msgs = await sub.fetch(5, timeout=2)
    assert meta(msgs) == [(1, 1, 1, 4), (2, 2, 1, 3)]
    assert await info(js) == state((2, 2), (0, 0), 2, pending=3)
    assert await no_wait(nc, expires=0.3) == []
    await msgs[0].ack_sync()
    more = await sub.fetch(5, timeout=2)
    assert meta(more) == [(3, 3, 1, 2)]
    assert await info(js) == state((3, 3), (1, 1), 2, pending=2)
    await msgs[1].ack_sync()
    await more[0].ack_sync()
    assert await info(js) == state((3, 3), (3, 3), 0, pending=2)


async def test_waiting_request_is_served_when_an_ack_frees_max_ack_pending(
    js: JetStreamContext,
) -> None:
    sub = await setup(js, 2, max_ack_pending=1, ack_wait=30)
    (first,) = await sub.fetch(1, timeout=2)
    waiting = asyncio.create_task(sub.fetch(1, timeout=3))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await first.ack_sync()
    (second,) = await asyncio.wait_for(waiting, 3)
    assert second.data == b"m1"


async def test_pending_messages_deleted_from_the_stream_leave_pending(
    js: JetStreamContext,
) -> None:
    sub = await setup(js, 4, ack_wait=0.3)
    await sub.fetch(4, timeout=2)
    await js.delete_msg("S", 1)
    await js.delete_msg("S", 3)
    # Deleting 1 is like acking it; 3 leaves pending without moving the floor.
    assert await info(js) == state((4, 4), (1, 1), 2)
    await asyncio.sleep(0.4)
    msgs = await sub.fetch(4, timeout=2)
    assert meta(msgs) == [(2, 5, 2, 0), (4, 6, 2, 0)]
    assert await info(js) == state((6, 4), (1, 1), 2, redelivered=2)


async def test_acks_survive_a_restart_of_the_agent(tmp_path: Any) -> None:
    store = tmp_path / "store"
    with running_agent(store, "--linger", "20ms", "-m", "0") as first:
        nc = await nats.connect(first.url)
        js = nc.jetstream(timeout=5)
        sub = await setup(js, 3, ack_wait=30)
        msgs = await sub.fetch(3, timeout=2)
        await msgs[0].ack_sync()
        await msgs[2].ack_sync()
        with contextlib.suppress(Exception):
            await nc.close()
        first.kill()
    with running_agent(store, "--linger", "20ms", "-m", "0") as second:
        nc = await nats.connect(second.url)
        js = nc.jetstream(timeout=5)
        assert await info(js) == state((3, 3), (1, 1), 1)
        await nc.close()
