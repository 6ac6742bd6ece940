"""A full disk: the agent's store directory (objects and the SQLite metadata) fills up, then
room is made again.

The store is a small tmpfs mounted for the test (the tests run as root in CI and on the
development machine). Where mounting is not allowed, the same run is made against S3 through
the fault proxy with a storage quota (PUTs beyond it refused with 507): the line printed says
which one ran. While the store is full, publishes are answered with errors and never
acknowledged; once there is room, the service is back; nothing acknowledged is lost.

Each phase lasts until its events have happened (publishes acknowledged, then refused, then
acknowledged again), not a number of seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from fault.jepsen import History, check
from fault.workload import LiveConsumer, Publisher, acked, audit, connect, create_stream, refused
from support.agentproc import AgentProcess
from support.etcdserver import free_port
from support.s3proxy import Fault, S3FaultProxy
from support.s3server import start_s3_server

pytestmark = pytest.mark.fault

PUBLISHERS = 3
TMPFS_SIZE = "24m"
MARGIN = 0.2
# Publishes each phase waits for: acknowledged before the disk fills, refused while it is full,
# acknowledged once there is room again.
ACKS = 100
REFUSALS = 30


@contextlib.contextmanager
def tmpfs(path: Path) -> Iterator[bool]:
    """Mount a small tmpfs at `path`; yields False (mounting nothing) where that is refused."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(path)],
            capture_output=True,
        ).returncode
        == 0
    )
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(path: Path) -> Path:
    """Write a ballast file until the file system has no room left."""
    ballast = path / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for size in (1 << 20, 1 << 12, 1 << 9, 1):
            chunk = b"\0" * size
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return ballast


@contextlib.asynccontextmanager
async def full_store(
    tmp_path: Path,
) -> AsyncIterator[tuple[str, AgentProcess, Callable[[bool], None]]]:
    """(variant, agent, set_full): an agent whose store can be filled up and emptied again."""
    store = tmp_path / "store"
    with tmpfs(store) as mounted:
        port = free_port()
        if mounted:
            agent = AgentProcess(["-p", str(port), "-sd", str(store), "--linger", "20ms"])
            ballast: list[Path] = []

            def set_full(full: bool) -> None:
                if full:
                    ballast.append(fill(store))
                else:
                    ballast.pop().unlink()

            agent.start()
            try:
                yield f"tmpfs of {TMPFS_SIZE}", agent, set_full
            finally:
                agent.kill()
            return
        s3 = start_s3_server()
        bucket = f"full-{uuid.uuid4().hex[:10]}"
        s3.create_bucket(bucket)
        try:
            with S3FaultProxy(s3.endpoint) as proxy:

                def set_quota(full: bool) -> None:
                    proxy.quota = proxy.stored_bytes
                    proxy.fault = Fault.FULL if full else Fault.NONE

                agent = AgentProcess(
                    [
                        "-p",
                        str(port),
                        "-sd",
                        str(store),
                        "--objects",
                        f"s3://{bucket}",
                        "--s3-endpoint",
                        proxy.endpoint,
                        "--s3-timeout",
                        "1s",
                        "--s3-retries",
                        "1",
                        "--linger",
                        "20ms",
                    ],
                    env=s3.env(),
                )
                agent.start()
                try:
                    yield "S3 quota through the fault proxy (mount not permitted)", agent, set_quota
                finally:
                    agent.kill()
        finally:
            s3.stop()


@pytest.mark.timeout(600)
async def test_a_full_disk_refuses_writes_and_loses_nothing(
    tmp_path: Path, fault_report: list[str]
) -> None:
    async with full_store(tmp_path) as (variant, agent, set_full):
        servers = [agent.url]
        nc = await connect(servers)
        await create_stream(nc)
        await nc.close()
        history = History()
        stop = asyncio.Event()
        consumer = LiveConsumer(servers, history)
        tasks = [
            asyncio.create_task(Publisher(i, servers, history, pace=0.01).run(stop))
            for i in range(PUBLISHERS)
        ]
        tasks.append(asyncio.create_task(consumer.run(stop)))
        await acked(history, ACKS, sent_after=0.0, what="before the disk fills")
        full_at = time.monotonic()
        await asyncio.to_thread(set_full, True)
        filled_at = time.monotonic()
        await refused(history, REFUSALS, sent_after=filled_at + MARGIN, what="while full")
        freed_at = time.monotonic()
        await asyncio.to_thread(set_full, False)
        await acked(history, ACKS, sent_after=freed_at, what="once there is room")
        stop.set()
        await asyncio.gather(*tasks)
        await consumer.drain(servers)
        stored = await audit(servers)
        assert agent.process is not None and agent.process.poll() is None, "the agent died"
    verdict = check(f"disk full ({variant})", history, stored)
    verdict.notes["acked-while-full"] = len(
        history.acked_between(filled_at, freed_at, sent_after=filled_at + MARGIN)
    )
    verdict.notes["filling-took-s"] = round(filled_at - full_at, 1)
    back = [s.answered_at - freed_at for s in history.sent.values() if s.seq and s.at >= freed_at]
    verdict.notes["back-after-s"] = round(min(back), 1) if back else None
    fault_report.append(verdict.line())
    print(verdict.line())
    assert verdict.ok, verdict.problems()
    assert verdict.notes["acked-while-full"] == 0
    assert verdict.errors >= REFUSALS and back
