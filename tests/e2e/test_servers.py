"""The harness that runs one test against an agent and against nats-server
(tests/support/servers.py)."""

from __future__ import annotations

import asyncio

import nats
from nats.aio.client import Client

from support.servers import Server


async def test_each_server_takes_a_stream_a_publish_and_a_get(
    server: Server, server_nc: Client
) -> None:
    js = server_nc.jetstream(timeout=10)
    await js.add_stream(name="H", subjects=["h.>"])
    ack = await js.publish("h.1", b"one")
    assert (ack.stream, ack.seq) == ("H", 1)
    assert (await js.get_msg("H", 1)).data == b"one"
    # The fixture really ran the server it names: the agent says so where nats-server names Go.
    assert server_nc._server_info["jetstream"] is True
    assert ("infinistream" in server_nc._server_info["go"]) == server.is_agent


async def test_a_restarted_server_keeps_its_port_and_its_messages(server: Server) -> None:
    reconnected = asyncio.Event()

    async def on_reconnect() -> None:
        reconnected.set()

    nc = await nats.connect(
        server.url, reconnected_cb=on_reconnect, max_reconnect_attempts=-1, reconnect_time_wait=0.1
    )
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="R", subjects=["r"])
        await js.publish("r", b"kept")
        port = server.port
        server.restart()
        assert server.port == port
        await asyncio.wait_for(reconnected.wait(), 30)
        assert (await js.get_msg("R", 1)).data == b"kept"
    finally:
        await nc.close()
