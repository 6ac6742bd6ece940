"""A KV watch and an Object Store get keep working while one of two agents is killed and
restarted (nats-py, unmodified, given both agents' URLs as a client is given a cluster's).

The client's push consumers live in the shared metadata, so when its agent dies the client
reconnects to the other, subscribes its deliver subjects again, and that agent serves them from
where they were; a claim the dead agent committed but never sent shows up as a gap in consumer
sequences, and the ordered consumer recreates itself from the last message it got, as it does
across a nats-server restart.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import nats
import pytest
from nats.aio.client import Client

from support.agentproc import AgentProcess
from support.polling import until

MIB = 1024 * 1024


@pytest.fixture
async def client(two_agents: list[AgentProcess]) -> AsyncIterator[Client]:
    a, b = two_agents
    nc = await nats.connect(
        servers=[a.url, b.url],
        dont_randomize=True,
        reconnect_time_wait=0.2,
        max_reconnect_attempts=-1,
    )
    yield nc
    await nc.close()


def connected_to(nc: Client, agent: AgentProcess) -> bool:
    current = nc._current_server
    return current is not None and current.uri.port == agent.port


async def test_a_kv_watch_carries_on_while_agents_die_and_come_back(
    two_agents: list[AgentProcess], client: Client
) -> None:
    a, b = two_agents
    js = client.jetstream(timeout=10)
    kv = await js.create_key_value(bucket="CFG", history=5)
    watcher = await kv.watchall()
    assert await watcher.updates(timeout=10) is None
    got: list[tuple[str, bytes]] = []

    async def put_and_see(key: str, value: bytes) -> None:
        for _ in range(100):
            try:
                await kv.put(key, value)
                break
            except (TimeoutError, nats.errors.Error):
                await asyncio.sleep(0.2)
        entry = await watcher.updates(timeout=30)
        got.append((entry.key, entry.value))

    await put_and_see("k", b"1")
    assert connected_to(client, a)
    a.kill()
    # A put in flight when its agent dies is the client's to retry; these wait until it is
    # connected again, so that the watch is what is tested here.
    await until(lambda: client.is_connected and connected_to(client, b), 30)
    await put_and_see("k", b"2")
    await put_and_see("other", b"x")
    a.start()
    b.kill()
    await until(lambda: client.is_connected and connected_to(client, a), 30)
    await put_and_see("k", b"3")
    b.start()
    await put_and_see("k", b"4")
    assert got == [("k", b"1"), ("k", b"2"), ("other", b"x"), ("k", b"3"), ("k", b"4")]
    assert (await kv.get("k")).value == b"4"
    await watcher.stop()


async def test_an_object_get_survives_its_agent_being_killed_midway(
    two_agents: list[AgentProcess], client: Client
) -> None:
    a, b = two_agents
    js = client.jetstream(timeout=20)
    obs = await js.create_object_store("FILES")
    data = os.urandom(24 * MIB)
    await obs.put("big", data)
    assert connected_to(client, a)
    get = asyncio.create_task(obs.get("big"))
    # Kill the agent while it pushes the chunks (the get is under way).
    await asyncio.sleep(0.3)
    assert not get.done(), "the get finished before the agent could be killed"
    a.kill()
    result = await asyncio.wait_for(get, 60)
    # nats-py checks the object's digest itself; the bytes are the same too.
    assert result.data == data
    assert connected_to(client, b)
    a.start()
    assert (await obs.get("big")).data == data
