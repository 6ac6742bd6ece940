"""`infinistream bench --tables`: streams as Iceberg tables, measured.

    size      a stream of N messages (1M and 3M by default; 10M with --tables-sizes) appended
              to its table in one run of `infinistream pipeline tables`, as the jobs role runs
              it (its own driver process and JVM): wall time, the executors' read-and-write
              stage, rows per second per executor core, Parquet bytes per message; on
              `local[2]` and on a standalone cluster of two one-core workers started from
              pyspark's install on this machine
    lag       an agent in the jobs role running `tables` every --tables-interval (the
              default schedule: 5 minutes) while a publisher sends at a steady rate for
              --tables-cycles intervals: for every message, the time from its publish (the
              `time` the agent stored) to the commit of the snapshot that made it visible,
              read back from the table's own snapshots; p50, p90, max (--tables-cycles 0:
              not run)

Rows go to OUT/tables.json (one JSON line per run) and to kept sections of results.md: one for
the sizes, one for the lag, each replaced only by a run that measured it.
These are measurements, not tests: nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from infinistream_bench.control import BenchError
from infinistream_bench.scale import agent, client, pct, render, running

TITLE = "Streams as Iceberg tables: append rate and file size"
LAG_TITLE = "Streams as Iceberg tables: lag on the jobs role's schedule"
JSON_NAME = "tables.json"
PAYLOAD = 130  # about: the JSON orders below
SUBJECTS = 16
# Messages per section of a filled stream: about what a flush of publishes with 20,000 in
# flight holds on this machine (the wire steps of `--scale messages` wrote 2,900 a section).
FILL_SECTION = 3000
_WRITTEN = re.compile(r"appended (\d+) rows in (\d+) files \(([\d.]+) MB, written in ([\d.]+)s\)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--tables", action="store_true", help="only the tables benchmark (see bench/tables.py)")
    add("--tables-sizes", default="1000000,3000000", help="stream sizes appended in one run")
    add("--tables-interval", type=float, default=300.0, help="jobs interval of the lag run (s)")
    add(
        "--tables-cycles",
        type=int,
        default=3,
        help="intervals the lag run publishes for (0: no lag run)",
    )
    add("--tables-rate", type=float, default=200.0, help="publish rate of the lag run (msg/s)")
    add("--tables-no-cluster", action="store_true", help="skip the standalone cluster rows")
    add(
        "--tables-fill",
        type=int,
        default=0,
        help="write streams of at least this many messages through the write path "
        "(bench/fill.py) instead of publishing them (0: never)",
    )


def main(args: argparse.Namespace, work: Path) -> int:
    from infinistream_bench import report

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        sizes = asyncio.run(run_sizes(args, work / "sizes"))
        lag = asyncio.run(run_lag(args, work / "lag")) if args.tables_cycles > 0 else None
    except BenchError as exc:
        print(f"infinistream bench --tables: {exc}\n(logs in {work})", file=sys.stderr)
        return 1
    record = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.perf_counter() - started, 1),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "sizes": sizes,
        "lag": lag,
    }
    with (out / JSON_NAME).open("a") as f:
        f.write(json.dumps(record) + "\n")
    if sizes:
        section = markdown(record, args)
        report.keep_section(out / report.MD_NAME, TITLE, section)
        print(section)
    if lag is not None:
        section = lag_markdown(record)
        report.keep_section(out / report.MD_NAME, LAG_TITLE, section)
        print(section)
    return 0


# -- one run appends a big stream ----------------------------------------------------------------


def order(i: int, rng: random.Random) -> bytes:
    """A JSON order of about PAYLOAD bytes whose values vary as real ones do (a constant
    payload would compress to nothing and say nothing about bytes per message)."""
    body = {
        "order": i,
        "customer": f"c{rng.randrange(100_000):05d}",
        "sku": f"sku-{rng.randrange(5_000):04d}",
        "quantity": rng.randrange(1, 10),
        "amount": round(rng.uniform(1, 500), 2),
        "note": rng.randbytes(12).hex(),
    }
    return json.dumps(body).encode()


async def publish_orders(nc: Client, count: int, window: int = 20000) -> tuple[float, int]:
    """`count` orders on SUBJECTS subjects with PubAcks, `window` in flight; (rate, errors)."""
    rng = random.Random(7)
    inbox = nc.new_inbox()
    done = asyncio.Event()
    acked = errors = 0
    free = asyncio.Semaphore(window)

    async def on_ack(msg: Msg) -> None:
        nonlocal acked, errors
        acked += 1
        errors += b'"error"' in msg.data
        free.release()
        if acked == count:
            done.set()

    sub = await nc.subscribe(f"{inbox}.*", cb=on_ack)
    start = time.perf_counter()
    for i in range(count):
        await free.acquire()
        await nc.publish(f"big.s{i % SUBJECTS}", order(i, rng), reply=f"{inbox}.{i}")
    await asyncio.wait_for(done.wait(), 3600)
    await sub.unsubscribe()
    return count / (time.perf_counter() - start), errors


def _job(store: Path, master: str, namespace: str, env: dict[str, str]) -> dict[str, Any]:
    """`infinistream pipeline tables` as a process of its own; what its summary says."""
    argv = [sys.executable, "-m", "infinistream", "pipeline", "tables", "-sd", str(store)]
    argv += ["--master", master, "--namespace", namespace]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=7200)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise BenchError(f"tables on {master} failed: {(done.stdout + done.stderr)[-3000:]}")
    found = _WRITTEN.search(done.stdout)
    if found is None:
        raise BenchError(f"no summary in the tables job's output: {done.stdout[-2000:]}")
    rows, files, mb, stage = found.groups()
    return {
        "rows": int(rows),
        "files": int(files),
        "parquet_bytes": float(mb) * 1e6,
        "stage_s": float(stage),
        "job_s": seconds,
    }


async def _write_stream(work: Path, store: Path, size: int, filled: bool) -> dict[str, Any]:
    """The stream BIG of `size` orders, published over the wire or written through the write
    path (bench/fill.py, in sections of FILL_SECTION messages); how, and at what rate."""
    from infinistream.pipeline.options import StoreOptions
    from infinistream.settings import Settings
    from infinistream_bench.fill import fill

    a = agent(work, f"tables-{size}", "-sd", str(store), "--linger", "5ms")
    with running([a]):
        async with client(a.port) as nc:
            body = {"name": "BIG", "subjects": ["big.>"]}
            await nc.request("$JS.API.STREAM.CREATE.BIG", json.dumps(body).encode())
            if not filled:
                rate, errors = await publish_orders(nc, size)
                if errors:
                    raise BenchError(f"{errors} publishes of {size} failed")
                return {"written": "wire", "publish_msgs_per_s": rate}
    rng = random.Random(7)
    options = StoreOptions.from_settings(Settings(store_dir=str(store)))
    done = await fill(
        options,
        "BIG",
        size,
        lambda i: (f"big.s{i % SUBJECTS}", order(i, rng)),
        batch=FILL_SECTION,
    )
    if done.last_seq != size:
        raise BenchError(f"filled {size} messages, the stream's last sequence is {done.last_seq}")
    return {"written": "library fill", "fill_msgs_per_s": done.rate}


async def run_sizes(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    from infinistream_bench.tables_cluster import SparkCluster

    sizes = [int(x) for x in args.tables_sizes.split(",") if x.strip()]
    rows: list[dict[str, Any]] = []
    for size in sizes:
        store = work / f"store-{size}"
        written = await _write_stream(work, store, size, 0 < args.tables_fill <= size)
        where = [("local[2]", "local", dict(os.environ), 2)]
        cluster = None
        if not args.tables_no_cluster:
            cluster = SparkCluster(work / f"cluster-{size}", workers=2)
            cluster.start()
            where.append((cluster.master_url, "cluster", cluster.env(), 2))
        try:
            for master, label, env, cores in where:
                env = {**env, "PYSPARK_PYTHON": sys.executable}
                measured = _job(store, master, f"bench_{label}", env)
                row = {
                    "messages": size,
                    "on": f"{label} ({cores} cores)",
                    **written,
                    **measured,
                    "rows_per_s_per_core": measured["rows"] / measured["stage_s"] / cores,
                    "parquet_bytes_per_msg": measured["parquet_bytes"] / measured["rows"],
                }
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
        finally:
            if cluster is not None:
                cluster.stop()
    return rows


# -- lag on the jobs role's schedule -----------------------------------------------------------


async def _publish_paced(port: int, rate: float, seconds: float) -> int:
    """Publish at `rate` for `seconds` (acks awaited in the background); how many were sent."""
    async with client(port) as nc:
        body = {"name": "LAG", "subjects": ["lag.>"]}
        await nc.request("$JS.API.STREAM.CREATE.LAG", json.dumps(body).encode())
        js = nc.jetstream(timeout=30)
        pending: set[asyncio.Task[Any]] = set()
        rng = random.Random(11)
        start = time.perf_counter()
        sent = 0
        while time.perf_counter() - start < seconds:
            due = int((time.perf_counter() - start) * rate)
            while sent < due:
                payload = order(sent, rng)
                task = asyncio.create_task(js.publish(f"lag.s{sent % SUBJECTS}", payload))
                pending.add(task)
                task.add_done_callback(pending.discard)
                sent += 1
            await asyncio.sleep(0.01)
        await asyncio.gather(*pending)
        return sent


def _visibility_lags(store: Path) -> list[float]:
    """For each row of the LAG table: its snapshot's commit time less its `time`, in seconds."""
    from infinistream.pipeline.tables.catalog import open_catalog
    from infinistream.pipeline.tables.config import TableConfig

    catalog = "sqlite:///" + str((store / "tables.db").resolve()).lstrip("/")
    config = TableConfig(catalog, (store / "objects").resolve().as_uri())
    table = open_catalog(config).load_table(("infinistream", "LAG"))
    lags: list[float] = []
    for snapshot in table.metadata.snapshots:
        for manifest in snapshot.manifests(table.io):
            if manifest.added_snapshot_id != snapshot.snapshot_id:
                continue
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                if entry.snapshot_id != snapshot.snapshot_id:
                    continue
                import pyarrow.parquet as pq  # type: ignore[import-untyped]

                with table.io.new_input(entry.data_file.file_path).open() as f:
                    times = pq.read_table(f, columns=["time"]).column("time").to_pylist()
                committed = snapshot.timestamp_ms / 1000
                lags += [committed - t.timestamp() for t in times]
    return lags


