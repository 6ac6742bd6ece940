"""`infinistream bench`: run every workload against every system, then report.

Systems run one at a time (nothing idle competes for the cores): the core-NATS sink that
measures the load generator, nats-server with lazy fsync, nats-server with `sync_interval:
always`, one InfiniStream agent on its embedded defaults, one with the S3 PUT budget (for the
cost tables), and `serve --workers 2` (two agents on one port sharing the store).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

from infinistream_bench import (
    cache_workloads,
    cost,
    cost_workloads,
    kv_workloads,
    mirror_workloads,
    natsjs,
)
from infinistream_bench.client_workloads import ROWS as CLIENT_ROWS
from infinistream_bench.client_workloads import ClientBench
from infinistream_bench.control import BenchError
from infinistream_bench.kv_workloads import KvBench
from infinistream_bench.machine import load_average, machine_info
from infinistream_bench.mirror_workloads import MirrorBench
from infinistream_bench.profiles import FULL, QUICK, Profile
from infinistream_bench.systems import (
    InfiniStream,
    NatsServer,
    System,
    nats_server_binary,
    nats_server_version,
)
from infinistream_bench.workers import WorkerPool
from infinistream_bench.workloads import Bench

# `serve --workers N` in the scale-out rows.
SCALE_OUT_WORKERS = 2


def main(args: argparse.Namespace) -> int:
    from infinistream_bench import report

    work = Path(args.work_dir or tempfile.mkdtemp(prefix="infinistream-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    if getattr(args, "tables", False):
        from infinistream_bench import tables

        code = tables.main(args, work)
        if not args.keep and not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
        return code
    if args.scale:
        from infinistream_bench import scale

        code = scale.main(args, work)
        if not args.keep and not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
        return code
    profile = QUICK if args.quick else FULL
    binary = args.nats_server or nats_server_binary()
    if getattr(args, "s3", False):
        from infinistream_bench import s3_latency

        code = s3_latency.main(args, work)
        if not args.keep and not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
        return code
    if getattr(args, "targets", None):
        from infinistream_bench import targets

        code = targets.main(args, work, binary)
        if not args.keep and not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
        return code
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    if getattr(args, "zone_cache", False):
        return _zone_cache_only(profile, work, args, log)
    try:
        results = run(profile, binary, work, args.workers, log, args.node_modules)
    except BenchError as exc:
        print(f"infinistream bench: {exc}\n(logs in {work})", file=sys.stderr)
        return 1
    results["duration_s"] = time.perf_counter() - started
    out = Path(args.out)
    paths = report.write(results, out)
    print(report.render_text(results))
    for path in paths:
        print(f"wrote {path}")
    if not args.keep and not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _zone_cache_only(
    profile: Profile, work: Path, args: argparse.Namespace, log: Callable[[str], None]
) -> int:
    """`infinistream bench --zone-cache`: that workload alone, into its kept section."""
    from infinistream_bench import report

    try:
        with WorkerPool(args.workers) as pool:
            results = cache_workloads.zone_cache(Bench(profile, pool, log), work)
    except BenchError as exc:
        print(f"infinistream bench: {exc}\n(logs in {work})", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / cache_workloads.JSON_NAME).write_text(json.dumps(results, indent=1) + "\n")
    section = cache_workloads.markdown(results)
    report.keep_section(out / report.MD_NAME, cache_workloads.TITLE, section)
    print(cache_workloads.table(results).text())
    print(f"wrote {out / report.MD_NAME} and {out / cache_workloads.JSON_NAME}")
    if not args.keep and not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _workloads(profile: Profile) -> dict[str, Any]:
    """Every workload's entry, results still empty."""
    throughput: list[dict[str, Any]] = [
        {"connections": c, "payload": s, "in_flight": w, "reply": "per_publish", "results": {}}
        for c, s, w in profile.throughput
    ]
    c, s, w = profile.literal_cell
    throughput.append(
        {"connections": c, "payload": s, "in_flight": w, "reply": "literal", "results": {}}
    )
    return {
        "publish_throughput": throughput,
        "publish_latency": [
            {"rate": r, "payload": profile.payload, "results": {}} for r in profile.latency_rates
        ],
        "fetch": {
            "messages": profile.fetch_messages,
            "batch": profile.fetch_batch,
            "payload": profile.payload,
            "results": {},
        },
        "e2e_latency": {"rate": profile.tail_rate, "payload": profile.payload, "results": {}},
        "clients": {
            key: {"label": label, "payload": profile.payload, "results": {}}
            for key, label in CLIENT_ROWS.items()
        },
        # nats-py's Key-Value API: puts, gets of existing keys, a watch's delivery latency.
        "kv": {
            "keys": profile.kv_keys,
            "rows": {
                key: {"label": label, "payload": profile.payload, "results": {}}
                for key, label in kv_workloads.rows(profile).items()
            },
        },
        # A mirror's copy of each message published on its origin, at a steady rate.
        "mirror": {
            "rate": profile.tail_rate,
            "payload": profile.payload,
            "rows": {
                key: {"label": label, "results": {}}
                for key, label in mirror_workloads.rows().items()
            },
        },
        "put_budget": {
            "prices": cost.PRICES_TEXT,
            "put_price_usd": cost.PUT_PRICE,
            "get_price_usd": cost.GET_PRICE,
            "results": {},
        },
        "cost": {},
        # The rows with several connections again, on several agents (the kernel spreads
        # connections, not publishes, over the workers), next to those rows' results.
        "scale_out": {
            "workers": SCALE_OUT_WORKERS,
            "cells": [
                {**{k: v for k, v in cell.items() if k != "results"}, "results": {}}
                for cell in throughput
                if cell["connections"] > 1 and cell["reply"] == "per_publish"
            ],
        },
    }


