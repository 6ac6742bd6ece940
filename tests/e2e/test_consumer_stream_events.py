"""What consumers see when their stream changes under them, and acks nothing serves."""

from __future__ import annotations

import pytest
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig


async def test_purge_moves_consumers_past_what_is_gone(js: JetStreamContext) -> None:
    await js.add_stream(name="P", subjects=["p.>"])
    for i in range(4):
        await js.publish("p.x", str(i).encode())
    sub = await js.pull_subscribe(
        "p.>", durable="D", config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT)
    )
    msgs = await sub.fetch(2, timeout=2)
    assert [m.metadata.sequence.stream for m in msgs] == [1, 2]
    await js.purge_stream("P")
    info = await js.consumer_info("P", "D")
    # The numbers nats-server 2.15 reports after the same steps.
    assert (info.delivered.consumer_seq, info.delivered.stream_seq) == (2, 4)
    assert (info.ack_floor.consumer_seq, info.ack_floor.stream_seq) == (2, 4)
    assert info.num_ack_pending == 0
    assert info.num_pending == 0
    await js.publish("p.x", b"after")
    (msg,) = await sub.fetch(1, timeout=2)
    assert msg.data == b"after"
    assert msg.metadata.sequence.stream == 5


async def test_ack_sync_to_a_consumer_that_does_not_exist_gets_no_responders(
    nc: Client, js: JetStreamContext
) -> None:
    await js.add_stream(name="A", subjects=["a.>"])
    with pytest.raises(NoRespondersError):
        await nc.request("$JS.ACK.A.NOPE.1.1.1.1700000000000000000.0", b"+ACK", timeout=2)


async def test_ack_sync_to_an_ack_none_consumer_gets_no_responders(
    nc: Client, js: JetStreamContext
) -> None:
    await js.add_stream(name="N", subjects=["n.>"])
    await js.publish("n.x", b"1")
    sub = await js.pull_subscribe(
        "n.>", durable="NONE", config=ConsumerConfig(ack_policy=AckPolicy.NONE)
    )
    (msg,) = await sub.fetch(1, timeout=2)
    with pytest.raises(NoRespondersError):
        await nc.request(msg.reply, b"+ACK", timeout=2)
