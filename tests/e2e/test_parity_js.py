"""nats.js, unmodified, against an agent and nats-server alike (tests/js/parity_client.mjs):
repeated header values back in order from a message get, a pull and an ordered consumer;
requests with nulls; an ordered consumer's mem_storage; nats-server's bytes for a message; a
subscriber on `$JS.API.>` seeing the manager's requests."""

from __future__ import annotations

from support.jsclient import run_js
from support.servers import Server


async def test_nats_js_reads_back_what_it_published(server: Server) -> None:
    run = await run_js("parity_client.mjs", server.url, server_log=server.log)
    assert run.steps == [
        "connect",
        "one message's bytes",
        "repeated header values",
        "ordered consumer info",
        "nulls",
        "API subscriber",
    ]