def run(
    profile: Profile,
    binary: str,
    work: Path,
    workers: int,
    log: Callable[[str], None],
    node_modules: str | None = None,
) -> dict[str, Any]:
    version = nats_server_version(binary)
    js = natsjs.find(node_modules)
    results: dict[str, Any] = {
        "machine": machine_info(work, version),
        "profile": profile.settings(),
        "clients": _client_versions(js, workers),
        "systems": {},
        "workloads": _workloads(profile),
        "problems": {},
    }
    w = results["workloads"]
    if isinstance(js, str):
        log(f"nats.js rows not run: {js}")
        for key in CLIENT_ROWS:
            if key.startswith("nats_js"):
                w["clients"][key]["not_run"] = js
    sink = NatsServer("sink", "core NATS sink", work / "sink", "core", binary)
    lazy = NatsServer("nats_lazy", "nats-server lazy fsync", work / "lazy", "lazy", binary)
    always = NatsServer("nats_always", "nats-server sync always", work / "always", "always", binary)
    agent = InfiniStream("infinistream", "InfiniStream", work / "agent", work / "agent" / "store")
    s3_budget = InfiniStream(
        "infinistream_s3_budget",
        f"InfiniStream, S3 PUT budget ({profile.s3_linger_ms} ms)",
        work / "s3-budget",
        work / "s3-budget" / "store",
        extra=("--linger", f"{profile.s3_linger_ms}ms"),
    )
    workers2 = InfiniStream(
        "infinistream_w2",
        f"InfiniStream --workers {SCALE_OUT_WORKERS}",
        work / "workers",
        work / "workers" / "store",
        workers=SCALE_OUT_WORKERS,
    )
    with WorkerPool(workers) as pool:
        bench = Bench(profile, pool, log)
        clients = ClientBench(bench, js)
        kv = KvBench(bench)
        _describe(results, sink)
        with sink:
            for cell in w["publish_throughput"]:
                r = cell["results"]["sink"] = _throughput(bench, sink, cell, "no_responders")
                log(f"{sink.label}: publish {_cell_text(cell)}: {r['msgs_per_s']:,.0f} msg/s")
        results["problems"][sink.key] = sink.problems()
        for system in (lazy, always, agent):
            _describe(results, system)
            with system:
                _jetstream_workloads(bench, clients, kv, system, w, log)
                if system is agent:
                    _describe_agent(results, agent)
                    w["put_budget"]["results"][agent.key] = cost_workloads.put_budget(bench, agent)
            results["problems"][system.key] = system.problems()
        _describe(results, s3_budget)
        with s3_budget:
            _describe_agent(results, s3_budget)
            budget = cost_workloads.put_budget(bench, s3_budget)
            w["put_budget"]["results"][s3_budget.key] = budget
            # What streams cost is an object-store question: asked of the S3 budget.
            w["cost"] = _cost(bench, s3_budget, results)
        results["problems"][s3_budget.key] = s3_budget.problems()
        _describe(results, workers2)
        with workers2:
            for cell in w["scale_out"]["cells"]:
                r = cell["results"][workers2.key] = _throughput(bench, workers2, cell)
                log(f"{workers2.label}: publish {_cell_text(cell)}: {r['msgs_per_s']:,.0f} msg/s")
        results["problems"][workers2.key] = workers2.problems()
    _scale_out_baselines(w)
    problems = list(bench.problems)
    if isinstance(js, str):
        problems.append(f"nats.js rows not run: {js}")
    results["problems"]["workloads"] = problems
    results["machine"]["load_average_at_end"] = load_average()
    return results


