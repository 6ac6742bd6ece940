"""Fast-ingest batch publishing (ADR-50: a reply subject ending in `.$FI`) on an agent and on
nats-server. The agent does not implement it yet: `allow_batched` is refused at stream
creation, so a fast batch message meets what nats-server answers on a stream without it
(10205, nothing stored), never a plain publish's PubAck."""

from __future__ import annotations

import json
from typing import Any

import pytest
from nats.aio.client import Client

from support.jsapi import api, error
from support.servers import Server

DISABLED = (400, 10205, "batch publish is disabled")


async def fast_publish(nc: Client, subject: str, reply_tail: str, data: bytes = b"x") -> Any:
    """Publish as a fast-ingest client does, with an inbox of its own; the first answer."""
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
async def test_fast_batch_messages_are_refused_and_not_stored(
    server_nc: Client, reply_tail: str
) -> None:
    await api(server_nc, "STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
    answer = await fast_publish(server_nc, "s.a", reply_tail)
    assert error(answer) == DISABLED and answer["stream"] == "S"
    assert (await api(server_nc, "STREAM.INFO.S"))["state"]["messages"] == 0


async def test_checks_before_the_batch_setting(server_nc: Client) -> None:
    await api(server_nc, "STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "max_msg_size": 4})
    too_big = await fast_publish(server_nc, "s.a", "b.10.ok.1.0.$FI", b"12345")
    assert error(too_big) == (400, 10054, "message size exceeds maximum allowed")
    await api(server_nc, "STREAM.UPDATE.S", {"name": "S", "subjects": ["s.>"], "sealed": True})
    sealed = await fast_publish(server_nc, "s.a", "b.10.ok.1.0.$FI")
    assert error(sealed) == (400, 10109, "invalid operation on sealed stream")


async def test_allow_batched_is_refused_by_the_agent(server: Server, server_nc: Client) -> None:
    answer = await api(
        server_nc, "STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"], "allow_batched": True}
    )
    if server.is_agent:
        assert error(answer) == (
            500,
            10052,
            "allow_batched not supported by InfiniStream",
        )
    else:
        assert answer["config"]["allow_batched"] is True
