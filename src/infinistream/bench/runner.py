"""`infinistream bench`: run every workload against every system, then report.

Systems run one at a time (nothing idle competes for the cores): the core-NATS sink that
measures the load generator, nats-server with lazy fsync, nats-server with `sync_interval:
always`, one InfiniStream agent, and two agents sharing one store.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infinistream.bench import cost
from infinistream.bench.control import BenchError
from infinistream.bench.machine import load_average, machine_info
from infinistream.bench.systems import (
    InfiniStream,
    NatsServer,
    System,
    nats_server_binary,
    nats_server_version,
)
from infinistream.bench.workers import WorkerPool
from infinistream.bench.workloads import Bench, Profile

THROUGHPUT_CELLS = ((1, 128), (8, 128), (1, 4096), (8, 4096))

FULL = Profile(
    name="full",
    cells=THROUGHPUT_CELLS,
    warmup=1.0,
    duration=5.0,
    window_nats=2048,
    window_agent=65536,
    latency_rates=(1000, 10000),
    latency_warmup=1.0,
    latency_duration=10.0,
    fetch_messages=100_000,
    fetch_batch=500,
    tail_rate=200,
    tail_warmup=1.0,
    tail_duration=10.0,
    cost_streams=(1, 100, 1000),
    cost_rate=2000,
    cost_duration=8.0,
    cost_payload=1024,
    cost_read_streams=50,
    scale_out_cell=(8, 128),
)

QUICK = Profile(
    name="quick",
    cells=THROUGHPUT_CELLS,
    warmup=0.15,
    duration=0.4,
    window_nats=256,
    window_agent=8192,
    latency_rates=(1000, 10000),
    latency_warmup=0.05,
    latency_duration=0.15,
    fetch_messages=2000,
    fetch_batch=500,
    tail_rate=100,
    tail_warmup=0.05,
    tail_duration=0.25,
    cost_streams=(1, 10, 100),
    cost_rate=1000,
    cost_duration=0.5,
    cost_payload=1024,
    cost_read_streams=5,
    scale_out_cell=(8, 128),
)

JETSTREAM_SYSTEMS = ("nats_lazy", "nats_always", "infinistream")


def main(args: argparse.Namespace) -> int:
    from infinistream.bench import report, table

    profile = QUICK if args.quick else FULL
    binary = args.nats_server or nats_server_binary()
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="infinistream-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    try:
        results = run(profile, binary, work, args.workers, log)
    except BenchError as exc:
        print(f"infinistream bench: {exc}\n(logs in {work})", file=sys.stderr)
        return 1
    results["duration_s"] = time.perf_counter() - started
    out = Path(args.out)
    paths = report.write(results, out)
    print(table.render_text(results))
    for path in paths:
        print(f"wrote {path}")
    if not args.keep and not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def run(
    profile: Profile, binary: str, work: Path, workers: int, log: Callable[[str], None]
) -> dict[str, Any]:
    version = nats_server_version(binary)
    results: dict[str, Any] = {
        "machine": machine_info(work, version),
        "profile": profile.settings(),
        "systems": {},
        "workloads": {
            "publish_throughput": [
                {"connections": c, "payload": s, "results": {}} for c, s in profile.cells
            ],
            "publish_latency": [
                {"rate": r, "payload": profile.payload, "results": {}}
                for r in profile.latency_rates
            ],
            "fetch": {
                "messages": profile.fetch_messages,
                "batch": profile.fetch_batch,
                "payload": profile.payload,
                "results": {},
            },
            "e2e_latency": {"rate": profile.tail_rate, "payload": profile.payload, "results": {}},
            "cost": {},
            "scale_out": {},
        },
        "problems": {},
    }
    w = results["workloads"]
    sink = NatsServer("sink", "core NATS sink", work / "sink", "core", binary)
    lazy = NatsServer("nats_lazy", "nats-server lazy fsync", work / "lazy", "lazy", binary)
    always = NatsServer("nats_always", "nats-server sync always", work / "always", "always", binary)
    agent = InfiniStream("infinistream", "InfiniStream", work / "agent", work / "agent" / "store")
    pair = InfiniStream(
        "infinistream_x2", "InfiniStream x2", work / "pair", work / "pair" / "store", count=2
    )
    with WorkerPool(workers) as pool:
        bench = Bench(profile, pool, log)
        _describe(results, sink)
        with sink:
            for cell in w["publish_throughput"]:
                c, s = cell["connections"], cell["payload"]
                r = cell["results"]["sink"] = bench.publish_throughput(sink, c, s, "no_responders")
                log(f"{sink.label}: publish {c} x {s} B: {r['msgs_per_s']:,.0f} msg/s")
        results["problems"][sink.key] = sink.problems()
        for system in (lazy, always, agent):
            _describe(results, system)
            with system:
                _jetstream_workloads(bench, system, w, log)
                if system is agent:
                    w["cost"] = _cost(bench, agent, results, log)
            results["problems"][system.key] = system.problems()
        _describe(results, pair)
        with pair:
            c, s = profile.scale_out_cell
            r = bench.publish_throughput(pair, c, s)
            log(f"{pair.label}: publish {c} x {s} B: {r['msgs_per_s']:,.0f} msg/s")
        results["problems"][pair.key] = pair.problems()
    w["scale_out"] = _scale_out(w, profile.scale_out_cell, r)
    results["problems"]["workloads"] = bench.problems
    results["machine"]["load_average_at_end"] = load_average()
    return results


def _describe(results: dict[str, Any], system: System) -> None:
    entry: dict[str, Any] = {"label": system.label, "version": system.version}
    if isinstance(system, NatsServer):
        entry["config"] = system.config_text
    else:
        entry["processes"] = len(system.processes)
    results["systems"][system.key] = entry


def _jetstream_workloads(
    bench: Bench, system: System, w: dict[str, Any], log: Callable[[str], None]
) -> None:
    label = system.label
    for cell in w["publish_throughput"]:
        c, s = cell["connections"], cell["payload"]
        r = cell["results"][system.key] = bench.publish_throughput(system, c, s)
        log(f"{label}: publish {c} x {s} B: {r['msgs_per_s']:,.0f} msg/s, {r['errors']} errors")
    for entry in w["publish_latency"]:
        r = entry["results"][system.key] = bench.publish_latency(system, entry["rate"])
        log(
            f"{label}: ack latency at {entry['rate']}/s: p50 {r['p50_ms']:.2f} ms, "
            f"p99 {r['p99_ms']:.2f} ms"
        )
    r = w["fetch"]["results"][system.key] = bench.fetch(system)
    log(f"{label}: fetch and ack: {r['msgs_per_s']:,.0f} msg/s")
    r = w["e2e_latency"]["results"][system.key] = bench.tail(system)
    log(f"{label}: end to end: p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms")


def _cost(
    bench: Bench, agent: InfiniStream, results: dict[str, Any], log: Callable[[str], None]
) -> dict[str, Any]:
    v = agent.varz()[0]["infinistream"]
    linger = float(v["linger_ms"]) / 1000
    results["systems"][agent.key].update(
        {
            "linger_ms": v["linger_ms"],
            "batch_bytes": v["batch_bytes"],
            "objects": v["objects"],
            "metadata": v["metadata"],
        }
    )
    rows = bench.cost(agent)
    for row in rows:
        log(
            f"cost, {row['streams']} streams: {row['per_s']['puts']:.1f} PUT/s, "
            f"{row['gets_per_mb_read']:.1f} GET per MB read"
        )
    return {
        "prices": cost.PRICES_TEXT,
        "put_price_usd": cost.PUT_PRICE,
        "list_price_usd": cost.LIST_PRICE,
        "get_price_usd": cost.GET_PRICE,
        "linger_ms": linger * 1000,
        "expected_puts_per_s": cost.expected_puts_per_second(linger),
        "rate": bench.profile.cost_rate,
        "payload": bench.profile.cost_payload,
        "results": rows,
    }


def _scale_out(
    w: dict[str, Any], cell: tuple[int, int], pair_result: dict[str, Any]
) -> dict[str, Any]:
    """The scale-out cell: one agent and nats-server from the throughput runs, plus two agents."""
    connections, payload = cell
    same = next(
        c
        for c in w["publish_throughput"]
        if (c["connections"], c["payload"]) == (connections, payload)
    )
    results = {key: same["results"][key] for key in JETSTREAM_SYSTEMS}
    results["infinistream_x2"] = pair_result
    return {"connections": connections, "payload": payload, "results": results}