def _client_versions(js: natsjs.NatsJs | str, workers: int) -> dict[str, Any]:
    """The clients of the run: the load generator's processes and event loop, nats-py, nats.js."""
    try:
        loop = f"uvloop {package_version('uvloop')}"
    except PackageNotFoundError:
        loop = "asyncio"
    out: dict[str, Any] = {
        "loadgen_workers": workers,
        "event_loop": loop,
        "nats_py": package_version("nats-py"),
    }
    if isinstance(js, natsjs.NatsJs):
        out.update(nats_js=js.version, node=js.node_version, node_modules=str(js.modules))
    else:
        out.update(nats_js=None, nats_js_not_run=js)
    return out


def _describe(results: dict[str, Any], system: System) -> None:
    entry: dict[str, Any] = {"label": system.label, "version": system.version}
    if isinstance(system, NatsServer):
        entry["config"] = system.config_text
    else:
        entry["processes"] = len(system.processes)
        entry["argv"] = " ".join(["infinistream", *system.processes[0].argv[3:]])
    results["systems"][system.key] = entry


def _describe_agent(results: dict[str, Any], agent: InfiniStream) -> None:
    """The agent's settings as it reports them in /varz."""
    v = agent.varz()[0]["infinistream"]
    results["systems"][agent.key].update(
        {
            "linger_ms": v["linger_ms"],
            "batch_bytes": v["batch_bytes"],
            "objects": v["objects"],
            "metadata": v["metadata"],
        }
    )


def _cell_text(cell: dict[str, Any]) -> str:
    reply = ", one literal reply subject" if cell["reply"] == "literal" else ""
    return f"{cell['connections']} x {cell['payload']} B, {cell['in_flight']:,} in flight{reply}"


def _throughput(
    bench: Bench, system: System, cell: dict[str, Any], expect: Any = "puback"
) -> dict[str, Any]:
    return bench.publish_throughput(
        system, cell["connections"], cell["payload"], cell["in_flight"], cell["reply"], expect
    )


def _jetstream_workloads(
    bench: Bench,
    clients: ClientBench,
    kv: KvBench,
    system: System,
    w: dict[str, Any],
    log: Callable[[str], None],
) -> None:
    label = system.label
    for cell in w["publish_throughput"]:
        r = cell["results"][system.key] = _throughput(bench, system, cell)
        log(
            f"{label}: publish {_cell_text(cell)}: {r['msgs_per_s']:,.0f} msg/s, "
            f"{r['errors']} errors"
        )
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
    for key, result in clients.measure(system).items():
        w["clients"][key]["results"][system.key] = result
    for key, result in kv.measure(system).items():
        w["kv"]["rows"][key]["results"][system.key] = result
    for key, result in MirrorBench(bench).measure(system).items():
        w["mirror"]["rows"][key]["results"][system.key] = result


def _cost(bench: Bench, agent: InfiniStream, results: dict[str, Any]) -> dict[str, Any]:
    p = bench.profile
    linger_ms = float(results["systems"][agent.key]["linger_ms"])
    rows = cost_workloads.stream_spread(bench, agent)
    return {
        "prices": cost.PRICES_TEXT,
        "put_price_usd": cost.PUT_PRICE,
        "list_price_usd": cost.LIST_PRICE,
        "get_price_usd": cost.GET_PRICE,
        "system": agent.key,
        "linger_ms": linger_ms,
        "expected_puts_per_s": cost.expected_puts_per_second(linger_ms / 1000),
        "rate": p.cost_rate,
        "payload": p.cost_payload,
        "results": rows,
    }


def _scale_out_baselines(w: dict[str, Any]) -> None:
    """Each scale-out row gets the one-agent and nats-server results of its throughput row."""
    for cell in w["scale_out"]["cells"]:
        same = next(
            c
            for c in w["publish_throughput"]
            if all(c[k] == cell[k] for k in ("connections", "payload", "in_flight", "reply"))
        )
        cell["results"] = {**same["results"], **cell["results"]}
        cell["results"].pop("sink", None)
