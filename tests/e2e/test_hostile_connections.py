"""Connections beyond what the server takes are refused with nats-server's words, and idle
connections never take the descriptors the agent needs to store what is published.

`max_connections` runs against an agent and nats-server with one config file. The open-file
test is the agent's own: it once accepted connections until object storage writes failed
with "Too many open files" (438 of 516 publishes failed with 400 idle connections and a limit
of 256); it now keeps a reserve of descriptors and refuses connections beyond it.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import nats
import pytest

from support.agentproc import AgentProcess
from support.polling import until
from support.rawnats import CONNECT_PLAIN, RawClient
from support.servers import KINDS, Server, free_port, running_server

REFUSAL = b"-ERR 'maximum connections exceeded'\r\n"
SAFETY_NET = 30.0


@pytest.mark.parametrize("kind", KINDS)
async def test_max_connections_refuses_the_one_too_many(kind: str, tmp_path: Path) -> None:
    conf = tmp_path / "limits.conf"
    conf.write_text("max_connections: 2\n")
    with running_server(kind, tmp_path / "store", "-c", str(conf)) as server:
        first, second = await RawClient.open(server.port), await RawClient.open(server.port)
        for client in (first, second):
            client.send(CONNECT_PLAIN)
            assert await client.ping() == b""
        third = await RawClient.open(server.port)  # INFO first, as nats-server sends it
        assert await third.read_until_closed(timeout=SAFETY_NET) == REFUSAL
        assert await first.ping() == b""  # the others go on
        await first.close()
        await asyncio.sleep(0)
        # A place is free again: taken once the server has seen the close.
        for _ in range(100):
            fourth = await RawClient.open(server.port)
            fourth.send(CONNECT_PLAIN + b"PING\r\n")
            got = await fourth.read_until(b"\r\n", timeout=SAFETY_NET)
            if got == b"PONG\r\n":
                break
            assert got == REFUSAL
        else:
            pytest.fail("no place after a connection closed")
        await fourth.close()
        await second.close()
        # The log reaches the test through a reader of the server's output: wait for it.
        await until(
            lambda: "maximum connections exceeded" in server.log(), SAFETY_NET, "the refusal logged"
        )


def test_max_connections_zero_in_the_file_refuses_all(tmp_path: Path) -> None:
    async def check(server: Server) -> None:
        client = await RawClient.open(server.port)
        assert await client.read_until_closed(timeout=SAFETY_NET) == REFUSAL

    for kind in KINDS:
        conf = tmp_path / f"{kind}.conf"
        conf.write_text("max_connections: 0\n")
        with running_server(kind, tmp_path / kind, "-c", str(conf)) as server:
            asyncio.run(check(server))


IDLE = 400
PUBLISHES = 516


async def test_idle_connections_leave_files_for_object_storage(tmp_path: Path) -> None:
    port = free_port()
    agent = AgentProcess(
        ["-p", str(port), "-sd", str(tmp_path / "store"), "--linger", "1ms"],
        command=[
            "prlimit",
            "--nofile=256:256",
            "--",
            sys.executable,
            "-m",
            "infinistream",
            "serve",
            "-a",
            "127.0.0.1",
        ],
    ).start()
    idle: list[RawClient] = []
    try:
        nc = await nats.connect(agent.url)
        js = nc.jetstream(timeout=SAFETY_NET)
        await js.add_stream(name="F", subjects=["f.>"])
        refused = silent = 0
        for _ in range(IDLE):
            try:
                client = await RawClient.open(port)
                client.send(CONNECT_PLAIN + b"PING\r\n")
                got = await client.read_until(b"\r\n", timeout=SAFETY_NET)
            except (AssertionError, ConnectionError):
                silent += 1  # closed without a word
                continue
            if got == REFUSAL:
                refused += 1
                await client.close()
            else:
                assert got == b"PONG\r\n"
                idle.append(client)
        acks = await asyncio.gather(
            *(js.publish(f"f.{n % 7}", b"x" * 512) for n in range(PUBLISHES)),
            return_exceptions=True,
        )
        failed = [a for a in acks if isinstance(a, BaseException)]
        print(
            f"{len(idle)} idle connections kept, {refused} refused, {silent} closed silently; "
            f"{len(failed)} of {PUBLISHES} publishes failed: {set(map(str, failed))}"
        )
        assert failed == []
        assert silent == 0
        assert refused > 0 and len(idle) + refused == IDLE
        assert (await js.stream_info("F")).state.messages == PUBLISHES
        await nc.close()
    finally:
        for client in idle:
            await client.close()
        agent.kill()
