"""`infinistream bench --s3`: latency with objects on an S3-compatible server, by PUT budget.

One agent at a time keeps its objects in a bucket of a local S3-compatible server (moto's
server mode, the one the tests start) and its metadata in SQLite, with its PUT budget
(`--linger`) at the S3 default (250 ms) and at lower ones. For each: publish -> ack latency of
one connection publishing open loop at a low and a high rate, the PUTs a second that cost (and
their monthly bill at S3 prices), and publish -> delivery latency to a pull request waiting on
the stream. Next to them, the figures WarpStream publishes for its agents on S3 Standard, whose
batch timeout plays the part of the budget.

moto answers a PUT from the loopback in milliseconds, S3 Standard in tens to a few hundred: the
mean PUT time measured here is reported with each row, so that S3's can be put in its place.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

from infinistream_bench import cost_workloads, report
from infinistream_bench.control import BenchError
from infinistream_bench.machine import load_average, machine_info
from infinistream_bench.profiles import FULL, QUICK
from infinistream_bench.systems import InfiniStream, nats_server_binary, nats_server_version
from infinistream_bench.workers import WorkerPool
from infinistream_bench.workloads import Bench

JSON_NAME = "s3-latency.json"
TITLE = "S3 mode: latency and PUTs by PUT budget, on an S3-compatible server"
BUDGETS_MS = (250, 100, 50, 20)
RATES = (100, 1000)
BUCKET = "bench"
# moto does not check signatures; fixed credentials keep clients from looking for real ones.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_REGION": "us-east-1",
    "AWS_ALLOW_HTTP": "true",
}
# WarpStream's documented figures on S3 Standard with its default 250 ms batch timeout
# ("Low Latency Clusters", docs.warpstream.com), and with S3 Express One Zone and 50 ms.
PEERS = (
    {
        "system": "WarpStream, S3 Standard, 250 ms batch timeout (default), 25 ms linger",
        "produce_p50_ms": 250,
        "produce_p99_ms": 500,
        "e2e_p50_ms": 500,
        "e2e_p99_ms": 900,
    },
    {
        "system": "WarpStream, S3 Express One Zone, 50 ms batch timeout, 10 ms linger",
        "produce_p50_ms": 80,
        "produce_p99_ms": 150,
        "e2e_p50_ms": 200,
        "e2e_p99_ms": 400,
    },
)
_PUT_SUM = re.compile(rb"^infinistream_object_put_seconds_sum (\S+)$", re.M)
_PUT_COUNT = re.compile(rb"^infinistream_object_put_seconds_count (\S+)$", re.M)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--s3",
        action="store_true",
        help="only the S3 mode's latency by PUT budget, on a local S3-compatible server (moto); "
        "updates its section of benchmarks.md and writes s3-latency.json",
    )


def main(args: argparse.Namespace, work: Path) -> int:
    profile = replace(QUICK if args.quick else FULL, budget_rates=RATES)
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", flush=True)

    binary = args.nats_server or nats_server_binary()
    results: dict[str, Any] = {
        "machine": machine_info(work, nats_server_version(binary)),
        "rates": list(RATES),
        "peers": list(PEERS),
        "budgets": [],
    }
    try:
        endpoint, moto = _start_moto(work / "moto.log")
    except BenchError as exc:
        print(f"infinistream bench --s3: {exc}", file=sys.stderr)
        return 1
    try:
        with WorkerPool(args.workers) as pool:
            bench = Bench(profile, pool, log)
            for budget in BUDGETS_MS:
                results["budgets"].append(_measure(bench, work, endpoint, budget))
    except BenchError as exc:
        print(f"infinistream bench --s3: {exc}\n(logs in {work})", file=sys.stderr)
        return 1
    finally:
        moto.terminate()
        moto.wait(10)
    results["machine"]["load_average_at_end"] = load_average()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / JSON_NAME).write_text(json.dumps(results, indent=1) + "\n")
    section = markdown(results)
    report.keep_section(out / report.MD_NAME, TITLE, section)
    print(section)
    print(f"wrote {out / report.MD_NAME} and {out / JSON_NAME}")
    return 0


def _measure(bench: Bench, work: Path, endpoint: str, budget: int) -> dict[str, Any]:
    store = work / f"s3-{budget}" / "store"
    agent = InfiniStream(
        f"s3_{budget}",
        f"InfiniStream on S3, PUT budget {budget} ms",
        work / f"s3-{budget}",
        store,
        extra=(
            "--objects",
            f"s3://{BUCKET}/budget-{budget}",
            "--s3-endpoint",
            endpoint,
            "--linger",
            f"{budget}ms",
        ),
        env=CREDENTIALS,
    )
    with agent:
        before = _put_seconds(agent)
        publish = cost_workloads.put_budget(bench, agent)
        after = _put_seconds(agent)
        e2e = bench.tail(agent)
    puts = after[1] - before[1]
    mean_put_ms = (after[0] - before[0]) / puts * 1000 if puts else 0.0
    bench.log(
        f"budget {budget} ms: e2e p50 {e2e['p50_ms']:.1f} ms p99 {e2e['p99_ms']:.1f} ms, "
        f"mean PUT {mean_put_ms:.1f} ms"
    )
    return {"linger_ms": budget, "publish": publish, "e2e": e2e, "mean_put_ms": mean_put_ms}


def _put_seconds(agent: InfiniStream) -> tuple[float, float]:
    """The agent's object PUT time so far: (seconds in all, PUTs)."""
    port = agent.processes[0].http_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read()
    total, count = _PUT_SUM.search(text), _PUT_COUNT.search(text)
    return (float(total.group(1)) if total else 0.0, float(count.group(1)) if count else 0.0)


