"""A message comes back as it was published, on every path, against an agent and nats-server.

A header block with a name three times, a value with spaces around it, a lower-case name and a
message id is published raw; every way of reading it back returns those bytes unchanged, in
their order: pull, push and ordered-push deliveries, and direct gets by last subject, in
batches and by multi_last, which add their own fields after the message's (nats-server's
genHeader). STREAM.MSG.GET and single direct gets are in test_stored_headers.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

from support.rawnats import CONNECT_HEADERS, RawClient, api_request, hpub, parse_msgs
from support.servers import Server

PUBLISHED = (
    b"NATS/1.0\r\nX: 1\r\nX: 2\r\nX: 3\r\nY:  sp \r\nx-low: q\r\nNats-Msg-Id: m1\r\n\r\n",
    b"NATS/1.0\r\nX: c\r\nX: b\r\nX: a\r\n\r\n",
)
STREAM = {"name": "H", "subjects": ["h.>"], "allow_direct": True}
TIME_STAMP = re.compile(rb"Nats-Time-Stamp: [^\r]+\r\n")


class Session:
    """One raw connection: every answer to `_R.<n>`, every delivery to `_D.<kind>`."""

    def __init__(self, raw: RawClient) -> None:
        self.raw = raw
        self.n = 0
        self.arrived: list[Any] = []  # what no `collect` took yet, in order

    async def collect(self, frame: bytes, subject_prefix: str, count: int) -> list[Any]:
        """The first `count` messages whose subject starts with `subject_prefix` (a reply
        subject, or a stream subject for deliveries), what arrived before `frame` included."""
        self.raw.send(frame)
        for _ in range(200):  # a safety net: the loop ends when `count` arrived
            self.arrived += parse_msgs(await self.raw.ping())
            found = [m for m in self.arrived if m[0].startswith(subject_prefix)][:count]
            if len(found) == count:
                self.arrived = [m for m in self.arrived if not any(m is f for f in found)]
                return found
        raise AssertionError(f"{count} messages on {subject_prefix} awaited: {self.arrived}")

    async def api(self, subject: str, body: Any) -> dict[str, Any]:
        self.n += 1
        reply = f"_R.{self.n}"
        (msg,) = await self.collect(api_request("$JS.API." + subject, body, reply), reply, 1)
        return json.loads(msg[3])  # type: ignore[no-any-return]


async def setup(server: Server) -> Session:
    raw = await RawClient.open(server.port)
    # Each delivery subject subscribed to by name: nats-server counts no wildcard subscription
    # as a push consumer's interest.
    raw.send(
        CONNECT_HEADERS + b"SUB _R.> 1\r\nSUB _D.pull 2\r\nSUB _D.push 3\r\nSUB _D.ordered 4\r\n"
    )
    await raw.ping()
    s = Session(raw)
    assert "error" not in await s.api("STREAM.CREATE.H", STREAM)
    for i, block in enumerate(PUBLISHED, 1):
        s.n += 1
        frame = hpub(f"h.{i}", block, b"data%d" % i, f"_R.{s.n}")
        (ack,) = await s.collect(frame, f"_R.{s.n}", 1)
        assert json.loads(ack[3]) == {"stream": "H", "seq": i}
    return s


def with_direct_fields(seq: int, *extra: bytes) -> bytes:
    """The message's block with a direct get's fields after its own (time stamp blanked)."""
    fields = b"Nats-Stream: H\r\nNats-Subject: h.%d\r\nNats-Sequence: %d\r\n" % (seq, seq)
    fields += b"Nats-Time-Stamp: *\r\n" + b"".join(extra)
    return PUBLISHED[seq - 1][:-2] + fields + b"\r\n"


def blank_time(block: bytes | None) -> bytes | None:
    return None if block is None else TIME_STAMP.sub(b"Nats-Time-Stamp: *\r\n", block)


async def test_deliveries_keep_headers_byte_for_byte(server: Server) -> None:
    s = await setup(server)
    # A pull consumer.
    pull = {"name": "P", "ack_policy": "explicit"}
    assert "error" not in await s.api("CONSUMER.CREATE.H.P", {"stream_name": "H", "config": pull})
    frame = api_request("$JS.API.CONSUMER.MSG.NEXT.H.P", {"batch": 2}, "_D.pull")
    got = await s.collect(frame, "h.", 2)
    assert [(m[0], m[2], m[3]) for m in got] == [
        ("h.1", PUBLISHED[0], b"data1"),
        ("h.2", PUBLISHED[1], b"data2"),
    ]
    # A push consumer, then an ordered one as clients make it (flow control, heartbeats,
    # memory storage, no acks).
    push = {"name": "U", "deliver_subject": "_D.push", "ack_policy": "none"}
    ordered = {
        "name": "O",
        "deliver_subject": "_D.ordered",
        "ack_policy": "none",
        "flow_control": True,
        "idle_heartbeat": 5_000_000_000,
        "mem_storage": True,
        "num_replicas": 1,
        "max_deliver": 1,
    }
    for name, config in (("U", push), ("O", ordered)):
        create = {"stream_name": "H", "config": config}
        created = await s.api(f"CONSUMER.CREATE.H.{name}", create)
        assert "error" not in created, created
        got = await s.collect(b"", "h.", 2)
        assert [(m[0], m[2], m[3]) for m in got] == [
            ("h.1", PUBLISHED[0], b"data1"),
            ("h.2", PUBLISHED[1], b"data2"),
        ], name
    await s.raw.close()


async def test_direct_gets_keep_headers_byte_for_byte(server: Server) -> None:
    s = await setup(server)
    # The last message of a subject named in the request's subject.
    (last,) = await s.collect(api_request("$JS.API.DIRECT.GET.H.h.2", None, "_R.l"), "_R.l", 1)
    assert blank_time(last[2]) == with_direct_fields(2)
    # A batch: each message with the batch's fields, then an end of batch.
    frame = api_request("$JS.API.DIRECT.GET.H", {"seq": 1, "batch": 2}, "_R.b")
    got = await s.collect(frame, "_R.b", 3)
    assert [blank_time(m[2]) for m in got] == [
        with_direct_fields(1, b"Nats-Num-Pending: 1\r\n", b"Nats-Last-Sequence: 0\r\n"),
        with_direct_fields(2, b"Nats-Num-Pending: 0\r\n", b"Nats-Last-Sequence: 1\r\n"),
        b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 2\r\n\r\n",
    ]
    # multi_last: the last message of every subject the filters match, up to a sequence.
    frame = api_request("$JS.API.DIRECT.GET.H", {"multi_last": ["h.>"]}, "_R.m")
    got = await s.collect(frame, "_R.m", 3)
    assert [blank_time(m[2]) for m in got] == [
        with_direct_fields(1, b"Nats-Num-Pending: 1\r\n", b"Nats-Last-Sequence: 0\r\n"),
        with_direct_fields(2, b"Nats-Num-Pending: 0\r\n", b"Nats-Last-Sequence: 1\r\n"),
        b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 0\r\nNats-Last-Sequence: 2\r\n"
        b"Nats-UpTo-Sequence: 2\r\n\r\n",
    ]
    assert [m[3] for m in got] == [b"data1", b"data2", b""]
    await s.raw.close()
