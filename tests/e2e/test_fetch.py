"""Pull requests ($JS.API.CONSUMER.MSG.NEXT) from nats-py and raw, against a running agent.

Status codes, descriptions and the Nats-Pending-* headers, the ack reply subject, message
metadata, every deliver policy and subject filter. Expected values were taken from nats-server
2.15.1 running the same requests (max_bytes accounting included: nats-server counts subject,
ack reply, headers and data of each message).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from datetime import UTC, datetime
from typing import Any

import nats.errors
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from support.consumerinfo import info, state
from support.moduleagent import one_agent_per_module

NEXT = "$JS.API.CONSUMER.MSG.NEXT.S.d"
MS = 1_000_000


agent, no_streams = one_agent_per_module()

# -- helpers ----------------------------------------------------------------------------------


async def setup(js: JetStreamContext, n: int = 3, **cfg: Any) -> None:
    """Stream S on s.>, n messages s.0 m0, s.1 m1, ..., durable pull consumer d."""
    await js.add_stream(name="S", subjects=["s.>"])
    for i in range(n):
        await js.publish(f"s.{i}", f"m{i}".encode())
    cfg.setdefault("ack_policy", AckPolicy.EXPLICIT)
    await js.add_consumer("S", ConsumerConfig(durable_name="d", **cfg))


Status = tuple[str, str, str | None, str | None]


async def pull(
    nc: Client, body: Any, window: float = 2.0, consumer: str = "d"
) -> list[bytes | Status]:
    """Send one pull request; what comes back until a final status or the window ends.

    Messages as their data, statuses as (code, description, pending messages, pending bytes).
    """
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.S.{consumer}", body, reply=inbox)
    out: list[bytes | Status] = []
    end = time.monotonic() + window
    try:
        while (left := end - time.monotonic()) > 0:
            try:
                msg = await sub.next_msg(timeout=left)
            except nats.errors.TimeoutError:
                break
            headers = msg.headers or {}
            if "Status" in headers:
                out.append(
                    (
                        headers["Status"],
                        headers.get("Description", ""),
                        headers.get("Nats-Pending-Messages"),
                        headers.get("Nats-Pending-Bytes"),
                    )
                )
                if headers["Status"] != "100":
                    break
            else:
                out.append(msg.data)
    finally:
        await sub.unsubscribe()
    return out


async def fetch_all(js: JetStreamContext, durable: str) -> list[Msg]:
    """Everything the consumer has now (a fetch of many that stops at the first 404)."""
    sub = await js.pull_subscribe_bind(durable, "S")
    try:
        return await sub.fetch(20, timeout=1)
    except TimeoutError:  # nats-py raises its own or asyncio.TimeoutError, by a race
        return []


def seen(msgs: list[Msg]) -> list[tuple[bytes, int, int]]:
    """(data, stream seq, pending) of each message."""
    return [(m.data, m.metadata.sequence.stream, m.metadata.num_pending) for m in msgs]


# -- fetch with nats-py ---------------------------------------------------------------------


async def test_fetch_with_and_without_timeout(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s.>"])
    for i in range(5):
        await js.publish(f"s.{i}", f"m{i}".encode())
    sub = await js.pull_subscribe("s.>", durable="d", config=ConsumerConfig(ack_wait=30))
    assert [m.data for m in await sub.fetch(1)] == [b"m0"]
    assert [m.data for m in await sub.fetch(2, timeout=1)] == [b"m1", b"m2"]
    # A batch larger than what is there: what is there.
    assert [m.data for m in await sub.fetch(10, timeout=1)] == [b"m3", b"m4"]
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        await sub.fetch(1, timeout=0.4)
    # nats-py's fetch of several raises, or returns nothing when the server's 408 beats its
    # own timer.
    with contextlib.suppress(TimeoutError):
        assert await sub.fetch(3, timeout=0.4) == []
    assert 0.7 <= time.monotonic() - start < 2.5


async def test_fetch_waits_for_messages_published_meanwhile(js: JetStreamContext) -> None:
    await setup(js, 0)
    sub = await js.pull_subscribe_bind("d", "S")
    fetching = asyncio.create_task(sub.fetch(1, timeout=3))
    await asyncio.sleep(0.3)
    assert not fetching.done()
    await js.publish("s.late", b"late")
    (msg,) = await asyncio.wait_for(fetching, 3)
    assert msg.data == b"late"


async def test_waiting_request_is_answered_as_messages_arrive(
    nc: Client, js: JetStreamContext
) -> None:
    await setup(js, 0)
    request = asyncio.create_task(pull(nc, {"batch": 2, "expires": 3000 * MS}, window=4))
    await asyncio.sleep(0.3)
    assert await info(js) == state((0, 0), (0, 0), waiting=1)
    await js.publish("s.a", b"one")
    await asyncio.sleep(0.2)
    await js.publish("s.b", b"two")
    assert await asyncio.wait_for(request, 5) == [b"one", b"two"]
    assert await info(js) == state((2, 2), (0, 0), ack_pending=2)


# -- statuses -------------------------------------------------------------------------------


async def test_no_wait_answers_404_when_nothing_is_left(nc: Client, js: JetStreamContext) -> None:
    await setup(js, 2)
    assert await pull(nc, {"batch": 5, "no_wait": True}) == [
        b"m0",
        b"m1",
        ("404", "No Messages", None, None),
    ]
    assert await pull(nc, {"batch": 5, "no_wait": True}) == [("404", "No Messages", None, None)]
    # With an expiry as well, and nothing pending: it waits for the expiry.
    start = time.monotonic()
    assert await pull(nc, {"batch": 5, "no_wait": True, "expires": 300 * MS}) == [
        ("408", "Request Timeout", "5", "0")
    ]
    assert time.monotonic() - start >= 0.25
    assert await info(js) == state((2, 2), (0, 0), ack_pending=2)


async def test_expires_answers_408_with_what_is_left(nc: Client, js: JetStreamContext) -> None:
    await setup(js, 2)
    assert await pull(nc, {"batch": 5, "expires": 300 * MS}) == [
        b"m0",
        b"m1",
        ("408", "Request Timeout", "3", "0"),
    ]
    assert await pull(nc, {"batch": 5, "expires": 300 * MS, "max_bytes": 1000}) == [
        ("408", "Request Timeout", "5", "1000")
    ]
    assert await pull(nc, {"batch": 1, "expires": 300 * MS}) == [
        ("408", "Request Timeout", "1", "0")
    ]


async def test_idle_heartbeats(nc: Client, js: JetStreamContext) -> None:
    await setup(js, 0)
    start = time.monotonic()
    out = await pull(nc, {"batch": 5, "expires": 1100 * MS, "idle_heartbeat": 300 * MS}, 3)
    assert out == [("100", "Idle Heartbeat", None, None)] * 3 + [
        ("408", "Request Timeout", "5", "0")
    ]
    assert 1.0 <= time.monotonic() - start < 2.5
    # A heartbeat needs an expiry of at least two of them.
    assert await pull(nc, {"batch": 1, "idle_heartbeat": 600 * MS, "expires": 1000 * MS}) == [
        ("400", "Bad Request - heartbeat value too large", None, None)
    ]


async def test_heartbeats_pause_while_messages_flow(nc: Client, js: JetStreamContext) -> None:
    await setup(js, 0)

    async def publish_slowly() -> None:
        for i in range(4):
            await asyncio.sleep(0.15)
            await js.publish(f"s.{i}", b"x")

    publisher = asyncio.create_task(publish_slowly())
    out = await pull(nc, {"batch": 4, "expires": 2000 * MS, "idle_heartbeat": 400 * MS}, 3)
    await publisher
    assert out == [b"x"] * 4


async def test_max_bytes(nc: Client, js: JetStreamContext) -> None:
    await setup(js, 3)
    # Each message is 44 bytes as nats-server counts them: subject (3), data (2) and the ack
    # reply "$JS.ACK.S.d.1.1.1.<19-digit timestamp>.2" (39).
    assert await pull(nc, {"batch": 5, "max_bytes": 5}) == [
        ("409", "Message Size Exceeds MaxBytes", "5", "5")
    ]
    assert await pull(nc, {"batch": 5, "max_bytes": 30, "expires": 500 * MS}) == [
        ("409", "Message Size Exceeds MaxBytes", "5", "30")
    ]
    assert await info(js) == state((0, 0), (0, 0), pending=3)
    assert await pull(nc, {"batch": 5, "max_bytes": 70, "expires": 500 * MS}) == [
        b"m0",
        ("409", "Message Size Exceeds MaxBytes", "4", "26"),
    ]
    # The batch done with bytes to spare: nats-server says so.
    assert await pull(nc, {"batch": 1, "max_bytes": 1000}) == [
        b"m1",
        ("409", "Batch Completed", "0", "956"),
    ]
    # Exactly enough bytes: no status at all.
    assert await pull(nc, {"batch": 3, "max_bytes": 44}, window=0.5) == [b"m2"]


async def test_request_limits_of_the_consumer(nc: Client, js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s.>"])
    await js.publish("s.0", b"m0")
    config = {
        "durable_name": "d",
        "ack_policy": "explicit",
        "max_batch": 2,
        "max_expires": 1_000 * MS,
        "max_bytes": 100,
    }
    resp = await nc.request(
        "$JS.API.CONSUMER.CREATE.S.d", json.dumps({"stream_name": "S", "config": config}).encode()
    )
    assert "error" not in json.loads(resp.data)
    assert await pull(nc, {"batch": 3}) == [("409", "Exceeded MaxRequestBatch of 2", None, None)]
    for expires in (2_000 * MS, 1_500 * MS):
        assert await pull(nc, {"batch": 1, "expires": expires}) == [
            ("409", "Exceeded MaxRequestExpires of 1s", None, None)
        ]
    assert await pull(nc, {"batch": 1, "max_bytes": 200}) == [
        ("409", "Exceeded MaxRequestMaxBytes of 100", None, None)
    ]
    assert await pull(nc, {"batch": 1, "min_pending": 2}) == [
        ("400", "Bad Request - Not a Overflow Priority consumer", None, None)
    ]
    assert await pull(nc, {"batch": 2, "max_bytes": 100, "no_wait": True}) == [
        b"m0",
        ("404", "No Messages", None, None),
    ]


async def test_max_waiting(nc: Client, js: JetStreamContext) -> None:
    await setup(js, 0, max_waiting=2)
    inbox = nc.new_inbox()
    replies = await nc.subscribe(inbox)
    for _ in range(2):
        body = json.dumps({"batch": 1, "expires": 3_000 * MS}).encode()
        await nc.publish(NEXT, body, reply=inbox)
    await nc.flush()
    await asyncio.sleep(0.2)
    assert await info(js) == state((0, 0), (0, 0), waiting=2)
    assert await pull(nc, {"batch": 1, "expires": 500 * MS}) == [
        ("409", "Exceeded MaxWaiting", None, None)
    ]
    await js.publish("s.x", b"late")
    assert (await replies.next_msg(timeout=3)).data == b"late"
    await asyncio.sleep(0.2)
    assert await info(js) == state((1, 1), (0, 0), ack_pending=1, waiting=1)


async def test_request_bodies(nc: Client, js: JetStreamContext) -> None:
    await setup(js, 4)
    # An empty body is one message; a number is a batch; a batch of 0 is one message too.
    assert await pull(nc, b"", window=0.3) == [b"m0"]
    assert await pull(nc, b"2", window=0.3) == [b"m1", b"m2"]
    assert await pull(nc, {"batch": 0}, window=0.3) == [b"m3"]
    assert await pull(nc, {"batch": 1, "no_wait": True}) == [("404", "No Messages", None, None)]
    (status,) = await pull(nc, b"{bad")
    assert isinstance(status, tuple)
    assert status[0] == "400" and status[1].startswith("Bad Request - ")


async def test_next_for_an_unknown_consumer_has_no_responders(
    nc: Client, js: JetStreamContext
) -> None:
    await setup(js, 1)
    for subject in (
        "$JS.API.CONSUMER.MSG.NEXT.S.nope",
        "$JS.API.CONSUMER.MSG.NEXT.NOPE.d",
    ):
        with pytest.raises(nats.errors.NoRespondersError):
            await nc.request(subject, b'{"batch": 1, "no_wait": true}', timeout=2)


async def test_deleting_the_consumer_ends_waiting_requests(
    nc: Client, js: JetStreamContext
) -> None:
    await setup(js, 0)
    request = asyncio.create_task(pull(nc, {"batch": 1, "expires": 3_000 * MS}, window=4))
    await asyncio.sleep(0.3)
    await js.delete_consumer("S", "d")
    assert await asyncio.wait_for(request, 5) == [("409", "Consumer Deleted", None, None)]


# -- what a delivered message carries -------------------------------------------------------


async def test_ack_reply_subject_and_metadata(js: JetStreamContext) -> None:
    await setup(js, 3)
    before = datetime.now(UTC)
    sub = await js.pull_subscribe_bind("d", "S")
    msgs = await sub.fetch(2, timeout=2)
    for i, msg in enumerate(msgs, start=1):
        tokens = msg.reply.split(".")
        # $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>
        assert tokens[:7] == ["$JS", "ACK", "S", "d", "1", str(i), str(i)]
        assert len(tokens) == 9
        assert tokens[8] == str(3 - i)
        stamp = int(tokens[7])
        assert abs(stamp / 1e9 - before.timestamp()) < 30
        md = msg.metadata
        assert md.stream == "S"
        assert md.consumer == "d"
        assert (md.sequence.stream, md.sequence.consumer) == (i, i)
        assert md.num_delivered == 1
        assert md.num_pending == 3 - i
        assert md.domain is None
        assert md.timestamp == datetime.fromtimestamp(stamp / 1e9, UTC)


async def test_a_delivered_message_keeps_its_subject(nc: Client, js: JetStreamContext) -> None:
    await setup(js, 2)
    sub = await js.pull_subscribe_bind("d", "S")
    msgs = await sub.fetch(2, timeout=2)
    assert [m.subject for m in msgs] == ["s.0", "s.1"]
    # Statuses, though, come on the request's inbox.
    inbox = nc.new_inbox()
    replies = await nc.subscribe(inbox)
    await nc.publish(NEXT, b'{"batch": 1, "no_wait": true}', reply=inbox)
    status = await replies.next_msg(timeout=2)
    assert status.subject == inbox
    assert status.headers == {"Status": "404", "Description": "No Messages"}


async def test_headers_only(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s.>"])
    await js.publish("s.a", b"hello world", headers={"X-A": "1"})
    await js.publish("s.b", b"")
    await js.add_consumer(
        "S", ConsumerConfig(durable_name="h", headers_only=True, ack_policy=AckPolicy.EXPLICIT)
    )
    msgs = await fetch_all(js, "h")
    assert [(m.data, dict(m.headers or {})) for m in msgs] == [
        (b"", {"X-A": "1", "Nats-Msg-Size": "11"}),
        (b"", {"Nats-Msg-Size": "0"}),
    ]


async def test_message_headers_are_delivered(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s.>"])
    await js.publish("s.a", b"body", headers={"X-One": "1", "X-Two": "two"})
    await js.add_consumer("S", ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT))
    (msg,) = await fetch_all(js, "d")
    assert msg.data == b"body"
    assert msg.headers == {"X-One": "1", "X-Two": "two"}


# -- deliver policies and filters -----------------------------------------------------------

ITEMS = [("s.a", b"a1"), ("s.b", b"b1"), ("s.a", b"a2"), ("s.c", b"c1"), ("s.b", b"b2")]


async def policy_stream(js: JetStreamContext) -> str:
    """s.a a1, s.b b1, s.a a2 | s.c c1, s.b b2, s.a a3; the time of the bar."""
    await js.add_stream(name="S", subjects=["s.>"])
    for subject, data in ITEMS[:3]:
        await js.publish(subject, data)
    await asyncio.sleep(0.05)
    start = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    await asyncio.sleep(0.05)
    for subject, data in [*ITEMS[3:], ("s.a", b"a3")]:
        await js.publish(subject, data)
    return start


CASES: list[tuple[str, dict[str, Any], dict[str, Any], list[tuple[bytes, int, int]]]] = [
    ("all", {}, state((0, 0), (0, 0), pending=6), [(b"a1", 1, 5), (b"b1", 2, 4), (b"a2", 3, 3)]),
    (
        "last",
        {"deliver_policy": DeliverPolicy.LAST},
        state((0, 5), (0, 5), pending=1),
        [(b"a3", 6, 0)],
    ),
    (
        "last_filtered",
        {"deliver_policy": DeliverPolicy.LAST, "filter_subject": "s.b"},
        state((0, 4), (0, 4), pending=1),
        [(b"b2", 5, 0)],
    ),
    ("new", {"deliver_policy": DeliverPolicy.NEW}, state((0, 6), (0, 6)), []),
    (
        "by_seq",
        {"deliver_policy": DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": 4},
        state((0, 3), (0, 3), pending=3),
        [(b"c1", 4, 2), (b"b2", 5, 1), (b"a3", 6, 0)],
    ),
    (
        "by_seq_past_the_end",
        {"deliver_policy": DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": 40},
        state((0, 39), (0, 39)),
        [],
    ),
    (
        "last_per_subject",
        {"deliver_policy": DeliverPolicy.LAST_PER_SUBJECT, "filter_subject": "s.>"},
        state((0, 3), (0, 3), pending=3),
        [(b"c1", 4, 2), (b"b2", 5, 1), (b"a3", 6, 0)],
    ),
    (
        "last_per_subject_several",
        {"deliver_policy": DeliverPolicy.LAST_PER_SUBJECT, "filter_subjects": ["s.a", "s.c"]},
        state((0, 3), (0, 3), pending=2),
        [(b"c1", 4, 1), (b"a3", 6, 0)],
    ),
    (
        "filter_subject",
        {"filter_subject": "s.a"},
        state((0, 0), (0, 0), pending=3),
        [(b"a1", 1, 2), (b"a2", 3, 1), (b"a3", 6, 0)],
    ),
    (
        "filter_subjects",
        {"filter_subjects": ["s.b", "s.c"]},
        state((0, 0), (0, 0), pending=3),
        [(b"b1", 2, 2), (b"c1", 4, 1), (b"b2", 5, 0)],
    ),
    (
        "filter_wildcard",
        {"filter_subject": "s.*"},
        state((0, 0), (0, 0), pending=6),
        [(b"a1", 1, 5), (b"b1", 2, 4), (b"a2", 3, 3)],
    ),
]


@pytest.mark.parametrize(("name", "cfg", "created", "first"), CASES, ids=[c[0] for c in CASES])
async def test_deliver_policies_and_filters(
    js: JetStreamContext,
    name: str,
    cfg: dict[str, Any],
    created: dict[str, Any],
    first: list[tuple[bytes, int, int]],
) -> None:
    await policy_stream(js)
    await js.add_consumer("S", ConsumerConfig(durable_name=name, **cfg))
    assert await info(js, name) == created
    got = seen(await fetch_all(js, name))
    assert got[: len(first)] == first
    if not first:
        assert got == []
    else:
        assert got[-1][2] == 0  # all of them: nothing left pending
        assert (await info(js, name))["delivered"] == (len(got), got[-1][1])


async def test_deliver_by_start_time(js: JetStreamContext) -> None:
    start = await policy_stream(js)
    await js.add_consumer(
        "S",
        ConsumerConfig(
            durable_name="t", deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=start
        ),
    )
    assert await info(js, "t") == state((0, 3), (0, 3), pending=3)
    assert seen(await fetch_all(js, "t")) == [(b"c1", 4, 2), (b"b2", 5, 1), (b"a3", 6, 0)]
    assert await info(js, "t") == state((3, 6), (0, 3), ack_pending=3)


async def test_policies_follow_new_messages(js: JetStreamContext) -> None:
    await policy_stream(js)
    for name, cfg in [
        ("new", {"deliver_policy": DeliverPolicy.NEW}),
        ("f1", {"filter_subject": "s.a"}),
        ("fs", {"filter_subjects": ["s.b", "s.c"]}),
        (
            "lps",
            {"deliver_policy": DeliverPolicy.LAST_PER_SUBJECT, "filter_subjects": ["s.a", "s.c"]},
        ),
    ]:
        await js.add_consumer("S", ConsumerConfig(durable_name=name, **cfg))
        await fetch_all(js, name)
    for subject, data in [("s.a", b"a4"), ("s.c", b"c2"), ("s.b", b"b3")]:
        await js.publish(subject, data)
    assert seen(await fetch_all(js, "new")) == [(b"a4", 7, 2), (b"c2", 8, 1), (b"b3", 9, 0)]
    assert seen(await fetch_all(js, "f1")) == [(b"a4", 7, 0)]
    assert seen(await fetch_all(js, "fs")) == [(b"c2", 8, 1), (b"b3", 9, 0)]
    assert seen(await fetch_all(js, "lps")) == [(b"a4", 7, 1), (b"c2", 8, 0)]
    assert await info(js, "new") == state((3, 9), (0, 6), ack_pending=3)
    assert await info(js, "f1") == state((4, 7), (0, 0), ack_pending=4)
    # Several filters: the floor does not move on deliveries, only on acks (nats-server).
    assert await info(js, "fs") == state((5, 9), (0, 0), ack_pending=5)
    assert await info(js, "lps") == state((4, 8), (0, 3), ack_pending=4)
