"""Lame duck mode (SIGUSR2) as a client sees it: INFO with `ldm` and without the server's own
address, the connection let go after the grace period, the process exiting on its own; against
an agent and nats-server alike, and in a pool of two agents."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest

from support.agentpool import running_agents
from support.agentproc import AgentProcess
from support.servers import KINDS, running_server

# nats-server's shortest lame_duck_duration; one client is let go after the grace period.
CONFIG = 'lame_duck_duration: "30s"\nlame_duck_grace_period: "1s"\n'
SAFETY_NET = 60


class RawClient:
    """A client speaking the protocol by hand, so every INFO it is sent can be read."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def connect(cls, port: int) -> tuple[RawClient, dict[str, Any]]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        info = await client.info()
        writer.write(b'CONNECT {"verbose":false,"protocol":1}\r\nPING\r\n')
        assert await client.line() == b"PONG\r\n"
        return client, info

    async def line(self) -> bytes:
        return await asyncio.wait_for(self.reader.readline(), SAFETY_NET)

    async def info(self) -> dict[str, Any]:
        """The next INFO (PINGs answered meanwhile); {} once the server closed."""
        while True:
            line = await self.line()
            if not line:
                return {}
            if line.startswith(b"PING"):
                self.writer.write(b"PONG\r\n")
            elif line.startswith(b"INFO "):
                info: dict[str, Any] = json.loads(line[5:])
                return info

    async def lame_duck_info(self) -> dict[str, Any]:
        """The INFO that says `ldm` (nats-server may send others first, as its JetStream stops
        for the lame duck)."""
        while info := await self.info():
            if info.get("ldm"):
                return info
        raise AssertionError("closed without an INFO saying ldm")

    async def closed(self) -> None:
        """Until the server ends the connection; INFOs meanwhile must all say ldm."""
        while info := await self.info():
            assert info.get("ldm") is True, info

    def close(self) -> None:
        self.writer.close()


def lame_duck(process: AgentProcess) -> None:
    assert process.process is not None
    process.process.send_signal(signal.SIGUSR2)


async def exited(process: AgentProcess) -> int:
    assert process.process is not None
    return await asyncio.to_thread(process.process.wait, SAFETY_NET)


@pytest.mark.parametrize("kind", KINDS)
async def test_lame_duck_tells_the_client_and_lets_it_go(tmp_path: Path, kind: str) -> None:
    config = tmp_path / "server.conf"
    config.write_text(CONFIG)
    with running_server(kind, tmp_path / "store", "-c", str(config)) as server:
        assert server.process is not None
        client, info = await RawClient.connect(server.port)
        try:
            assert "ldm" not in info
            lame_duck(server.process)
            info = await client.lame_duck_info()
            own = f"127.0.0.1:{server.port}"
            assert own not in (info.get("connect_urls") or [])
            # After the grace period the server ends the connection, then exits.
            await client.closed()
            assert await exited(server.process) == 0
            assert "Entering lame duck mode" in server.log()
        finally:
            client.close()


async def test_a_pool_sends_its_clients_to_the_other_agents(tmp_path: Path) -> None:
    config = tmp_path / "agent.conf"
    config.write_text(CONFIG)
    with running_agents(tmp_path / "store", "-c", str(config)) as (a, b):
        urls = {f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"}
        # Until each agent knows the other (the membership's first reads).
        for _ in range(SAFETY_NET * 10):
            client, info = await RawClient.connect(a.port)
            if set(info.get("connect_urls") or []) == urls:
                break
            client.close()
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the pool never listed both agents: {info}")
        try:
            lame_duck(a)
            info = await client.lame_duck_info()
            assert info["connect_urls"] == [f"127.0.0.1:{b.port}"]
            # The other agent's clients are no longer told of the one leaving.
            for _ in range(SAFETY_NET * 10):
                other, other_info = await RawClient.connect(b.port)
                other.close()
                if other_info.get("connect_urls") == [f"127.0.0.1:{b.port}"]:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(f"the pool still lists the agent leaving: {other_info}")
            await client.closed()
            assert await exited(a) == 0
        finally:
            client.close()
