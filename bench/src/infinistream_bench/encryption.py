"""The cost of encryption at rest: publish and fetch throughput with and without it.

    python -m infinistream_bench.encryption [--messages 50000] [--size 128]

For each configuration (no encryption; `cipher: chachapoly`; `cipher: aes`) one agent on a fresh
embedded store takes `--messages` publishes from nats-py's `publish_async` (its default
in-flight window), is restarted (so the cache is cold and every section is fetched from the
object store and opened), and then serves them all to one pull consumer (`fetch` of 500, no
acks). Each configuration runs `--repeat` times, interleaved with the others (the machine is
shared: load comes and goes), and the median of each column is printed, as a markdown table
row per configuration, for docs/benchmarks/measurements.md. The agent CPU columns are the
agent's own CPU seconds per phase: with 128 B messages the client (nats-py) is the bottleneck,
and the agent's CPU shows the cost of sealing and opening better than throughput does.

A last table times the primitives in this process: sealing and opening a 4 MiB section.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

from nats.js.api import AckPolicy, ConsumerConfig

from infinistream.storage import Encryption, LocalKeys
from infinistream.storage.keys import CIPHERS
from infinistream_bench.natspy import connect
from infinistream_bench.systems import InfiniStream

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


def run_config(
    name: str, extra: tuple[str, ...], messages: int, size: int, work: Path
) -> tuple[float, float, float, float]:
    store = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=work))
    key_args: tuple[str, ...] = ()
    if extra:
        key_file = work / "bench.key"
        key_file.write_text("benchmark key 5e1c9a7b3d2f4e6a8c0b1d3f5a7c9e2b")
        key_args = ("--key-file", str(key_file))

    def agent() -> InfiniStream:
        # A new process (and log pump) each time: a cold cache on the same store.
        return InfiniStream(
            name, name, store.with_suffix(".logs"), store, extra=(*extra, *key_args)
        )

    with agent() as writer:
        cpu0 = writer.cpu_seconds()
        pub = asyncio.run(_publish(writer.port, messages, size))
        pub_cpu = writer.cpu_seconds() - cpu0
    with agent() as reader:
        cpu0 = reader.cpu_seconds()
        fetch = asyncio.run(_fetch(reader.port, messages))
        fetch_cpu = reader.cpu_seconds() - cpu0
    return pub, pub_cpu, fetch, fetch_cpu


def primitives(section_bytes: int = 4 * 1024 * 1024, rounds: int = 20) -> list[str]:
    """MB/s of sealing and opening one section, per cipher, in this process."""
    plain = os.urandom(section_bytes)
    rows = []
    for name in ("chachapoly", "aes"):
        cipher = CIPHERS[name]
        enc = Encryption(LocalKeys.from_texts("bench", cipher=cipher), cipher)
        sealer = enc.sealer()
        start = time.perf_counter()
        for _ in range(rounds):
            stored = sealer.seal(plain)
        sealed = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(rounds):
            enc.open(stored)
        opened = time.perf_counter() - start
        mb = section_bytes * rounds / 1e6
        rows.append(f"| {name} | {mb / sealed:,.0f} MB/s | {mb / opened:,.0f} MB/s |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    names = args.configs.split(",")
    runs: dict[str, list[tuple[float, float, float, float]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="infinistream-bench-enc-") as tmp:
        for _ in range(args.repeat):
            for name in names:
                runs[name].append(
                    run_config(name, CONFIGS[name], args.messages, args.size, Path(tmp))
                )
    print(
        f"{args.messages:,} messages of {args.size} B, one agent, embedded store; "
        f"median of {args.repeat} runs"
    )
    print("| cipher | publish_async | agent CPU | cold fetch (batch 500) | agent CPU |")
    print("|---|---|---|---|---|")
    for name in names:
        pub, pub_cpu, fetch, fetch_cpu = (
            statistics.median(col) for col in zip(*runs[name], strict=True)
        )
        print(f"| {name} | {pub:,.0f} msg/s | {pub_cpu:.2f} s ", end="")
        print(f"| {fetch:,.0f} msg/s | {fetch_cpu:.2f} s |")
    print()
    print("| cipher | seal a 4 MiB section | open it |")
    print("|---|---|---|")
    for row in primitives():
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
