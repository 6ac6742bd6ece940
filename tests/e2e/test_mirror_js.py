"""nats.js (tests/js/mirror_client.mjs) with mirrors and sources, of streams and of KV buckets
(`kvm.create(..., { mirror })`, `{ sources }`), against the agent and nats-server."""

from __future__ import annotations

from support.jsclient import run_js
from support.servers import Server


async def test_nats_js_mirrors_and_sources(server: Server) -> None:
    run = await run_js("mirror_client.mjs", server.url, server_log=server.log)
    assert run.steps == ["connect", "stream mirror", "kv mirror", "kv sources"]
