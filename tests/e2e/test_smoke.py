"""The shortest path through the product: create a stream, publish, read back."""

from __future__ import annotations

from nats.js import JetStreamContext


async def test_create_publish_read(js: JetStreamContext) -> None:
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    acks = [await js.publish("orders.new", f"m{i}".encode()) for i in range(3)]
    assert [a.seq for a in acks] == [1, 2, 3]
    assert {a.stream for a in acks} == {"ORDERS"}
    msg = await js.get_msg("ORDERS", 2)
    assert msg.data == b"m1"
    assert msg.subject == "orders.new"
    info = await js.stream_info("ORDERS")
    assert info.state.messages == 3
    assert info.state.last_seq == 3
