"""Schedules with two agents on one store: both run the scheduler pass, each due time produces
one message, and the schedule keeps firing while each agent in turn is killed (kill -9) and
restarted. (A single nats-server has nothing to compare this with; test_message_schedules.py
compares the single-server behaviour.)

The run counts fires, not seconds: each restart comes once the schedule has fired again.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from support.agentpool import running_agents
from support.agentproc import AgentProcess
from support.jsapi import api

INTERVAL = 2
# Fires of the schedule before each restart, and after the last.
FIRES_BETWEEN = 2
# Only a safety net: a wait for fires that do not come fails after this long.
SAFETY_NET = 120.0


@pytest.fixture
def agents(store_dir: Path) -> Iterator[list[AgentProcess]]:
    # A long linger holds each agent's produced message back while the other's pass runs:
    # both produce the same due time, and the commit must take only one.
    with running_agents(store_dir, linger="300ms") as agents:
        yield agents


@pytest.fixture
async def client(agents: list[AgentProcess]) -> AsyncIterator[Client]:
    a, b = agents
    nc = await nats.connect(
        servers=[a.url, b.url], reconnect_time_wait=0.2, max_reconnect_attempts=-1
    )
    yield nc
    await nc.close()


async def produced(js: JetStreamContext, subject: str) -> list[dict[str, str]]:
    """The headers of every message on `subject`, in order."""
    for _ in range(50):
        try:
            state = (await js.stream_info("S")).state
            break
        except (TimeoutError, nats.errors.Error):
            await asyncio.sleep(0.2)
    found = []
    for seq in range(state.first_seq, state.last_seq + 1):
        try:
            msg = await js.get_msg("S", seq)
        except NotFoundError:
            continue
        if msg.subject == subject:
            found.append(dict(msg.headers or {}))
    return found


async def until_produced(js: JetStreamContext, subject: str, count: int) -> int:
    """Wait until `subject` has `count` messages or more; how many it has then."""
    deadline = time.monotonic() + SAFETY_NET
    while (n := len(await produced(js, subject))) < count:
        assert time.monotonic() < deadline, (
            f"{count} messages on {subject}: {n} after {SAFETY_NET} s"
        )
        await asyncio.sleep(0.5)
    return n


async def test_each_due_time_fires_once_across_restarts(
    agents: list[AgentProcess], client: Client
) -> None:
    js = client.jetstream(timeout=10)
    body = {"name": "S", "subjects": ["sched.>", "out.>"], "allow_msg_schedules": True}
    await api(client, "STREAM.CREATE.S", body)
    every = {"Nats-Schedule": f"@every {INTERVAL}s", "Nats-Schedule-Target": "out.tick"}
    resp = await client.request("sched.tick", b"tick", headers=every, timeout=10)
    assert json.loads(resp.data)["seq"] == 1
    # And a one-off, due while the first agent is down.
    when = (datetime.now(UTC) + timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    once = {"Nats-Schedule": f"@at {when}", "Nats-Schedule-Target": "out.once"}
    resp = await client.request("sched.once", b"once", headers=once, timeout=10)
    assert json.loads(resp.data)["seq"] == 2
    fired = 0
    for agent in agents:
        fired = await until_produced(js, "out.tick", fired + FIRES_BETWEEN)
        agent.restart()  # kill -9, then start again on the same store
    await until_produced(js, "out.tick", fired + FIRES_BETWEEN)
    await until_produced(js, "out.once", 1)
    ticks = await produced(js, "out.tick")
    nexts = [datetime.fromisoformat(h["Nats-Schedule-Next"].replace("Z", "+00:00")) for h in ticks]
    # No due time produced twice, by two agents or by one before and after its restart.
    assert len(set(nexts)) == len(nexts)
    assert nexts == sorted(nexts)
    # And none lost: each message names the next due time, one interval on (a fire more than
    # an interval late, on a loaded machine, skips ahead as nats-server does: at most one).
    span = (nexts[-1] - nexts[0]).total_seconds() / INTERVAL
    assert len(nexts) >= 6 and len(nexts) >= span, nexts
    assert [h["Nats-Scheduler"] for h in ticks] == ["sched.tick"] * len(ticks)
    [once] = await produced(js, "out.once")
    assert once["Nats-Schedule-Next"] == "purge"
    assert await produced(js, "sched.once") == []
