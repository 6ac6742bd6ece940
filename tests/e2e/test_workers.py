"""`serve --workers N`: several agent processes on one port, sharing the store."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import nats

from support.agentproc import running_agent, wait_for


async def _server_ids(port: int, want: int, timeout: float = 30.0) -> set[str]:
    """The agents that connections to `port` reach, connecting until `want` of them have
    answered (each worker prints that it is ready on its own, so the second may be a moment
    behind the first)."""
    ids: set[str] = set()
    deadline = asyncio.get_running_loop().time() + timeout
    while len(ids) < want and asyncio.get_running_loop().time() < deadline:
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        ids.add(nc._server_info["server_id"])
        await nc.close()
    return ids


def _worker_pids(parent: int) -> list[int]:
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    return [int(pid) for pid in children]


async def test_workers_share_the_port_and_the_store(tmp_path: Path) -> None:
    with running_agent(tmp_path / "store", "--workers", "2") as agent:
        # The kernel spreads connections over both workers.
        assert len(await _server_ids(agent.port, 2)) == 2
        published = 0
        for _ in range(10):
            nc = await nats.connect(agent.url)
            js = nc.jetstream()
            if not published:
                await js.add_stream(name="W", subjects=["w.>"])
            for _ in range(5):
                await js.publish("w.x", b"m")
                published += 1
            await nc.close()
        nc = await nats.connect(agent.url)
        info = await nc.jetstream().stream_info("W")
        await nc.close()
        assert (info.state.messages, info.state.last_seq) == (published, published)


async def test_a_killed_worker_is_started_again_and_loses_nothing_acked(tmp_path: Path) -> None:
    with running_agent(tmp_path / "store", "--workers", "2") as agent:
        assert agent.process is not None
        nc = await nats.connect(agent.url)
        js = nc.jetstream()
        await js.add_stream(name="K", subjects=["k.>"])
        acked = [(await js.publish("k.x", str(i).encode())).seq for i in range(20)]
        await nc.close()
        first = _worker_pids(agent.process.pid)
        assert len(first) == 2
        os.kill(first[0], signal.SIGKILL)
        wait_for(
            lambda: (
                len(_worker_pids(agent.process.pid)) == 2  # type: ignore[union-attr]
                and first[0] not in _worker_pids(agent.process.pid)
            ),  # type: ignore[union-attr]
            timeout=30,
        )
        await asyncio.sleep(1)
        assert len(await _server_ids(agent.port, 2)) == 2
        nc = await nats.connect(agent.url)
        info = await nc.jetstream().stream_info("K")
        await nc.close()
        assert info.state.messages == len(acked) == info.state.last_seq


def test_stopping_the_parent_stops_every_worker(tmp_path: Path) -> None:
    with running_agent(tmp_path / "store", "--workers", "2") as agent:
        assert agent.process is not None
        workers = _worker_pids(agent.process.pid)
        assert agent.stop() == 0
        for pid in workers:
            wait_for(lambda pid=pid: not Path(f"/proc/{pid}").exists(), timeout=30)
