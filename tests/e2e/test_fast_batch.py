"""Fast-ingest batch publishing (ADR-50: replies `<inbox>.<id>.<flow>.<gap>.<seq>.<op>.$FI`) on
an agent and on nats-server, with raw publishes: the flow acks, the commit's PubAck (with and
without its last message), gaps allowed and not, pings, and the refusals; and nats.js's
startFastIngest."""

from __future__ import annotations

import json
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.subscription import Subscription

from support.jsapi import api, error
from support.jsclient import run_js
from support.servers import Server

DISABLED = (400, 10205, "batch publish is disabled")
START, APPEND, COMMIT, EOB, PING = range(5)


class FastPublisher:
    """One fast batch, published raw, and the answers on its inbox."""

    def __init__(self, nc: Client, sub: Subscription, inbox: str, batch: str, flow: int, gap: str):
        self.nc, self.sub = nc, sub
        self.prefix = f"{inbox}.{batch}.{flow}.{gap}"

    @classmethod
    async def open(
        cls, nc: Client, batch: str = "b1", flow: int = 10, gap: str = "fail"
    ) -> FastPublisher:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox + ".>")
        return cls(nc, sub, inbox, batch, flow, gap)

    async def send(self, seq: int, op: int, subject: str = "s.a", data: bytes = b"x") -> None:
        await self.nc.publish(subject, data, reply=f"{self.prefix}.{seq}.{op}.$FI")

    async def answer(self) -> dict[str, Any]:
        return json.loads((await self.sub.next_msg(timeout=10)).data)  # type: ignore[no-any-return]

    async def until_pub_ack(self) -> list[dict[str, Any]]:
        """Every answer up to the batch's PubAck (or a plain error), in order."""
        seen = []
        while True:
            seen.append(await self.answer())
            if "type" not in seen[-1]:
                return seen


def flow(seq: int, msgs: int = 10) -> dict[str, Any]:
    return {"type": "ack", "seq": seq, "msgs": msgs}


async def batched_stream(nc: Client, **config: Any) -> None:
    body = {"name": "S", "subjects": ["s.>"], "allow_batched": True, **config}
    created = await api(nc, "STREAM.CREATE.S", body)
    assert created["config"]["allow_batched"] is True, created


async def messages(nc: Client) -> int:
    return (await api(nc, "STREAM.INFO.S"))["state"]["messages"]  # type: ignore[no-any-return]


async def test_a_batch_is_acked_every_n_and_committed(server_nc: Client) -> None:
    await batched_stream(server_nc)
    pub = await FastPublisher.open(server_nc)
    await pub.send(1, START)
    # The first message is answered at once with the pace to keep.
    assert await pub.answer() == flow(0)
    for seq in range(2, 25):
        await pub.send(seq, APPEND)
    await pub.send(25, COMMIT)
    assert await pub.until_pub_ack() == [
        flow(10),
        flow(20),
        {"stream": "S", "seq": 25, "batch": "b1", "count": 25},
    ]
    assert await messages(server_nc) == 25


async def test_end_of_batch_commits_without_its_message(server_nc: Client) -> None:
    await batched_stream(server_nc)
    pub = await FastPublisher.open(server_nc, flow=2)
    await pub.send(1, START)
    assert await pub.answer() == flow(0, 2)
    await pub.send(2, APPEND)
    await pub.send(3, APPEND)
    await pub.send(4, EOB)
    answers = await pub.until_pub_ack()
    assert answers[0] == flow(2, 2)
    assert answers[-1] == {"stream": "S", "seq": 3, "batch": "b1", "count": 3}
    assert await messages(server_nc) == 3


