"""Expiry with several agents on one store: every agent runs the pass, each message goes once,
each subject gets one delete marker, and expiry goes on when the agent that took the publishes
is killed. (A single nats-server has nothing to compare this with; test_message_ttl.py compares the
single-server behaviour.)"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from support.agentpool import connected, running_agents
from support.agentproc import AgentProcess
from support.jsapi import api

S = 1_000_000_000


@pytest.fixture
def agents(store_dir: Path) -> Iterator[list[AgentProcess]]:
    with running_agents(store_dir, count=3) as agents:
        yield agents


@pytest.fixture
async def clients(agents: list[AgentProcess]) -> AsyncIterator[list[Client]]:
    async with connected(*agents) as clients:
        yield clients


async def test_three_agents_place_one_marker_per_subject(clients: list[Client]) -> None:
    nc = clients[0]
    js = nc.jetstream(timeout=10)
    body = {"name": "T", "subjects": ["t.>"], "max_age": 3 * S, "subject_delete_marker_ttl": 5 * S}
    await api(nc, "STREAM.CREATE.T", body)
    subjects = [f"t.{i}" for i in range(30)]
    for i, subject in enumerate(subjects):
        await clients[i % 3].jetstream(timeout=10).publish(subject, b"x")
    seen: dict[str, int] = {}
    for _ in range(200):
        await asyncio.sleep(0.1)
        for subject in subjects:
            if subject not in seen:
                try:
                    msg = await js.get_msg("T", subject=subject)
                except nats.js.errors.NotFoundError:
                    continue
                if msg.headers and msg.headers.get("Nats-Marker-Reason") == "MaxAge":
                    seen[subject] = msg.seq
        state = (await js.stream_info("T")).state
        if state.messages == 0 and state.last_seq >= 60:
            break
    await asyncio.sleep(2)  # a few more passes of every agent
    state = (await js.stream_info("T")).state
    # One marker per subject, each with its own sequence after the messages: no agent placed
    # one twice. (The markers then age out too: older than max_age, a marker just goes.)
    assert (state.messages, state.last_seq) == (0, 60)
    assert len(set(seen.values())) == len(seen) and all(seq > 30 for seq in seen.values())
    assert len(seen) == 30, "every marker was seen in place"


async def test_ttls_expire_when_the_publishing_agent_is_gone(
    agents: list[AgentProcess], clients: list[Client]
) -> None:
    nc_a, nc_b = clients[0], clients[1]
    js_b = nc_b.jetstream(timeout=10)
    await js_b.add_stream(name="T", subjects=["t.>"], allow_msg_ttl=True)
    for i in range(10):
        resp = await nc_a.request(f"t.{i}", b"x", headers={"Nats-TTL": "1s"}, timeout=10)
        assert json.loads(resp.data)["seq"] == i + 1
    agents[0].kill()
    for _ in range(100):
        await asyncio.sleep(0.1)
        if (await js_b.stream_info("T")).state.messages == 0:
            break
    state = (await js_b.stream_info("T")).state
    assert (state.messages, state.first_seq, state.last_seq) == (0, 11, 10)