async def run_lag(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    store = work / "store"
    interval = args.tables_interval
    a = agent(
        work,
        "tables-lag",
        "-sd", str(store), "--jobs", "tables", "--jobs-interval", f"{interval:g}s",
    )  # fmt: skip
    with running([a]):
        sent = await _publish_paced(a.port, args.tables_rate, interval * args.tables_cycles)
        # The last messages become visible at the next run: wait for it.
        deadline = time.monotonic() + interval + 600
        while time.monotonic() < deadline:
            lags = await asyncio.to_thread(_lagging, store)
            if lags is not None and len(lags) >= sent:
                break
            await asyncio.sleep(5)
        else:
            raise BenchError("the jobs role did not append every message in time")
    return {
        "interval_s": interval,
        "cycles": args.tables_cycles,
        "rate": args.tables_rate,
        "messages": sent,
        "p50_s": statistics.median(lags),
        "p90_s": pct(lags, 0.9),
        "max_s": max(lags),
    }


def _lagging(store: Path) -> list[float] | None:
    try:
        return _visibility_lags(store)
    except Exception:  # no table yet
        return None


def markdown(record: dict[str, Any], args: argparse.Namespace) -> str:
    load = ", ".join(f"{x:.1f}" for x in record["load_average"])
    fill = f" --tables-fill {args.tables_fill}" if args.tables_fill else ""
    written = (
        f"published with PubAcks below {args.tables_fill:,} messages, written through the "
        f"write path by bench/fill.py from {args.tables_fill:,} on, in sections of "
        f"{FILL_SECTION:,} messages"
        if args.tables_fill
        else "published with PubAcks"
    )
    lines = [
        f"## {TITLE}",
        "",
        f"Measured {record['at']} on {record['cpus']} cores shared with other work (load "
        f"average {load}), with `infinistream bench --tables --tables-sizes "
        f"{args.tables_sizes}{fill}`. Each size: one stream of that many JSON orders (about "
        f"{PAYLOAD} bytes, varied values) on {SUBJECTS} subjects ({written}), appended to its "
        "table in "
        "one run of `pipeline tables` (a process of its own, JVM start included in `job_s`; "
        "`stage_s` is the executors' read-and-write stage, which `rows_per_s_per_core` "
        "divides by), on `local[2]` and on a standalone cluster of two one-core workers on "
        "this machine.",
        "",
        render("size", record["sizes"]).split("\n", 2)[2],
    ]
    return "\n".join(lines)


def lag_markdown(record: dict[str, Any]) -> str:
    lag = record["lag"]
    load = ", ".join(f"{x:.1f}" for x in record["load_average"])
    lines = [
        f"## {LAG_TITLE}",
        "",
        f"Measured {record['at']} on {record['cpus']} cores shared with other work (load "
        f"average {load}), with `infinistream bench --tables --tables-interval "
        f"{lag['interval_s']:g} --tables-cycles {lag['cycles']}`. An agent in the jobs role runs "
        f"`tables` every {lag['interval_s']:g} s while "
        f"{lag['rate']:g} messages/s are published for {lag['cycles']} intervals; each "
        "message's lag is the commit time of the snapshot that holds it less its publish time: "
        f"p50 {lag['p50_s']:.1f} s, p90 {lag['p90_s']:.1f} s, max {lag['max_s']:.1f} s over "
        f"{lag['messages']:,} messages. On the default schedule the p50 is about half the "
        "interval plus one run of the job (its JVM start included).",
        "",
    ]
    return "\n".join(lines)
