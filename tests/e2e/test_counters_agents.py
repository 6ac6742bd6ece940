"""Counter increments from many agents at once: none is lost, each is stored on the value
before it (every PubAck's `val` is a different total), whichever agent takes it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from nats.aio.client import Client

from support.agentpool import connected, running_agents

AGENTS = 3
CLIENTS_PER_AGENT = 2
INCREMENTS_PER_CLIENT = 20


async def increment(nc: Client, subject: str) -> int:
    msg = await nc.request(subject, b"", headers={"Nats-Incr": "+1"}, timeout=60)
    ack = json.loads(msg.data)
    assert "error" not in ack, ack
    return int(ack["val"])


async def test_increments_from_many_agents_lose_no_update(store_dir: Path) -> None:
    with running_agents(store_dir, count=AGENTS) as agents:
        pools = [connected(*agents, allow_reconnect=False) for _ in range(CLIENTS_PER_AGENT)]
        async with pools[0] as first, pools[1] as second:
            clients = first + second
            resp = await clients[0].request(
                "$JS.API.STREAM.CREATE.HITS",
                json.dumps(
                    {"name": "HITS", "subjects": ["hits.>"], "allow_msg_counter": True}
                ).encode(),
                timeout=10,
            )
            assert "error" not in json.loads(resp.data)
            # Every client at once, each with its increments in flight together.
            values = await asyncio.gather(
                *(
                    increment(nc, "hits.page")
                    for nc in clients
                    for _ in range(INCREMENTS_PER_CLIENT)
                )
            )
            total = len(clients) * INCREMENTS_PER_CLIENT
            assert sorted(values) == list(range(1, total + 1))
            js = clients[-1].jetstream(timeout=10)
            last = await js.get_last_msg("HITS", "hits.page")
            assert last.data == b'{"val":"%d"}' % total
            info = await js.stream_info("HITS")
            assert info.state.messages == total
            # Stored in sequence order, each on the one before it.
            stored = [
                json.loads((await js.get_msg("HITS", seq)).data)["val"]
                for seq in range(1, total + 1)
            ]
            assert stored == [str(n) for n in range(1, total + 1)]
