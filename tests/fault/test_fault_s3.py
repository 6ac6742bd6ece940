"""S3 that fails: 500s, 503s, slowness, requests that hang until the client times out, and
dropped connections, through a fault-injecting proxy in front of the S3-compatible server.

While the store refuses writes, publishes are answered with errors and never acknowledged;
once it answers again, the service is back; nothing acknowledged is lost.

Each phase lasts until its events have happened, not a number of seconds: a fault that
refuses writes until publishes sent during it are refused, a slow store until publishes are
acknowledged through it, a healthy spell until publishes sent after the fault are acknowledged.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fault.jepsen import History, check
from fault.workload import LiveConsumer, Publisher, acked, audit, connect, create_stream, refused
from support.agentproc import running_agent
from support.s3proxy import Fault, S3FaultProxy
from support.s3server import S3Server, start_s3_server

pytestmark = pytest.mark.fault

PUBLISHERS = 3
# Every fault is followed by a healthy spell in which service must return.
FAULTS = [Fault.UNAVAILABLE, Fault.ERROR, Fault.SLOW, Fault.HANG, Fault.DROP]
REFUSING = (Fault.UNAVAILABLE, Fault.ERROR, Fault.HANG, Fault.DROP)
# A publish sent this long after a fault began has its PUT made during the fault.
MARGIN = 0.1
# What each phase waits for: publishes acknowledged in a healthy spell (and through a slow
# store), publishes refused during a refusing fault.
ACKS = 50
REFUSALS = 10


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = start_s3_server()
    yield server
    server.stop()


@pytest.mark.timeout(600)
async def test_s3_faults_refuse_writes_and_lose_nothing(
    s3: S3Server, tmp_path: Path, fault_report: list[str]
) -> None:
    bucket = f"fault-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(bucket)
    with (
        S3FaultProxy(s3.endpoint, delay=0.5) as proxy,
        running_agent(
            tmp_path / "store",
            "--objects",
            f"s3://{bucket}",
            "--s3-endpoint",
            proxy.endpoint,
            # A request may take 1 s and is tried twice: a publish learns of a dead store in a few
            # seconds, not in obstore's default 3 minutes.
            "--s3-timeout",
            "1s",
            "--s3-retries",
            "1",
            "--linger",
            "20ms",
            env=s3.env(),
        ) as agent,
    ):
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
        spans: list[tuple[Fault, float, float]] = []
        healthy = time.monotonic()
        await acked(history, ACKS, sent_after=healthy, what="before the faults")
        for kind in FAULTS:
            proxy.fault = kind
            start = time.monotonic()
            if kind in REFUSING:
                await refused(history, REFUSALS, sent_after=start + MARGIN, what=kind.value)
            else:
                await acked(history, ACKS, sent_after=start + MARGIN, what=kind.value)
            proxy.fault = Fault.NONE
            end = time.monotonic()
            spans.append((kind, start, end))
            await acked(history, ACKS, sent_after=end, what=f"after {kind.value}")
        proxy.fault = Fault.NONE
        stop.set()
        await asyncio.gather(*tasks)
        await consumer.drain(servers)
        stored = await audit(servers)
    verdict = check("S3 faults (500, 503, slow, hang, drop)", history, stored)
    for kind, start, end in spans:
        if kind in REFUSING:
            acked_during = history.acked_between(start, end, sent_after=start + MARGIN)
            verdict.notes[f"acked-during-{kind.value}"] = len(acked_during)
        back = [s.answered_at - end for s in history.sent.values() if s.seq and s.at >= end]
        verdict.notes[f"back-after-{kind.value}-s"] = round(min(back), 1) if back else None
    fault_report.append(verdict.line())
    print(verdict.line())
    assert verdict.ok, verdict.problems()
    for kind in REFUSING:
        assert verdict.notes[f"acked-during-{kind.value}"] == 0, kind
    assert verdict.errors >= len(REFUSING) * REFUSALS
