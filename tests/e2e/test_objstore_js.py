"""nats.js Object Store (@nats-io/obj), unmodified, against an agent and against nats-server.

tests/js/obj_client.mjs runs every object store operation nats.js has, links included (see its
header); here it runs once against each server. Then nats-py reads what nats.js left.
"""

from __future__ import annotations

from nats.aio.client import Client

from support.jsclient import run_js
from support.servers import Server

STEPS = [
    "connect",
    "store created",
    "put a large object from a stream",
    "get it back as a stream and as a blob",
    "info and list",
    "watch",
    "links to an object and to a store",
    "update meta and rename",
    "delete",
    "seal",
    "status",
]


async def test_nats_js_object_store(server: Server, server_nc: Client) -> None:
    run = await run_js("obj_client.mjs", server.url, server_log=server.log)
    assert run.steps == STEPS
    obs = await server_nc.jetstream(timeout=10).object_store("JSOBJ")
    assert (await obs.get("renamed")).data == b"tiny"
    assert (await obs.status()).sealed is True
