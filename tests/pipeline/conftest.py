"""Fixtures for the pipeline tests: one local Spark for the session, real agents, real stores."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.spark import spark_session
from support.agentproc import AgentProcess, running_agent
from support.sparkjvm import quick_jvm


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    # Starting a JVM costs seconds: one Spark serves every pipeline test, and its driver starts
    # with the JVM settings of short test jobs (support/sparkjvm.py).
    with quick_jvm():
        session = spark_session("local[2]", "infinistream-tests")
    yield session
    session.stop()


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def options(store_dir: Path) -> StoreOptions:
    """The stores of the agent started on `store_dir`, as a job reaches them."""
    return StoreOptions(
        objects=(store_dir / "objects").resolve().as_uri(),
        metadata="sqlite:///" + str((store_dir / "meta.db").resolve()).lstrip("/"),
    )


@pytest.fixture
def agent(store_dir: Path) -> Iterator[AgentProcess]:
    with running_agent(store_dir, "--linger", "20ms") as proc:
        yield proc


@pytest.fixture
async def nc(agent: AgentProcess) -> AsyncIterator[Client]:
    client = await nats.connect(agent.url)
    yield client
    await client.close()