async def test_a_gap_ends_a_fail_batch(server_nc: Client) -> None:
    await batched_stream(server_nc)
    pub = await FastPublisher.open(server_nc, gap="fail")
    await pub.send(1, START)
    assert await pub.answer() == flow(0)
    await pub.send(3, APPEND)
    assert await pub.until_pub_ack() == [
        {"type": "gap", "last_seq": 2, "seq": 3},
        {"stream": "S", "seq": 1, "batch": "b1", "count": 1},
    ]
    await pub.send(4, APPEND)
    assert error(await pub.answer()) == (400, 10208, "batch publish ID unknown")
    assert await messages(server_nc) == 1


async def test_a_gap_is_reported_and_passed_in_an_ok_batch(server_nc: Client) -> None:
    await batched_stream(server_nc)
    pub = await FastPublisher.open(server_nc, gap="ok")
    await pub.send(1, START)
    assert await pub.answer() == flow(0)
    await pub.send(3, APPEND)
    assert await pub.answer() == {"type": "gap", "last_seq": 2, "seq": 3}
    # A ping repeats the last flow ack.
    await pub.send(3, PING)
    assert await pub.answer() == flow(0)
    await pub.send(4, COMMIT)
    assert await pub.until_pub_ack() == [{"stream": "S", "seq": 3, "batch": "b1", "count": 4}]
    assert await messages(server_nc) == 3


@pytest.mark.parametrize(
    ("reply_tail", "expected"),
    [
        ("b.10.maybe.1.0.$FI", (400, 10206, "batch publish pattern is invalid")),
        ("b.10.ok.1.1.$FI", (400, 10206, "batch publish pattern is invalid")),
        ("b.10.ok.2.1.$FI", (400, 10208, "batch publish ID unknown")),
        (
            "b" * 65 + ".10.ok.1.0.$FI",
            (400, 10207, "batch publish ID is invalid"),
        ),
    ],
)
async def test_bad_batch_messages(
    server_nc: Client, reply_tail: str, expected: tuple[int, int, str]
) -> None:
    await batched_stream(server_nc)
    inbox = server_nc.new_inbox()
    sub = await server_nc.subscribe(inbox + ".>")
    await server_nc.publish("s.a", b"x", reply=f"{inbox}.{reply_tail}")
    assert error(json.loads((await sub.next_msg(timeout=10)).data)) == expected
    assert await messages(server_nc) == 0


async def fast_publish(nc: Client, subject: str, reply_tail: str, data: bytes = b"x") -> Any:
    """Publish one fast batch message; the first answer."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox + ".>")
    await nc.publish(subject, data, reply=f"{inbox}.{reply_tail}")
    msg = await sub.next_msg(timeout=10)
    await sub.unsubscribe()
    return json.loads(msg.data)


@pytest.mark.parametrize(
    "reply_tail",
    [
        "b1.10.ok.1.0.$FI",  # a batch's first message
        "b1.10.fail.2.2.$FI",  # a commit of a batch never started
        "not-a-batch.$FI",  # malformed: still a fast batch to nats-server
    ],
)
async def test_without_allow_batched_nothing_is_stored(server_nc: Client, reply_tail: str) -> None:
    await api(server_nc, "STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
    answer = await fast_publish(server_nc, "s.a", reply_tail)
    assert error(answer) == DISABLED and answer["stream"] == "S"
    assert await messages(server_nc) == 0


async def test_checks_before_the_batch_setting(server_nc: Client) -> None:
    await api(server_nc, "STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "max_msg_size": 4})
    too_big = await fast_publish(server_nc, "s.a", "b.10.ok.1.0.$FI", b"12345")
    assert error(too_big) == (400, 10054, "message size exceeds maximum allowed")
    await api(server_nc, "STREAM.UPDATE.S", {"name": "S", "subjects": ["s.>"], "sealed": True})
    sealed = await fast_publish(server_nc, "s.a", "b.10.ok.1.0.$FI")
    assert error(sealed) == (400, 10109, "invalid operation on sealed stream")


async def test_nats_js_fast_ingest(server: Server) -> None:
    run = await run_js("fast_ingest_client.mjs", server.url, server_log=server.log)
    assert run.steps == ["connect", "batch", "end of batch"] and run.result == {"count": 100}
