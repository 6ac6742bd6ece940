"""Republish in a pool: subscribers on every agent get every committed message once, in
sequence order, whichever agent committed it."""

from __future__ import annotations

import asyncio
import json

from nats.aio.client import Client
from nats.aio.msg import Msg

from support.polling import until
from support.written import written

MESSAGES = 60


async def test_subscribers_on_both_agents_get_each_message_once(two_clients: list[Client]) -> None:
    a, b = two_clients
    resp = await a.request(
        "$JS.API.STREAM.CREATE.RPA",
        json.dumps(
            {"name": "RPA", "subjects": ["rpa.>"], "republish": {"src": "rpa.>", "dest": "out.>"}}
        ).encode(),
        timeout=10,
    )
    assert "error" not in json.loads(resp.data)
    received: dict[str, list[Msg]] = {"a": [], "b": []}

    async def on_a(msg: Msg) -> None:
        received["a"].append(msg)

    async def on_b(msg: Msg) -> None:
        received["b"].append(msg)

    await a.subscribe("out.>", cb=on_a)
    await b.subscribe("out.>", cb=on_b)
    await written(a, b)
    js = [a.jetstream(timeout=10), b.jetstream(timeout=10)]
    # Publishes from both agents at once, each waiting for its ack.
    acks = await asyncio.gather(
        *(js[n % 2].publish(f"rpa.{n % 3}", str(n).encode()) for n in range(MESSAGES))
    )
    assert sorted(ack.seq for ack in acks) == list(range(1, MESSAGES + 1))
    # The last message seen by both means every earlier one had its chance to come twice.
    last = await js[0].publish("rpa.last", b"last")
    await until(
        lambda: all(m and m[-1].data == b"last" for m in received.values()),
        timeout=60,
        what=f"the last message republished on both agents: {[len(m) for m in received.values()]}",
    )
    by_seq = {str(ack.seq): ack for ack in acks}
    for where, msgs in received.items():
        seqs = [int((m.headers or {})["Nats-Sequence"]) for m in msgs]
        assert seqs == list(range(1, last.seq + 1)), where
        for msg in msgs[:-1]:
            headers = msg.headers or {}
            ack = by_seq[headers["Nats-Sequence"]]
            assert (headers["Nats-Stream"], ack.stream) == ("RPA", "RPA")
            assert msg.subject == "out." + headers["Nats-Subject"].removeprefix("rpa.")
    # Nats-Last-Sequence: each subject's previous sequence, the same on both agents.
    for msgs in received.values():
        previous: dict[str, int] = {}
        for msg in msgs:
            headers = msg.headers or {}
            subject = headers["Nats-Subject"]
            assert int(headers["Nats-Last-Sequence"]) == previous.get(subject, 0)
            previous[subject] = int(headers["Nats-Sequence"])
