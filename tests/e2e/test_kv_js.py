"""nats.js Key-Value (@nats-io/kv), unmodified, against an agent and against nats-server.

tests/js/kv_client.mjs runs every KV operation nats.js has (see its header); here it runs once
against each server, and the agent must pass every step nats-server passes. Then nats-py reads
what nats.js left, the same on both.
"""

from __future__ import annotations

from nats.aio.client import Client

from support.jsclient import run_js
from support.servers import Server

STEPS = [
    "connect",
    "bucket created",
    "put and get",
    "create and update",
    "delete and purge",
    "keys",
    "history",
    "watch last values and updates",
    "watch include history, updates only, ignore deletes, headers only",
    "purgeDeletes",
    "status",
    "per-key TTL and its marker",
    "destroy",
]


async def test_nats_js_key_value(server: Server, server_nc: Client) -> None:
    run = await run_js("kv_client.mjs", server.url, server_log=server.log)
    assert run.steps == STEPS
    # What nats.js left behind, as nats-py reads it.
    kv = await server_nc.jetstream(timeout=10).key_value("JSKV")
    # purgeDeletes(-1) purged every key that ever had a delete marker, whatever came after it.
    assert sorted(await kv.keys()) == ["a", "b", "other", "users.ann", "users.cy"]
    assert (await kv.get("users.ann")).value == b"2"
    assert (await kv.get("b")).value == b"y"
