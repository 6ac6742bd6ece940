"""/healthz and the erase deadline (`--erase-deadline`): an erase request that is not complete
in time makes the agent unhealthy, in nats-server's shape, with the reason; a plain delete
(`no_erase`) owes nothing and leaves it healthy."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import nats

from support.agentproc import running_agent
from support.monitorshape import http_get


async def test_a_late_erase_makes_healthz_unavailable(tmp_path: Path) -> None:
    with running_agent(tmp_path / "store", "-m", "-1", "--erase-deadline", "1s") as agent:
        nc = await nats.connect(agent.url)
        try:
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="H", subjects=["h.>"])
            for i in range(3):
                await js.publish(f"h.{i}", b"x")
            body = json.dumps({"seq": 1, "no_erase": True}).encode()
            await nc.request("$JS.API.STREAM.MSG.DELETE.H", body, timeout=10)
            await asyncio.sleep(1.5)
            status, _, health = await asyncio.to_thread(http_get, agent.http_port, "/healthz")
            assert (status, health) == (200, {"status": "ok"})

            await js.delete_msg("H", 2)  # an erase: owed within the deadline, and not done
            await asyncio.sleep(1.5)
            status, _, health = await asyncio.to_thread(http_get, agent.http_port, "/healthz")
            assert status == 503
            assert health["status"] == "unavailable"
            assert health["error"].startswith("1 erase requests missed their deadline of 1s;")
            assert "stream H, pending" in health["error"]
            assert "infinistream pipeline erase" in health["error"]
        finally:
            await nc.close()
