"""Publishes with malformed headers fail alone, with nats-server's own errors.

The same test runs against an agent and against nats-server. One client writes, in a single
write, plain publishes with a malformed one between each two; another client publishes at the
same time. Each malformed publish gets the error nats-server gives it, each other publish its
ack. The agent once failed the whole flush such a message was in with `503 10077 metadata
commit failed: <a Python exception>`, every other publisher of the batch included, and closed
the connection of a client that sent an unknown time zone.
"""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

from support.rawnats import CONNECT_HEADERS, RawClient, hpub, parse_msgs, pub
from support.servers import Server

SAFETY_NET = 20.0
NINES = b"9" * 5000
WRONG_LAST = "wrong last sequence: "

# (header lines, the error nats-server 2.15.1 answers with: code, err_code, description; a
# description ending in ": " is a prefix, the sequence after it depends on the interleaving).
MALFORMED: list[tuple[bytes, tuple[int, int, str]]] = [
    (b"Nats-Expected-Stream: \xff\xfe\r\n", (400, 10060, "expected stream does not match")),
    (b"Nats-Rollup: \xff\xfe\r\n", (500, 10111, 'rollup value invalid: "\ufffd\ufffd"')),
    (b"Nats-Expected-Last-Sequence: " + NINES + b"\r\n", (400, 10071, WRONG_LAST)),
    (b"Nats-Expected-Last-Subject-Sequence: " + NINES + b"\r\n", (400, 10071, WRONG_LAST)),
    (b"Nats-TTL: " + NINES + b"\r\n", (400, 10165, "invalid per-message TTL")),
    (
        b"Nats-Schedule: @hourly\r\nNats-Schedule-Target: h.target\r\n"
        b"Nats-Schedule-Time-Zone: America\r\n",
        (400, 10223, "message schedules time zone is invalid"),
    ),
    (b"Nats-Expected-Last-Msg-Id: \xff\xfe\r\n", (400, 10070, "wrong last msg ID: ")),
]


def headers(lines: bytes) -> bytes:
    return b"NATS/1.0\r\n" + lines + b"\r\n"


@pytest.fixture
async def raw(server: Server) -> RawClient:
    nc = await nats.connect(server.url)
    await nc.jetstream(timeout=SAFETY_NET).add_stream(
        name="H",
        subjects=["h.>"],
        allow_msg_ttl=True,
        allow_rollup_hdrs=True,
        allow_msg_schedules=True,
    )
    await nc.close()
    client = await RawClient.open(server.port)
    client.send(CONNECT_HEADERS + b"SUB _R.> 1\r\n")
    assert await client.ping() == b""
    return client


async def answers(raw: RawClient, count: int) -> dict[int, dict[str, object]]:
    """The JSON answer to each reply `_R.<n>`, once `count` of them arrived."""
    got: dict[int, dict[str, object]] = {}
    buffered = b""
    async with asyncio.timeout(SAFETY_NET):
        while len(got) < count:
            buffered += await raw.read_until(b"}\r\n")
            for subject, _, _, payload in parse_msgs(buffered):
                got[int(subject.split(".")[1])] = json.loads(payload)
            buffered = b""
    return got


async def test_a_malformed_header_fails_only_its_own_message(
    server: Server, raw: RawClient
) -> None:
    bystander = await nats.connect(server.url)
    js = bystander.jetstream(timeout=SAFETY_NET)
    try:
        frames = [pub("h.a", b"ok", "_R.0")]
        for n, (lines, _) in enumerate(MALFORMED, start=1):
            frames.append(hpub("h.x", headers(lines), b"bad", f"_R.{2 * n - 1}"))
            frames.append(pub("h.a", b"ok", f"_R.{2 * n}"))
        others = asyncio.gather(*(js.publish(f"h.b.{i}", b"x") for i in range(50)))
        raw.send(b"".join(frames))
        got = await answers(raw, len(frames))
        acked = await others
        for n, (lines, (code, err_code, description)) in enumerate(MALFORMED, start=1):
            error = got[2 * n - 1].get("error")
            assert isinstance(error, dict), (lines[:60], got[2 * n - 1])
            assert (error["code"], error["err_code"]) == (code, err_code), lines[:60]
            if description.endswith(": ") and description != "wrong last msg ID: ":
                assert error["description"].startswith(description)
            else:
                assert error["description"] == description, lines[:60]
        plain = [got[2 * n] for n in range(len(MALFORMED) + 1)]
        assert all(a.get("stream") == "H" and a.get("seq") for a in plain), plain
        assert len(acked) == 50
        seqs = [a["seq"] for a in plain] + [a.seq for a in acked]
        assert len(set(seqs)) == len(seqs) == (await js.stream_info("H")).state.messages
    finally:
        await bystander.close()
        await raw.close()


async def test_a_message_id_that_is_not_utf8_is_kept_and_deduplicated(
    server: Server, raw: RawClient
) -> None:
    try:
        raw.send(hpub("h.a", headers(b"Nats-Msg-Id: \xff\xfe\r\n"), b"1", "_R.0"))
        first = (await answers(raw, 1))[0]
        assert first == {"stream": "H", "seq": 1}
        # The same bytes again: a duplicate. Other bytes that are not UTF-8 either: a new id.
        raw.send(hpub("h.a", headers(b"Nats-Msg-Id: \xff\xfe\r\n"), b"1", "_R.1"))
        assert (await answers(raw, 1))[1] == {"stream": "H", "seq": 1, "duplicate": True}
        raw.send(hpub("h.a", headers(b"Nats-Msg-Id: \xff\xfd\r\n"), b"1", "_R.2"))
        assert (await answers(raw, 1))[2] == {"stream": "H", "seq": 2}
    finally:
        await raw.close()
