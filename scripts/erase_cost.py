#!/usr/bin/env python3
"""What an erase costs: the request itself, then the erase job and the janitor, with the
erased bytes in L0 objects and then in a compacted object.

Usage: PYTHONPATH=src:tests python scripts/erase_cost.py [MESSAGES]   (default 100000)

One agent on a fresh store under a temporary directory, two streams published in batches (so
flushes hold both), 128-byte payloads. Prints the median latency of fifty MSG.DELETE requests
with `no_erase` and fifty without (erases), then the erase job's and the janitor's summary
lines for ten erased messages still in L0 objects, and for ten more after compaction has moved
everything into compacted objects.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nats

from infinistream.pipeline.compaction.job import compact
from infinistream.pipeline.compaction.plan import CompactSettings
from infinistream.pipeline.erase.job import erase
from infinistream.pipeline.janitor import JanitorConfig, run_janitor
from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.spark import spark_session
from support.agentproc import running_agent

BATCH = 2000


async def _delete_latency(nc: nats.NATS, seqs: range, no_erase: bool) -> float:
    times = []
    for seq in seqs:
        body = {"seq": seq, "no_erase": True} if no_erase else {"seq": seq}
        started = time.perf_counter()
        reply = await nc.request("$JS.API.STREAM.MSG.DELETE.BIG", json.dumps(body).encode(), 10)
        times.append((time.perf_counter() - started) * 1000)
        assert json.loads(reply.data).get("success"), reply.data
    return statistics.median(times)


async def main(messages: int) -> None:
    store = Path(tempfile.mkdtemp()) / "store"
    options = StoreOptions(
        objects=(store / "objects").resolve().as_uri(),
        metadata="sqlite:///" + str((store / "meta.db").resolve()).lstrip("/"),
    )
    spark = spark_session("local[2]", "erase-cost")
    spark.sparkContext.setLogLevel("ERROR")
    with running_agent(store, "--linger", "5ms") as agent:
        nc = await nats.connect(agent.url)
        js = nc.jetstream(timeout=30)
        await js.add_stream(name="BIG", subjects=["big.>"])
        await js.add_stream(name="SIDE", subjects=["side.>"])
        payload = b"x" * 128
        for start in range(0, messages, BATCH):
            await asyncio.gather(
                *(js.publish(f"big.{i % 100}", payload) for i in range(start, start + BATCH)),
                *(js.publish("side.a", payload) for _ in range(20)),
            )
        plain = await _delete_latency(nc, range(10, 60), no_erase=True)
        erased = await _delete_latency(nc, range(60, 110), no_erase=False)
        print(f"MSG.DELETE median of 50: no_erase {plain:.2f} ms, erase {erased:.2f} ms")
        for where in ("L0", "compacted"):
            if where == "compacted":
                summary = await asyncio.to_thread(
                    compact, spark, options, CompactSettings(min_age_ns=0)
                )
                print(f"[{where}] {summary.line()}")
                for seq in range(messages // 2, messages // 2 + 10):
                    await js.delete_msg("BIG", seq)  # nats-py: an erase
            started = time.monotonic()
            report = await asyncio.to_thread(erase, spark, options)
            print(f"[{where}] {report.line()} (wall {time.monotonic() - started:.1f}s)")
            janitor = await asyncio.to_thread(
                run_janitor, spark, options, JanitorConfig(grace=0), lambda _: None
            )
            print(f"[{where}] {janitor.summary()}")
        await nc.close()
    spark.stop()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000))
