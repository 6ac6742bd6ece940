"""Subject filters and subscriptions built to hurt: every request is answered at once, and
other clients go on being served.

Each test runs against an agent and against nats-server with the same requests and the same
expected answers. A filter of many `>` tokens is not a valid subject: nats-server matches
nothing with it (no message found, nothing purged, no subject counted) and answers at once. The
agent once turned such a filter into a regular expression that took seconds for 12 tokens and
doubled with each one more; the 30 here would never finish. The request timeouts below are a
safety net only: a correct server answers in milliseconds.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from support.rawnats import CONNECT_HEADERS, RawClient
from support.servers import Server

API = "$JS.API."
# 30 '>' tokens: 2^30 ways to split a subject among them, for a backtracking matcher.
MANY_FWC = "r." + ".".join([">"] * 30)
DEEP = 1500  # tokens: beyond Python's default recursion limit of 1,000
SAFETY_NET = 20.0


async def api(nc: Client, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    msg = await nc.request(API + subject, json.dumps(body).encode(), timeout=SAFETY_NET)
    return json.loads(msg.data)  # type: ignore[no-any-return]


@pytest.fixture
async def filled(server: Server) -> Client:
    nc = await nats.connect(server.url)
    js = nc.jetstream(timeout=SAFETY_NET)
    await js.add_stream(name="F", subjects=["r.>"], allow_direct=True)
    for i in range(20):
        await js.publish("r." + ".".join(["a"] * 14) + f".{i}", b"x")
    return nc


async def test_a_filter_of_many_wildcards_finds_nothing_at_once(
    server: Server, filled: Client
) -> None:
    nc = filled
    bystander = await nats.connect(server.url)
    bystander_js = bystander.jetstream(timeout=SAFETY_NET)
    try:
        info = await api(nc, "STREAM.INFO.F", {"subjects_filter": MANY_FWC})
        assert info["state"]["messages"] == 20
        assert not info["state"].get("subjects")
        for body in ({"last_by_subj": MANY_FWC}, {"seq": 1, "next_by_subj": MANY_FWC}):
            got = await api(nc, "STREAM.MSG.GET.F", body)
            assert got["error"] == {
                "code": 404,
                "err_code": 10037,
                "description": "no message found",
            }
            direct = await nc.request(
                API + "DIRECT.GET.F", json.dumps(body).encode(), timeout=SAFETY_NET
            )
            assert direct.headers is not None and direct.headers["Status"] == "404"
        by_subject = await nc.request(API + "DIRECT.GET.F." + MANY_FWC, b"", timeout=SAFETY_NET)
        assert by_subject.headers is not None and by_subject.headers["Status"] == "404"
        purged = await api(nc, "STREAM.PURGE.F", {"filter": MANY_FWC})
        assert purged["success"] and purged["purged"] == 0
        # A publish expecting the last sequence of such a subject: nothing matches, so 0 holds.
        ack = await nc.jetstream(timeout=SAFETY_NET).publish(
            "r.z",
            b"x",
            headers={
                "Nats-Expected-Last-Subject-Sequence": "0",
                "Nats-Expected-Last-Subject-Sequence-Subject": MANY_FWC,
            },
        )
        assert ack.seq == 21
        # Another client was served all along.
        assert (await bystander_js.publish("r.b", b"y")).seq == 22
    finally:
        await bystander.close()
        await nc.close()


async def test_a_subscription_of_1500_wildcards_gets_its_acks_and_so_do_others(
    server: Server,
) -> None:
    """A subscription `*.*.*...` of 1,500 tokens and a publish whose reply has 1,500 tokens:
    the agent once raised RecursionError while sending the PubAcks of the batch it was in, and
    every other publisher of that batch waited for an ack that never came."""
    nc = await nats.connect(server.url)
    js = nc.jetstream(timeout=SAFETY_NET)
    await js.add_stream(name="D", subjects=["d.>"])
    raw = await RawClient.open(server.port)
    try:
        raw.send(CONNECT_HEADERS)
        raw.send(b"SUB " + b".".join([b"*"] * DEEP) + b" 1\r\n")
        assert await raw.ping() == b""
        reply = b".".join([b"t"] * DEEP)
        others = [js.publish(f"d.{i}", b"x") for i in range(50)]
        raw.send(b"PUB d.deep " + reply + b" 1\r\nx\r\n")
        acks = await asyncio.gather(*others)
        assert sorted(a.seq for a in acks) == sorted(set(a.seq for a in acks))
        got = await raw.read_until(b"\r\n", timeout=SAFETY_NET)
        assert got.startswith(b"MSG " + reply + b" 1 "), got[:80]
        answer = json.loads(await raw.read_until(b"}\r\n", timeout=SAFETY_NET))
        assert answer["stream"] == "D" and 1 <= answer["seq"] <= 51
        assert (await js.stream_info("D")).state.messages == 51
    finally:
        await raw.close()
        await nc.close()
