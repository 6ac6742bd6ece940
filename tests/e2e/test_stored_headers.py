"""Header blocks come back byte for byte as nats-server returns them, against an agent and
nats-server: as stored (STREAM.MSG.GET), with a direct get's fields added (DIRECT.GET), to a
headers-only consumer, with a TTL raised to the delete-marker TTL, and copied by a schedule.

Both keep what a client published as it is (spaces, repeated names, case) but for a status
line, which a stream does not store, and both add their fields last.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from typing import Any

from support.rawnats import CONNECT_HEADERS, RawClient, api_request, hpub, parse_msgs
from support.servers import Server

PUBLISHED_AND_STORED = [
    # A status line is not stored; the fields are, as they were.
    (b"NATS/1.0 503 X\r\nA: b\r\n\r\n", b"NATS/1.0\r\nA: b\r\n\r\n"),
    (b"NATS/1.0 503\r\n\r\n", b""),
    (b"NATS/1.0\r\nA:  b  \r\nA: c\r\na: d\r\n\r\n",) * 2,
    # A TTL under the stream's delete-marker TTL is raised to it: one Nats-TTL, last.
    (
        b"NATS/1.0\r\nNats-TTL: 5\r\nX: 1\r\nNats-TTL: 7\r\n\r\n",
        b"NATS/1.0\r\nX: 1\r\nNats-TTL: 60\r\n\r\n",
    ),
]
STREAM = {
    "name": "H",
    "subjects": ["h.>", "sched.>", "out.>"],
    "allow_msg_ttl": True,
    "subject_delete_marker_ttl": 60_000_000_000,
    "allow_direct": True,
    "allow_msg_schedules": True,
}


class Session:
    """One raw connection, every answer to `_R.<n>`."""

    def __init__(self, raw: RawClient) -> None:
        self.raw = raw
        self.n = 0

    async def request(self, frame: bytes, reply: str, count: int = 1) -> list[Any]:
        """The `count` messages of the answer: JetStream answers to the reply subject, but
        a consumer's messages carry their own subjects (told apart by the subscription)."""
        self.raw.send(frame)
        found: list[Any] = []
        while len(found) < count:
            data = await self.raw.ping()
            found += [m for m in parse_msgs(data) if m[0] == reply or m[1] == "2"]
        return found

    async def api(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        self.n += 1
        reply = f"_R.{self.n}"
        (msg,) = await self.request(api_request("$JS.API." + subject, body, reply), reply)
        return json.loads(msg[3])  # type: ignore[no-any-return]

    async def publish(self, subject: str, headers: bytes, data: bytes) -> dict[str, Any]:
        self.n += 1
        reply = f"_R.{self.n}"
        (msg,) = await self.request(hpub(subject, headers, data, reply), reply)
        return json.loads(msg[3])  # type: ignore[no-any-return]

    async def direct_get(self, seq: int) -> bytes:
        self.n += 1
        reply = f"_R.{self.n}"
        frame = api_request("$JS.API.DIRECT.GET.H", {"seq": seq}, reply)
        (msg,) = await self.request(frame, reply)
        assert msg[2] is not None
        return bytes(msg[2])


async def connect(server: Server) -> Session:
    raw = await RawClient.open(server.port)
    raw.send(CONNECT_HEADERS + b"SUB _R.> 1\r\n")
    await raw.ping()
    return Session(raw)


def stored(message: dict[str, Any]) -> bytes:
    return base64.b64decode(message.get("hdrs", ""))


async def test_headers_come_back_as_published(server: Server) -> None:
    s = await connect(server)
    assert "error" not in await s.api("STREAM.CREATE.H", STREAM)
    for i, (published, _) in enumerate(PUBLISHED_AND_STORED, 1):
        assert await s.publish(f"h.{i}", published, b"hi") == {"stream": "H", "seq": i}
    for i, (_, kept) in enumerate(PUBLISHED_AND_STORED, 1):
        message = (await s.api("STREAM.MSG.GET.H", {"seq": i}))["message"]
        assert stored(message) == kept
        # A direct get adds its fields after the message's own (genHeader).
        direct = await s.direct_get(i)
        added = b"Nats-Stream: H\r\nNats-Subject: h.%d\r\nNats-Sequence: %d\r\n" % (i, i)
        added += b"Nats-Time-Stamp: %b\r\n\r\n" % message["time"].encode()
        assert direct == (kept or b"NATS/1.0\r\n\r\n")[:-2] + added
    await s.raw.close()


async def test_headers_only_consumers_get_the_size_last(server: Server) -> None:
    s = await connect(server)
    await s.api("STREAM.CREATE.H", STREAM)
    for i, (published, _) in enumerate(PUBLISHED_AND_STORED, 1):
        await s.publish(f"h.{i}", published, b"hi")
    config = {"name": "C", "headers_only": True, "ack_policy": "none", "filter_subject": "h.>"}
    created = await s.api("CONSUMER.CREATE.H.C", {"stream_name": "H", "config": config})
    assert "error" not in created
    s.raw.send(b"SUB _N 2\r\n")
    frame = api_request("$JS.API.CONSUMER.MSG.NEXT.H.C", {"batch": 4, "no_wait": True}, "_N")
    got = await s.request(frame, "_N", count=4)
    headers = [m[2] for m in got]
    assert headers == [
        (kept or b"NATS/1.0\r\n\r\n")[:-2] + b"Nats-Msg-Size: 2\r\n\r\n"
        for _, kept in PUBLISHED_AND_STORED
    ]
    assert [m[3] for m in got] == [b""] * 4
    await s.raw.close()


async def test_a_schedule_copies_its_headers_but_its_own(server: Server) -> None:
    s = await connect(server)
    await s.api("STREAM.CREATE.H", STREAM)
    schedule = (
        b"NATS/1.0\r\nNats-Schedule: @at 2000-01-01T00:00:00Z\r\nKeep:  me \r\n"
        b"Nats-Schedule-Target: out.one\r\nNats-Expected-Stream: H\r\nNats-Msg-Id: m1\r\n"
        b"keep: 2\r\n\r\n"
    )
    assert "error" not in await s.publish("sched.one", schedule, b"body")
    produced: dict[str, Any] = {}
    for _ in range(200):  # a safety net: an @at in the past fires at once
        answer = await s.api("STREAM.MSG.GET.H", {"last_by_subj": "out.one"})
        if "message" in answer:
            produced = answer["message"]
            break
        await asyncio.sleep(0.05)
    assert stored(produced) == (
        b"NATS/1.0\r\nKeep:  me \r\nkeep: 2\r\nNats-Scheduler: sched.one\r\n"
        b"Nats-Schedule-Next: purge\r\n\r\n"
    )
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", produced["time"])
    await s.raw.close()
