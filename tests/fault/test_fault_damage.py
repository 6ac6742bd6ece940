"""Objects damaged at rest: a flipped bit, a truncated object, a deleted object.

The messages whose records were destroyed are lost (storage lost them), and only those: each is
reported (/varz, the log), consumers move past them, every other acknowledged message is read
back, and nothing stalls.

The publishers run until the store holds enough objects to damage, however long that takes.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from fault.jepsen import History, check
from fault.workload import STREAM, LiveConsumer, Publisher, audit, connect, create_stream, until
from support.agentproc import AgentProcess
from support.etcdserver import free_port
from support.storeinspect import cut_object, damage_object, object_keys, record_of, remove_object

pytestmark = pytest.mark.fault

PUBLISHERS = 3
# Objects written before the damage, and messages acknowledged: three objects are damaged,
# each among others, and most have several records.
OBJECTS = 12
ACKS = 600


def varz(agent: AgentProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.http_port}/varz", timeout=10) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


@pytest.mark.timeout(600)
async def test_damaged_objects_lose_only_their_own_records(
    tmp_path: Path, fault_report: list[str]
) -> None:
    store = tmp_path / "store"
    port = free_port()
    agent = AgentProcess(["-p", str(port), "-sd", str(store), "--linger", "20ms", "-m", "-1"])
    agent.start()
    servers = [agent.url]
    try:
        nc = await connect(servers)
        await create_stream(nc)
        await nc.close()
        history = History()
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(Publisher(i, servers, history, pace=0.005).run(stop))
            for i in range(PUBLISHERS)
        ]
        await until(
            lambda: len(history.acked) >= ACKS and len(object_keys(store / "objects")) >= OBJECTS,
            f"{ACKS} publishes acknowledged in {OBJECTS} objects",
        )
        stop.set()
        await asyncio.gather(*tasks)
        # The agent keeps what it wrote in its cache: a new one reads the damaged bytes.
        agent.kill()
        meta = store / "meta.db"
        where = {
            msg_id: record_of(meta, STREAM, seq) for msg_id, seq in sorted(history.acked.items())
        }
        objects = sorted({obj for obj, _, _ in where.values()})
        assert len(objects) >= 6, "too few objects to damage three of them"
        flipped, truncated, deleted = objects[1], objects[len(objects) // 2], objects[-2]
        # A bit flip in one record of the first.
        in_flipped = sorted((off, ln, k) for k, (o, off, ln) in where.items() if o == flipped)
        off, ln, hit = in_flipped[len(in_flipped) // 2]
        damage_object(store / "objects", flipped, off + ln - 5, 0x10)
        # The second cut in the middle of its records.
        in_truncated = sorted((off, ln, k) for k, (o, off, ln) in where.items() if o == truncated)
        cut = in_truncated[len(in_truncated) // 2][0] + 3
        cut_object(store / "objects", truncated, cut)
        # The third gone.
        remove_object(store / "objects", deleted)
        damaged = {hit}
        damaged |= {k for off, ln, k in in_truncated if off + ln > cut}
        damaged |= {k for k, (o, _, _) in where.items() if o == deleted}

        agent.start()
        consumer = LiveConsumer(servers, history)
        stop = asyncio.Event()
        consuming = asyncio.create_task(consumer.run(stop))
        # Live delivery past the damage first; the drain below fetches the rest.
        await until(lambda: len(history.consumed) >= ACKS // 2, "live delivery after the damage")
        stop.set()
        await consuming
        await consumer.drain(servers)
        stored = await audit(servers)
        reported = varz(agent)["infinistream"]["damaged"]
    finally:
        agent.kill()
    verdict = check("bit flip, truncation, deletion of objects", history, stored, damaged=damaged)
    verdict.notes["damaged-reported"] = reported["records"]
    fault_report.append(verdict.line())
    print(verdict.line())
    assert verdict.ok, verdict.problems()
    assert sorted(verdict.lost_to_damage) == sorted(damaged)
    assert reported["records"] == len(damaged)
