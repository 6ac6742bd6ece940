"""Interest and workqueue retention, seen through STREAM.INFO and CONSUMER.INFO from nats-py.

Expected stream states (messages, first seq, last seq) and errors are what nats-server 2.15.1
shows after the same steps.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RetentionPolicy
from nats.js.errors import BadRequestError

from support.moduleagent import one_agent_per_module

agent, no_streams = one_agent_per_module()

# -- helpers ----------------------------------------------------------------------------------


async def state(js: JetStreamContext) -> tuple[int, int, int]:
    si = await js.stream_info("S")
    return (si.state.messages, si.state.first_seq, si.state.last_seq)


async def becomes(js: JetStreamContext, expected: tuple[int, int, int], timeout: float = 3) -> None:
    """Wait for the stream state (retention runs after the ack is committed)."""
    deadline = time.monotonic() + timeout
    while (got := await state(js)) != expected:
        assert time.monotonic() < deadline, f"stream state {got}, expected {expected}"
        await asyncio.sleep(0.05)


async def stays(js: JetStreamContext, expected: tuple[int, int, int], wait: float = 0.3) -> None:
    """The stream state is `expected` and still is a moment later."""
    assert await state(js) == expected
    await asyncio.sleep(wait)
    assert await state(js) == expected


async def consumer(
    js: JetStreamContext, name: str, **cfg: Any
) -> JetStreamContext.PullSubscription:
    cfg.setdefault("ack_policy", AckPolicy.EXPLICIT)
    cfg.setdefault("ack_wait", 30)
    await js.add_consumer("S", ConsumerConfig(durable_name=name, **cfg))
    return await js.pull_subscribe_bind(name, "S")


async def fetch(sub: JetStreamContext.PullSubscription, n: int = 10) -> list[Msg]:
    try:
        return await sub.fetch(n, timeout=1)
    except TimeoutError:
        return []


async def publish(js: JetStreamContext, *subjects: str) -> None:
    for subject in subjects:
        await js.publish(subject, subject.encode())


def seqs(msgs: list[Msg]) -> list[int]:
    return [m.metadata.sequence.stream for m in msgs]


# -- interest ---------------------------------------------------------------------------------


async def test_interest_removes_a_message_once_every_interested_consumer_acked(
    js: JetStreamContext,
) -> None:
    await js.add_stream(name="S", subjects=["s.>"], retention=RetentionPolicy.INTEREST)
    c1 = await consumer(js, "c1")
    c2 = await consumer(js, "c2", filter_subject="s.b")
    await publish(js, "s.a", "s.b", "s.a", "s.c")
    await stays(js, (4, 1, 4))
    m1 = await fetch(c1)
    assert seqs(m1) == [1, 2, 3, 4]
    m2 = await fetch(c2)
    assert seqs(m2) == [2]
    for m in m1:
        await m.ack_sync()
    # s.b (2) waits for c2; the rest only c1 wanted.
    await becomes(js, (1, 2, 4))
    ci = await js.consumer_info("S", "c1")
    assert (ci.delivered.consumer_seq, ci.delivered.stream_seq) == (4, 4)
    assert (ci.ack_floor.consumer_seq, ci.ack_floor.stream_seq) == (4, 4)
    assert (ci.num_ack_pending, ci.num_pending) == (0, 0)
    await m2[0].ack_sync()
    await becomes(js, (0, 5, 4))


async def test_interest_keeps_no_message_that_no_consumer_wants(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s.>"], retention=RetentionPolicy.INTEREST)
    await publish(js, "s.a")
    await becomes(js, (0, 2, 1))
    await consumer(js, "c2", filter_subject="s.b")
    await publish(js, "s.b", "s.z")
    # s.z matches no consumer's filter: gone at once; s.b waits for c2.
    await becomes(js, (1, 2, 3))
    await stays(js, (1, 2, 3))


async def test_interest_deleting_the_last_interested_consumer_releases(
    js: JetStreamContext,
) -> None:
    await js.add_stream(name="S", subjects=["s.>"], retention=RetentionPolicy.INTEREST)
    await consumer(js, "c2", filter_subject="s.b")
    await publish(js, "s.b")
    await stays(js, (1, 1, 1))
    await js.delete_consumer("S", "c2")
    await becomes(js, (0, 2, 1))


async def test_interest_deleting_a_consumer_releases_what_only_it_wanted(
    js: JetStreamContext,
) -> None:
    await js.add_stream(name="S", subjects=["s.>"], retention=RetentionPolicy.INTEREST)
    await consumer(js, "c1")
    await consumer(js, "c2", filter_subject="s.b")
    await publish(js, "s.b", "s.z")
    await stays(js, (2, 1, 2))
    await js.delete_consumer("S", "c1")
    # s.z was c1's alone; s.b still waits for c2.
    await becomes(js, (1, 1, 2))


async def test_interest_ack_all_removes_everything_acked(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s.>"], retention=RetentionPolicy.INTEREST)
    sub = await consumer(js, "c1", ack_policy=AckPolicy.ALL)
    await publish(js, "s.a", "s.b", "s.c")
    msgs = await fetch(sub, 3)
    await msgs[1].ack_sync()
    await becomes(js, (1, 3, 3))


async def test_interest_term_removes_and_nak_keeps(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s.>"], retention=RetentionPolicy.INTEREST)
    sub = await consumer(js, "c1")
    await publish(js, "s.a", "s.b", "s.c")
    msgs = await fetch(sub, 3)
    await msgs[0].term()
    await msgs[1].nak()
    await becomes(js, (2, 2, 3))
    await stays(js, (2, 2, 3))


async def test_interest_keeps_a_message_past_max_deliver(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s.>"], retention=RetentionPolicy.INTEREST)
    sub = await consumer(js, "c1", ack_wait=0.2, max_deliver=1)
    await publish(js, "s.a", "s.b")
    msgs = await fetch(sub, 3)
    await msgs[1].ack_sync()
    await asyncio.sleep(0.3)
    assert await fetch(sub, 3) == []
    # Never acked: nats-server keeps it, and so does InfiniStream.
    await stays(js, (1, 1, 2))
    ci = await js.consumer_info("S", "c1")
    assert (ci.num_ack_pending, ci.ack_floor.stream_seq) == (0, 0)
    await publish(js, "s.c")
    (msg,) = await fetch(sub, 3)
    await msg.ack_sync()
    await becomes(js, (1, 1, 3))


async def test_interest_ack_none_removes_on_delivery(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s.>"], retention=RetentionPolicy.INTEREST)
    sub = await consumer(js, "c1", ack_policy=AckPolicy.NONE)
    await publish(js, "s.a", "s.b", "s.c")
    await stays(js, (3, 1, 3), wait=0.1)
    assert len(await fetch(sub, 2)) == 2
    await becomes(js, (1, 3, 3))


# -- workqueue --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cfg", "err_code", "description"),
    [
        ({}, 10099, "multiple non-filtered consumers not allowed on workqueue stream"),
        ({"filter_subject": "s.a"}, 10100, "filtered consumer not unique on workqueue stream"),
        ({"filter_subject": "s.*"}, 10100, "filtered consumer not unique on workqueue stream"),
        (
            {"filter_subjects": ["s.b", "s.a"]},
            10100,
            "filtered consumer not unique on workqueue stream",
        ),
        (
            {"filter_subject": "s.b", "ack_policy": AckPolicy.NONE},
            10084,
            "consumer in pull mode requires explicit ack policy on workqueue stream",
        ),
        (
            {"filter_subject": "s.b", "deliver_policy": DeliverPolicy.NEW},
            10101,
            "consumer must be deliver all on workqueue stream",
        ),
        (
            {"filter_subject": "s.b", "ack_policy": AckPolicy.ALL},
            10098,
            "workqueue stream requires explicit ack",
        ),
    ],
)
async def test_workqueue_refuses_overlapping_consumers(
    js: JetStreamContext, cfg: dict[str, Any], err_code: int, description: str
) -> None:
    await js.add_stream(name="S", subjects=["s.>"], retention=RetentionPolicy.WORK_QUEUE)
    await consumer(js, "w1", filter_subject="s.a")
    cfg.setdefault("ack_policy", AckPolicy.EXPLICIT)
    with pytest.raises(BadRequestError) as exc:
        await js.add_consumer("S", ConsumerConfig(durable_name="w2", **cfg))
    assert (exc.value.code, exc.value.err_code, exc.value.description) == (
        400,
        err_code,
        description,
    )


async def test_workqueue_removes_on_ack(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s.>"], retention=RetentionPolicy.WORK_QUEUE)
    await publish(js, "s.a", "s.b", "s.a")
    w1 = await consumer(js, "w1", filter_subject="s.a")
    await consumer(js, "wb", filter_subject="s.b")
    await stays(js, (3, 1, 3))
    msgs = await fetch(w1)
    assert seqs(msgs) == [1, 3]
    await msgs[0].ack_sync()
    await becomes(js, (2, 2, 3))
    await msgs[1].term()
    await becomes(js, (1, 2, 3))
    ci = await js.consumer_info("S", "w1")
    assert (ci.delivered.consumer_seq, ci.delivered.stream_seq) == (2, 3)
    assert (ci.ack_floor.consumer_seq, ci.ack_floor.stream_seq) == (2, 3)
    await js.delete_consumer("S", "w1")
    await js.delete_consumer("S", "wb")
    # With the others gone, one unfiltered consumer may take everything; a second may not.
    w9 = await consumer(js, "w9")
    with pytest.raises(BadRequestError) as exc:
        await js.add_consumer(
            "S", ConsumerConfig(durable_name="w10", ack_policy=AckPolicy.EXPLICIT)
        )
    assert exc.value.err_code == 10099
    await stays(js, (1, 2, 3))
    msgs = await fetch(w9)
    assert seqs(msgs) == [2]
    await msgs[0].ack_sync()
    await becomes(js, (0, 4, 3))


async def test_workqueue_unacked_message_is_redelivered_not_removed(
    js: JetStreamContext,
) -> None:
    await js.add_stream(name="S", subjects=["s.>"], retention=RetentionPolicy.WORK_QUEUE)
    sub = await consumer(js, "w", ack_wait=0.3)
    await publish(js, "s.a")
    (msg,) = await fetch(sub)
    await msg.nak()
    (again,) = await fetch(sub)
    assert again.metadata.num_delivered == 2
    await stays(js, (1, 1, 1), wait=0.1)
    await again.ack_sync()
    await becomes(js, (0, 2, 1))
