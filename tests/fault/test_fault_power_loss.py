"""Power loss: what the agent wrote and never synced is gone; what it acknowledged is not.

The agent runs under strace, which records its writes to the store (the pack files, the SQLite
database and its WAL) and its syncs. Publishers and a consumer work through it; then it is
killed (kill -9) and the store's files are put back as a power failure would have left them
(`fault.powerloss`: every write no completed sync covered reads as zeros, but for a seeded few
that writeback carried to the disk). A new agent then serves the store, and the next round
begins; three rounds in all.

An acknowledgement waits until its object and its commit are durable (one sync of the pack
with the commit's record after the object, which recovery replays; or the object's sync, then
the commit's): so every acknowledged message must be there, in its place, and no committed
message may refer to bytes that were lost (nothing is reported damaged). Flushes of every
size are among those cut: one publisher's messages are large.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fault.jepsen import History, check
from fault.powerloss import STRACE_ARGS, lose_unsynced, parse
from fault.workload import (
    PAYLOAD_PAD,
    LiveConsumer,
    Publisher,
    audit,
    connect,
    create_stream,
)
from support.agentproc import AgentProcess
from support.etcdserver import free_port

pytestmark = [
    pytest.mark.fault,
    pytest.mark.skipif(shutil.which("strace") is None, reason="strace (scripts/test installs it)"),
]

PUBLISHERS = 3
LARGE_PAD = b"." * 8192
ROUNDS = 3
ROUND_SECONDS = 3.0
AGENT = [sys.executable, "-m", "infinistream", "serve", "-a", "127.0.0.1"]


def varz(agent: AgentProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.http_port}/varz", timeout=10) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


@pytest.mark.timeout(300)
async def test_power_loss_keeps_every_acknowledged_message(
    tmp_path: Path, fault_report: list[str]
) -> None:
    store = (tmp_path / "store").resolve()
    port = free_port()
    args = ["-p", str(port), "-sd", str(store), "--linger", "5ms", "-m", "-1"]
    servers = [f"nats://127.0.0.1:{port}"]
    history = History()
    lost_writes = 0
    rounds_with_loss = 0
    consumer = LiveConsumer(servers, history)
    for n in range(ROUNDS):
        trace = tmp_path / f"trace{n}.txt"
        traced = AgentProcess(args, command=[*STRACE_ARGS, "-o", str(trace), "--", *AGENT])
        traced.start(timeout=60)
        try:
            if n == 0:
                nc = await connect(servers)
                await create_stream(nc)
                await nc.close()
            stop = asyncio.Event()
            # Publishers numbered anew each round: every message id is sent once. The last
            # sends messages of 8 KiB, so that flushes larger than a few pages, whose pages go
            # to the disk before their commit is recorded, are among those the power cuts.
            publishers = [
                Publisher(
                    n * PUBLISHERS + i,
                    servers,
                    history,
                    ack_timeout=4,
                    pad=LARGE_PAD if i == PUBLISHERS - 1 else PAYLOAD_PAD,
                )
                for i in range(PUBLISHERS)
            ]
            tasks = [asyncio.create_task(p.run(stop)) for p in publishers]
            tasks.append(asyncio.create_task(consumer.run(stop)))
            await asyncio.sleep(ROUND_SECONDS)
            # The power goes: the agent (strace's child) dies mid-flight, strace with it.
            _kill_tracee(traced)
            stop.set()
            await asyncio.gather(*tasks)
        finally:
            traced.kill()
        with trace.open() as lines:
            files = parse(lines, durable_state(store))
        assert any("#pack-" in path for path in files), "no pack file was written"
        assert any(
            n > 16 * 1024 for path, h in files.items() if "#pack-" in path for _, _, n in h.writes
        ), "no flush of more than a few pages was written"
        assert all(h.unmodelled == 0 for h in files.values()), "a write strace cannot place"
        lost = lose_unsynced(files, seed=n)
        lost_writes += lost
        rounds_with_loss += lost > 0
    agent = AgentProcess(args, command=AGENT)
    agent.start()
    try:
        await consumer.drain(servers)
        stored = await audit(servers)
        damaged = varz(agent)["infinistream"]["damaged"]
    finally:
        agent.kill()
    verdict = check("power loss (unsynced writes lost)", history, stored)
    verdict.notes["rounds"] = ROUNDS
    verdict.notes["unsynced-writes-lost"] = lost_writes
    verdict.notes["damaged"] = damaged["records"]
    fault_report.append(verdict.line())
    print(verdict.line())
    assert verdict.ok, verdict.problems()
    assert damaged["records"] == 0
    # The run did what it says: messages were acknowledged, and writes were lost.
    assert verdict.acked > 100
    assert rounds_with_loss >= 1


def durable_state(store: Path) -> Callable[[str], bool]:
    """The files a restart reads back: objects, the metadata and its WAL (not the WAL index
    in shared memory, nor the zone cache's disk tier: both are rebuilt)."""
    objects = f"{store}/objects/"
    metadata = (f"{store}/meta.db", f"{store}/meta.db-wal")
    return lambda path: path.startswith(objects) or path in metadata


def _kill_tracee(traced: AgentProcess) -> None:
    """kill -9 of the agent under strace (strace's child), then of strace."""
    assert traced.process is not None
    children = Path(f"/proc/{traced.process.pid}/task/{traced.process.pid}/children")
    for pid in children.read_text().split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    traced.process.wait(30)
