"""Fixtures for end-to-end tests: a real agent subprocess (or two on one store) and real nats-py
clients; `server` runs a test once against an agent and once against nats-server
(tests/support/servers.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from support.agentpool import connected, running_agents
from support.agentproc import AgentProcess, running_agent
from support.servers import KINDS, Server, running_server


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def agent(store_dir: Path) -> Iterator[AgentProcess]:
    # A short linger keeps the tests quick; batching behaves the same.
    with running_agent(store_dir, "--linger", "20ms", "-m", "0") as proc:
        yield proc


@pytest.fixture
async def nc(agent: AgentProcess) -> AsyncIterator[Client]:
    client = await nats.connect(agent.url)
    yield client
    await client.close()


@pytest.fixture
def js(nc: Client) -> JetStreamContext:
    return nc.jetstream(timeout=10)


@pytest.fixture(params=KINDS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    """An agent, then nats-server: a test that takes this runs once against each."""
    with running_server(request.param, tmp_path / request.param) as srv:
        yield srv


@pytest.fixture
async def server_nc(server: Server) -> AsyncIterator[Client]:
    client = await nats.connect(server.url)
    yield client
    await client.close()


@pytest.fixture
def two_agents(store_dir: Path) -> Iterator[list[AgentProcess]]:
    """Two agents on one store (tests/support/agentpool.py): any agent serves any stream."""
    with running_agents(store_dir) as agents:
        yield agents


@pytest.fixture
async def two_clients(two_agents: list[AgentProcess]) -> AsyncIterator[list[Client]]:
    """A nats-py client on each of `two_agents`, which does not reconnect when its agent dies."""
    async with connected(*two_agents, allow_reconnect=False) as clients:
        yield clients
