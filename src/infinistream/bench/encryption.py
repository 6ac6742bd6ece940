"""The cost of encryption at rest: publish and fetch throughput with and without it.

    python -m infinistream.bench.encryption [--messages 50000] [--size 128]

For each configuration (no encryption; `cipher: chachapoly`; `cipher: aes`) one agent on a fresh
embedded store takes `--messages` publishes from nats-py's `publish_async` (its default
in-flight window), is restarted (so the cache is cold and every section is fetched from the
object store and opened), and then serves them all to one pull consumer (`fetch` of 500, no
acks). Wall-clock throughput of each phase and the agent's CPU seconds are printed as a
markdown table row per configuration, for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from nats.js.api import AckPolicy, ConsumerConfig

from infinistream.bench.natspy import connect
from infinistream.bench.systems import InfiniStream

CONFIGS: dict[str, tuple[str, ...]] = {
    "none": (),
    "chachapoly": ("--cipher", "chachapoly"),
    "aes": ("--cipher", "aes"),
}


async def _publish(port: int, messages: int, size: int) -> float:
    nc = await connect(port)
    try:
        js = nc.jetstream()
        await js.add_stream(name="BENCH", subjects=["bench.>"])
        payload = b"x" * size
        start = time.perf_counter()
        for i in range(messages):
            await js.publish_async(f"bench.{i % 100}", payload)
        await js.publish_async_completed()
        return messages / (time.perf_counter() - start)
    finally:
        await nc.close()


async def _fetch(port: int, messages: int) -> float:
    nc = await connect(port)
    try:
        js = nc.jetstream()
        config = ConsumerConfig(ack_policy=AckPolicy.NONE, max_ack_pending=-1)
        sub = await js.pull_subscribe("bench.>", durable="reader", config=config)
        got = 0
        start = time.perf_counter()
        while got < messages:
            got += len(await sub.fetch(500, timeout=30))
        return messages / (time.perf_counter() - start)
    finally:
        await nc.close()


def run_config(name: str, extra: tuple[str, ...], messages: int, size: int, work: Path) -> str:
    store = work / name
    key_args: tuple[str, ...] = ()
    if extra:
        key_file = work / "bench.key"
        key_file.write_text("benchmark key 5e1c9a7b3d2f4e6a8c0b1d3f5a7c9e2b")
        key_args = ("--key-file", str(key_file))
    agent = InfiniStream(name, name, work / f"{name}-logs", store, extra=(*extra, *key_args))
    agent.start()
    try:
        cpu0 = agent.cpu_seconds()
        pub = asyncio.run(_publish(agent.port, messages, size))
        pub_cpu = agent.cpu_seconds() - cpu0
        agent.restart()
        cpu0 = agent.cpu_seconds()
        fetch = asyncio.run(_fetch(agent.port, messages))
        fetch_cpu = agent.cpu_seconds() - cpu0
    finally:
        agent.stop()
    return (
        f"| {name} | {pub:,.0f} msg/s | {pub_cpu:.2f} s | {fetch:,.0f} msg/s | {fetch_cpu:.2f} s |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    args = parser.parse_args(argv)
    print(f"{args.messages:,} messages of {args.size} B, one agent, embedded store")
    print("| cipher | publish_async | agent CPU | cold fetch (batch 500) | agent CPU |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="infinistream-bench-enc-") as tmp:
        for name in args.configs.split(","):
            print(run_config(name, CONFIGS[name], args.messages, args.size, Path(tmp)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
