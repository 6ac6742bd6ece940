"""S3 that fails: 500s, 503s, slowness, requests that hang until the client times out, and
dropped connections, through a fault-injecting proxy in front of the S3-compatible server.

While the store refuses writes, publishes are answered with errors and never acknowledged;
once it answers again, the service is back; nothing acknowledged is lost.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fault.jepsen import History, check
from fault.workload import LiveConsumer, Publisher, audit, connect, create_stream
from support.agentproc import running_agent
from support.s3proxy import Fault, S3FaultProxy
from support.s3server import S3Server, start_s3_server

pytestmark = pytest.mark.fault

PUBLISHERS = 3
# (fault, seconds); every fault is followed by a healthy spell in which service must return.
PHASES = [
    (Fault.NONE, 2.0),
    (Fault.UNAVAILABLE, 2.5),
    (Fault.NONE, 2.0),
    (Fault.ERROR, 2.5),
    (Fault.NONE, 2.0),
    (Fault.SLOW, 2.5),
    (Fault.NONE, 2.0),
    (Fault.HANG, 3.0),
    (Fault.NONE, 2.5),
    (Fault.DROP, 2.5),
    (Fault.NONE, 2.5),
]
REFUSING = (Fault.UNAVAILABLE, Fault.ERROR, Fault.HANG, Fault.DROP)
# A publish sent this long after a fault began has its PUT made during the fault.
MARGIN = 0.1
# Service is back when some publish sent after the fault ended is acked within this.
BACK_WITHIN = 2.0


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = start_s3_server()
    yield server
    server.stop()


@pytest.mark.timeout(240)
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
        for kind, seconds in PHASES:
            proxy.fault = kind
            start = time.monotonic()
            await asyncio.sleep(seconds)
            spans.append((kind, start, time.monotonic()))
        proxy.fault = Fault.NONE
        stop.set()
        await asyncio.gather(*tasks)
        await consumer.drain(servers)
        stored = await audit(servers)
    verdict = check("S3 faults (500, 503, slow, hang, drop)", history, stored)
    for kind, start, end in spans:
        if kind in REFUSING:
            acked = history.acked_between(start, end, sent_after=start + MARGIN)
            verdict.notes[f"acked-during-{kind.value}"] = len(acked)
            back = [
                k
                for k, s in history.sent.items()
                if s.seq and s.at >= end and s.answered_at < end + BACK_WITHIN
            ]
            verdict.notes[f"back-after-{kind.value}"] = bool(back)
        elif kind is Fault.SLOW:
            verdict.notes["acked-while-slow"] = len(
                [k for k, s in history.sent.items() if s.seq and start <= s.answered_at < end]
            )
    fault_report.append(verdict.line())
    print(verdict.line())
    assert verdict.ok, verdict.problems()
    for kind in REFUSING:
        assert verdict.notes[f"acked-during-{kind.value}"] == 0, kind
        assert verdict.notes[f"back-after-{kind.value}"], kind
    assert verdict.notes["acked-while-slow"] > 0
    assert verdict.errors > 0 and verdict.acked > 200