def _start_moto(log_path: Path) -> tuple[str, subprocess.Popen[bytes]]:
    """moto's S3-compatible server on a free loopback port, with the bucket made."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT")}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"moto server exited: {log_path.read_text()[-2000:]}")
        try:
            put = urllib.request.Request(f"{endpoint}/{BUCKET}", method="PUT", data=b"")
            with urllib.request.urlopen(put, timeout=5):
                return endpoint, proc
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    proc.kill()
    raise BenchError("moto server did not answer within 60 s")


def markdown(results: dict[str, Any]) -> str:
    """The section of benchmarks.md: a row per budget and rate, then the peers' figures."""
    m = results["machine"]
    lines = [
        f"## {TITLE}",
        "",
        f"Recorded with `infinistream bench --s3` on {m['date']} ({m['cores']} cores, load "
        f"average {m['load_average_at_start'][0]:.1f} at start, "
        f"{m['load_average_at_end'][0]:.1f} at end; the machine was shared). One agent at a "
        "time, objects in a bucket of moto's S3-compatible server on the loopback, metadata in "
        "SQLite; one connection publishing 1,024 B messages open loop for 10 s at each rate; "
        "end to end: a pull request waiting on the stream while another connection publishes "
        "200 msg/s. moto answers a PUT in milliseconds where S3 Standard takes tens to a few "
        "hundred: add S3's PUT time to the ack latencies (the mean PUT here is in the last "
        "column), and to the end-to-end ones.",
        "",
        "| PUT budget | publish rate | ack p50 (ms) | ack p99 (ms) | acked / offered "
        "| PUT/s | $/month at S3 prices | publish -> delivery p50 (ms) | p99 (ms) "
        "| mean PUT here (ms) |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for b in results["budgets"]:
        e2e = b["e2e"]
        for row in b["publish"]["results"]:
            lines.append(
                f"| {b['linger_ms']} ms | {row['rate']:,} msg/s | {row['p50_ms']:.1f} "
                f"| {row['p99_ms']:.1f} | {row['acked_fraction'] * 100:.1f}% "
                f"| {row['per_s']['puts']:.2f} | ${row['monthly_usd']:,.2f} "
                f"| {e2e['p50_ms']:.1f} | {e2e['p99_ms']:.1f} | {b['mean_put_ms']:.1f} |"
            )
    lines += [
        "",
        'What WarpStream publishes for its agents (their documentation, "Low Latency '
        'Clusters"), whose batch timeout is the counterpart of the PUT budget:',
        "",
        "| system | produce p50 (ms) | produce p99 (ms) | end to end p50 (ms) | p99 (ms) |",
        "|---|--:|--:|--:|--:|",
    ]
    for peer in results["peers"]:
        lines.append(
            f"| {peer['system']} | {peer['produce_p50_ms']} | {peer['produce_p99_ms']} "
            f"| {peer['e2e_p50_ms']} | {peer['e2e_p99_ms']} |"
        )
    return "\n".join(lines) + "\n"
