"""The mirror lag row: how long after a publish on a stream its copy is stored on a mirror of
it, on every JetStream system.

One nats-py connection publishes on the origin at a steady rate (each message stamped with
its send time in a header, which the mirror keeps) and an ordered push consumer on the mirror
receives each copy: publish on the origin -> delivered from the mirror, so the figure is the
mirror's copy plus one delivery, measured on one clock. Messages sent during the warm-up are
not counted; every published message must be seen, or the row says how many were not.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import nats
from nats.aio.msg import Msg
from nats.js.api import StreamSource

from infinistream_bench.systems import System
from infinistream_bench.workloads import Bench, latency_summary

ORIGIN, MIRROR = "BENCH_MIRROR_ORIGIN", "BENCH_MIRROR"
SENT = "Bench-Sent-Ns"
# How long the last copies may take to arrive after the last publish.
SETTLE_SECONDS = 30.0


def rows() -> dict[str, str]:
    return {"mirror_lag": "publish on the origin -> copy delivered from a mirror (nats-py)"}


async def _measure(
    port: int, rate: float, warmup: float, duration: float, payload: int
) -> dict[str, Any]:
    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name=ORIGIN, subjects=["bench.mirror"])
        await js.add_stream(name=MIRROR, mirror=StreamSource(name=ORIGIN))
        latencies: list[float] = []
        seen = 0
        done = asyncio.Event()
        total = int(rate * (warmup + duration))
        counted_from = int(rate * warmup)

        async def received(msg: Msg) -> None:
            nonlocal seen
            now = time.perf_counter_ns()
            seen += 1
            sent = int((msg.headers or {}).get(SENT, "0"))
            if msg.metadata.sequence.stream > counted_from and sent:
                latencies.append((now - sent) / 1e9)
            if seen >= total:
                done.set()

        sub = await js.subscribe("", stream=MIRROR, ordered_consumer=True, cb=received)
        body = b"x" * payload
        start = time.perf_counter()
        for i in range(total):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await js.publish("bench.mirror", body, headers={SENT: str(time.perf_counter_ns())})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), SETTLE_SECONDS)
        await sub.unsubscribe()
        await js.delete_stream(MIRROR)
        await js.delete_stream(ORIGIN)
        return {**latency_summary(latencies), "published": total, "seen": seen, "rate": rate}
    finally:
        await nc.close()


class MirrorBench:
    def __init__(self, bench: Bench) -> None:
        self.bench = bench

    def measure(self, system: System) -> dict[str, dict[str, Any]]:
        b, p = self.bench, self.bench.profile
        out = asyncio.run(
            _measure(system.port, p.tail_rate, p.kv_watch_warmup, p.kv_watch_duration, p.payload)
        )
        if out["seen"] < out["published"]:
            b.note(system, "mirror_lag", [f"{out['seen']} of {out['published']} copies seen"])
        b.log(f"{system.label}: mirror_lag: p50 {out['p50_ms']:.2f} ms, p99 {out['p99_ms']:.2f} ms")
        return {"mirror_lag": out}
