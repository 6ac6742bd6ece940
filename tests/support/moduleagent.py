"""One agent for a whole test module, with every test starting from no streams.

Starting an agent per test would cost more than many tests take. A module opts in with

    agent, no_streams = one_agent_per_module()

which overrides the per-test `agent` fixture of tests/e2e/conftest.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from nats.aio.client import Client

from support.agentproc import AgentProcess, running_agent


def one_agent_per_module() -> tuple[Callable[..., Any], Callable[..., Any]]:
    @pytest.fixture(scope="module")
    def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
        with running_agent(tmp_path_factory.mktemp("store"), "--linger", "20ms", "-m", "0") as proc:
            yield proc

    @pytest.fixture(autouse=True)
    async def no_streams(nc: Client) -> AsyncIterator[None]:
        names = json.loads((await nc.request("$JS.API.STREAM.NAMES", b"", timeout=5)).data)
        for name in names["streams"] or []:
            await nc.request(f"$JS.API.STREAM.DELETE.{name}", b"", timeout=5)
        yield

    return agent, no_streams
