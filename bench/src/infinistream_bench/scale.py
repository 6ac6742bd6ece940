"""`infinistream bench --scale NAMES`: how costs grow as work grows, and cross-agent wakeups.

    wakeup    publish on agent A, a pull waiting on agent B: the time from publish to fetch,
              on SQLite (two agents, one -sd) and on etcd (one member); against the same pair
              on one agent, and the publish's own ack latency
    streams   one agent: streams and 10 consumers each created in steps (1,000 then 10,000
              streams by default): create rates, agent RSS, idle CPU, metadata size and keys,
              publish throughput spread round-robin over every stream
    messages  one stream of 16 B messages over `--scale-subjects` subjects grown in steps
              (1M, 3M by default): publish rate, get_msg of a random sequence, fetch from the
              start, metadata keys per million messages; then, the agent restarted (cold):
              the first get_msg (cold open), random gets p50/p99, last-by-subject gets, a new
              consumer's first fetch from the start and from the middle, agent RSS, and index
              metadata bytes per message (subject records apart); before and after
              compaction
    pool      1, 2 and 4 agents on a 3-member etcd and moto's S3 server: publish throughput
              spread over the agents, cross-agent publish-to-fetch latency, membership
    lookups   no agent: index entries of sections of `--scale-lookup-sections` messages
              written straight into metadata up to each of `--scale-messages`; a fresh view's
              lookup of the section holding a random sequence, its latency and snapshots
              (bench/lookups.py)

Each prints a table and appends its rows (JSON) to `OUT/scale.json`; the sizes are options so
that a slow machine can show the growth on smaller steps. These are measurements, not tests:
nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

from infinistream.metadata import open_metadata
from infinistream.pipeline.options import StoreOptions
from infinistream.settings import Settings
from infinistream_bench.backends import (
    etcd_cluster,
    etcd_db_bytes,
    etcd_keep,
    metadata_counts,
    s3_server,
    sqlite_counts,
)
from infinistream_bench.control import BenchError, varz
from infinistream_bench.fill import fill
from infinistream_bench.lookups import run_lookups
from infinistream_bench.systems import ServerProcess, cpu_seconds

SCALES = ("wakeup", "streams", "messages", "pool", "lookups")
GROUP = "default"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--scale", help=f"run only these scale workloads, comma-separated: {','.join(SCALES)}")
    add(
        "--scale-lookup-sections",
        default="100,4167,65536",
        help="lookups: messages a section, comma-separated (one stream each)",
    )
    add("--scale-streams", default="1000,10000", help="stream counts of the streams workload")
    add("--scale-consumers", type=int, default=10, help="consumers per stream (streams)")
    add("--scale-messages", default="1000000,3000000", help="stream sizes (messages workload)")
    add("--scale-agents", default="1,2,4", help="agent counts of the pool workload")
    add("--scale-subjects", type=int, default=16, help="subjects of the messages workload")
    add(
        "--scale-compact",
        action="store_true",
        help="messages: compact the stream (Spark) after the last step and read it cold again; "
        "with --scale-cold-store, compact that store before its cold reads (in place: on "
        "etcd its objects and a copy of etcd's data, on SQLite the store itself: give it a "
        "copy)",
    )
    add("--scale-metadata", choices=("sqlite", "etcd"), default="sqlite", help="messages: store")
    add(
        "--scale-fill",
        type=int,
        default=0,
        help="messages: write the steps of at least this many messages through the write path "
        "(bench/fill.py) instead of the wire (0: never)",
    )
    add(
        "--scale-fill-batch",
        type=int,
        default=4000,
        help="messages per section of a fill when no wire step came before it (after one: the "
        "messages per section that step's flushes wrote)",
    )
    add("--scale-index-cache", default="64MB", help="messages: the agent's --index-cache")
    add(
        "--scale-section-cache",
        default="64MB",
        help="messages: the agent's section cache (cache_bytes in its configuration file)",
    )
    add(
        "--scale-fill-reads",
        type=int,
        default=2000,
        help="messages: random gets after the cold reads, so that the caches reach their "
        "budgets before the RSS that is compared across lengths (0: none)",
    )
    add(
        "--scale-cold-store",
        help="messages: only the cold reads, of the stream BIG in this kept store (a "
        "STEP-store/ of --scale-keep-steps, or --work-dir's messages/store; on etcd, "
        "--work-dir's messages/ for the last step)",
    )
    add(
        "--scale-keep-steps",
        action="store_true",
        help="messages: copy the store after each step but the last to STEP-store/ (on etcd "
        "with the objects and etcd's data), for later cold reads of every length",
    )


def main(args: argparse.Namespace, work: Path) -> int:
    names = [n.strip() for n in args.scale.split(",") if n.strip()]
    unknown = [n for n in names if n not in SCALES]
    if unknown:
        print(f"infinistream bench: unknown scale workload {unknown[0]!r}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        started = time.perf_counter()
        try:
            rows = asyncio.run(_RUN[name](args, work / name))
        except BenchError as exc:
            print(f"infinistream bench --scale {name}: {exc}\n(logs in {work})", file=sys.stderr)
            return 1
        record = {
            "workload": name,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(time.perf_counter() - started, 1),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "rows": rows,
        }
        with (out / "scale.json").open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(render(name, rows))
    return 0


def render(name: str, rows: list[dict[str, Any]]) -> str:
    """A markdown table of `rows` (their keys, in first-seen order)."""
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    lines = [f"### {name}", "", "| " + " | ".join(columns) + " |"]
    lines.append("|" + " --- |" * len(columns))
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


# -- agents -------------------------------------------------------------------------------------


def agent(work: Path, name: str, *args: str, env: dict[str, str] | None = None) -> ServerProcess:
    work.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "infinistream", "serve", "-a", "127.0.0.1", "-p", "0"]
    argv += ["-m", "-1", "--server_name", name, *args]
    proc = ServerProcess(name, argv, work / f"{name}.log")
    if env:
        # ServerProcess passes os.environ; the S3 credentials go there for the child only.
        os.environ.update(env)
    return proc


@contextmanager
def running(procs: Sequence[ServerProcess]) -> Iterator[Sequence[ServerProcess]]:
    try:
        for p in procs:
            p.launch()
        for p in procs:
            p.wait_ready(120)
        yield procs
    finally:
        for p in procs:
            p.stop()


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


async def idle_cpu(pid: int, seconds: float = 5.0) -> float:
    """The agent's CPU use (fraction of one core) while nobody asks anything of it."""
    before = cpu_seconds(pid)
    await asyncio.sleep(seconds)
    return (cpu_seconds(pid) - before) / seconds


@asynccontextmanager
async def client(port: int) -> AsyncIterator[Client]:
    async def quiet(exc: Exception) -> None:
        pass

    nc = await nats.connect(
        f"nats://127.0.0.1:{port}", error_cb=quiet, connect_timeout=10, pending_size=1 << 28
    )
    try:
        yield nc
    finally:
        await nc.close()


async def api(nc: Client, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    payload = json.dumps(body).encode() if body is not None else b""
    msg = await nc.request(f"$JS.API.{subject}", payload, timeout=60)
    answer: dict[str, Any] = json.loads(msg.data)
    if "error" in answer:
        raise BenchError(f"$JS.API.{subject}: {answer['error']}")
    return answer


async def in_windows(n: int, window: int, make: Callable[[int], Awaitable[Any]]) -> float:
    """Run `make(i)` for i in range(n), at most `window` at once; the rate per second."""
    sem = asyncio.Semaphore(window)

    async def one(i: int) -> None:
        async with sem:
            await make(i)

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return n / (time.perf_counter() - start)


async def publish_spread(
    nc: Client, subjects: Callable[[int], str], count: int, window: int = 2000, size: int = 64
) -> tuple[float, int]:
    """`count` publishes (subject i from `subjects(i)`) with PubAcks, `window` in flight, on
    one connection through one inbox subscription; the acked rate and the errors."""
    inbox = nc.new_inbox()
    done = asyncio.Event()
    acked = errors = 0
    free = asyncio.Semaphore(window)

    async def on_ack(msg: Msg) -> None:
        nonlocal acked, errors
        acked += 1
        if b'"error"' in msg.data:
            errors += 1
        free.release()
        if acked == count:
            done.set()

    sub = await nc.subscribe(f"{inbox}.*", cb=on_ack)
    payload = b"x" * size
    start = time.perf_counter()
    for i in range(count):
        await free.acquire()
        await nc.publish(subjects(i), payload, reply=f"{inbox}.{i}")
    await asyncio.wait_for(done.wait(), 600)
    rate = count / (time.perf_counter() - start)
    await sub.unsubscribe()
    return rate, errors


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- wakeup ---------------------------------------------------------------------------------------


async def cross_latency(pub_port: int, pull_port: int, n: int, stream: str) -> list[float]:
    """Publish through one agent while a pull request waits on the other: seconds each."""
    async with client(pub_port) as nca, client(pull_port) as ncb:
        jsa, jsb = nca.jetstream(timeout=30), ncb.jetstream(timeout=30)
        await jsa.add_stream(name=stream, subjects=[f"{stream}.>"])
        await jsb.add_consumer(stream, durable_name="W", ack_policy="none")
        sub = await jsb.pull_subscribe_bind("W", stream=stream)
        out = []
        for i in range(n):
            fetching = asyncio.ensure_future(sub.fetch(1, timeout=30))
            await asyncio.sleep(0.05 + random.random() * 0.05)  # waiting, at a random phase
            start = time.perf_counter()
            await jsa.publish(f"{stream}.x", b"%d" % i)
            await fetching
            out.append(time.perf_counter() - start)
        return out


async def ack_latency(port: int, n: int, stream: str) -> list[float]:
    async with client(port) as nc:
        js = nc.jetstream(timeout=30)
        await js.add_stream(name=stream, subjects=[f"{stream}.>"])
        out = []
        for i in range(n):
            await asyncio.sleep(0.01)
            start = time.perf_counter()
            await js.publish(f"{stream}.x", b"%d" % i)
            out.append(time.perf_counter() - start)
        return out


def _latency_row(store: str, path: str, values: list[float]) -> dict[str, Any]:
    return {
        "metadata": store,
        "path": path,
        "n": len(values),
        "p50_ms": statistics.median(values) * 1000,
        "p90_ms": pct(values, 0.9) * 1000,
        "p99_ms": pct(values, 0.99) * 1000,
    }


async def watch_delays(url: str, n: int = 100) -> list[float]:
    """Seconds from a commit's return on one handle to the wake of a watch on another."""
    from infinistream.metadata import Put, open_metadata

    watcher, writer = open_metadata(url), open_metadata(url)
    watch = watcher.watch("w/")
    try:
        await watch.wait(1)
        await writer.txn([], [Put("w/warm", b"")])
        while await watch.wait(0.3):
            pass
        out = []
        for i in range(n):
            waiting = asyncio.ensure_future(watch.wait(10))
            await asyncio.sleep(0.01 + random.random() * 0.01)
            await writer.txn([], [Put(f"w/{i}", b"")])
            committed = time.perf_counter()
            await waiting
            out.append(time.perf_counter() - committed)
        return out
    finally:
        await watch.close()
        await watcher.close()
        await writer.close()


async def run_wakeup(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    n = 200
    rows = []
    store = work / "sqlite"
    work.mkdir(parents=True, exist_ok=True)
    sqlite_url = f"sqlite://{(work / 'watch.db').resolve()}"
    rows.append(_latency_row("sqlite", "commit -> watch wakes", await watch_delays(sqlite_url)))
    a = agent(work, "a", "-sd", str(store), "--linger", "1ms")
    b = agent(work, "b", "-sd", str(store), "--linger", "1ms")
    with running([a, b]):
        rows.append(_latency_row("sqlite", "publish ack (A)", await ack_latency(a.port, n, "ACK")))
        same = await cross_latency(a.port, a.port, n, "SAME")
        rows.append(_latency_row("sqlite", "publish A -> fetch A", same))
        cross = await cross_latency(a.port, b.port, n, "CROSS")
        rows.append(_latency_row("sqlite", "publish A -> fetch B", cross))
    with etcd_cluster(work, 1) as url:
        rows.append(_latency_row("etcd", "commit -> watch wakes", await watch_delays(url)))
        objects = (work / "etcd-objects").resolve().as_uri()
        common = ("--objects", objects, "--metadata", url, "--linger", "1ms")
        a = agent(work, "ea", "-sd", str(work / "ea"), *common)
        b = agent(work, "eb", "-sd", str(work / "eb"), *common)
        with running([a, b]):
            acks = await ack_latency(a.port, n, "ACK")
            rows.append(_latency_row("etcd", "publish ack (A)", acks))
            same = await cross_latency(a.port, a.port, n, "SAME")
            rows.append(_latency_row("etcd", "publish A -> fetch A", same))
            cross = await cross_latency(a.port, b.port, n, "CROSS")
            rows.append(_latency_row("etcd", "publish A -> fetch B", cross))
    return rows


# -- streams and consumers ------------------------------------------------------------------------


async def run_streams(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    steps = [int(x) for x in args.scale_streams.split(",")]
    per = args.scale_consumers
    store = work / "store"
    a = agent(work, "a", "-sd", str(store))
    rows = []
    with running([a]):
        db = store / "meta.db"
        async with client(a.port) as nc:
            rss0 = rss_bytes(a.pid)
            have = 0
            for target in steps:
                stream_rate = await create_streams(nc, range(have, target))
                consumer_rate = await create_consumers(nc, range(have, target), per)
                have = target
                await asyncio.sleep(2)  # background work settles
                cpu = await idle_cpu(a.pid)
                rss = rss_bytes(a.pid)
                counted = sqlite_counts(db, {"all": f"{GROUP}/"})
                keys, meta_bytes = counted["all"], counted["all_bytes"]
                total = target * 4
                rate, errors = await publish_spread(nc, spread_over(target), total)
                account = await api(nc, "INFO")
                rows.append(
                    {
                        "streams": target,
                        "consumers": account["consumers"],
                        "stream_creates_per_s": stream_rate,
                        "consumer_creates_per_s": consumer_rate,
                        "rss_mb": rss / 2**20,
                        "rss_kb_per_consumer": (rss - rss0) / 1024 / (target * (per + 1)),
                        "idle_cpu_pct": cpu * 100,
                        "metadata_mb": meta_bytes / 2**20,
                        "metadata_keys": keys,
                        "metadata_bytes_per_consumer": meta_bytes / (target * (per + 1)),
                        "publish_msgs_per_s": rate,
                        "publishes": total,
                        "publish_errors": errors,
                    }
                )
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def spread_over(streams: int) -> Callable[[int], str]:
    return lambda i: f"s{i % streams}.x"


async def create_streams(nc: Client, numbers: range) -> float:
    async def make(i: int) -> None:
        name = f"S{numbers[i]}"
        await api(nc, f"STREAM.CREATE.{name}", {"name": name, "subjects": [f"s{numbers[i]}.>"]})

    return await in_windows(len(numbers), 32, make)


async def create_consumers(nc: Client, numbers: range, per: int) -> float:
    consumers = [(f"S{s}", f"C{c}") for s in numbers for c in range(per)]

    async def make(i: int) -> None:
        stream, durable = consumers[i]
        cfg = {"durable_name": durable, "ack_policy": "explicit"}
        body = {"stream_name": stream, "config": cfg}
        await api(nc, f"CONSUMER.CREATE.{stream}.{durable}", body)

    return await in_windows(len(consumers), 32, make)


# -- one long stream ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Place:
    """Where the messages workload's stream lives: the agent's store flags, the same stores as
    a job opens them, and the etcd member's client URL when metadata is on etcd."""

    flags: tuple[str, ...]
    store: StoreOptions
    etcd: str | None = None
    etcd_pid: int | None = None


@contextmanager
def _place(metadata: str, work: Path, kept: Path | None = None) -> Iterator[_Place]:
    """The stores of a new stream in `work`; or, with `kept` (etcd), the kept step in that
    directory (its store/, objects/ and etcd-m0/), etcd started on a copy of its data."""
    store = (kept or work) / "store"
    if metadata == "sqlite":
        settings = Settings(store_dir=str(store))
        yield _Place(("-sd", str(store)), StoreOptions.from_settings(settings))
        return
    data = None if kept is None else kept / "etcd-m0"
    with etcd_cluster(work, 1, data) as url:
        objects = ((kept or work) / "objects").resolve().as_uri()
        flags = ("-sd", str(store), "--metadata", url, "--objects", objects)
        pid = int((work / "etcd-m0.pid").read_text())
        client_url = "http://" + url.removeprefix("etcd://")
        yield _Place(flags, StoreOptions(objects, url), client_url, pid)


async def run_messages(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    if args.scale_cold_store:
        return [await _cold_store(args, work, Path(args.scale_cold_store))]
    steps = [int(x) for x in args.scale_messages.split(",")]
    subjects = args.scale_subjects
    rows = []
    with _place(args.scale_metadata, work) as place:
        budgets = budget_flags(work, args.scale_index_cache, args.scale_section_cache)
        flags = (*place.flags, *budgets)
        a = agent(work, "a", *flags, "--linger", "5ms")
        with running([a]):
            async with client(a.port) as nc:
                await api(nc, "STREAM.CREATE.BIG", {"name": "BIG", "subjects": ["big.>"]})
            have, section = 0, args.scale_fill_batch
            for target in steps:
                if args.scale_fill and target >= args.scale_fill:
                    row = await _fill_step(a, place, have, target, subjects, section)
                else:
                    row = await _wire_step(a, place, have, target, subjects)
                    section = max(1, round((target - have) / max(1, row.pop("new_sections"))))
                have = target
                row.update(await _counts(place, target))
                a.stop()
                a.launch()
                a.wait_ready(120)
                row.update(await _cold(a, place, target, subjects))
                row.update(await fill_caches(a, target, args.scale_fill_reads))
                row.update(await _own_sections(a, place, target))
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                if args.scale_keep_steps and target != steps[-1]:
                    _keep_store(a, place, work / f"{target}-store")
            if args.scale_compact:
                rows.append(await _compacted(a, place, have, subjects, args.scale_fill_reads))
    return rows


async def _cold_store(args: argparse.Namespace, work: Path, store: Path) -> dict[str, Any]:
    """The cold reads of a kept store by a fresh agent (the code `PYTHONPATH` gives it), so
    that agents of two versions read the same stream in turn. A kept etcd step is a directory
    of the step's store/, objects/ and etcd-m0/: etcd starts on a copy of its data."""
    if not (store / "etcd-m0").is_dir():
        settings = Settings(store_dir=str(store))
        place = _Place(("-sd", str(store)), StoreOptions.from_settings(settings))
        return await _cold_place(args, work, place, store)
    with _place("etcd", work, store) as place:
        row = await _cold_place(args, work, place, store)
        if place.etcd is not None:
            size, in_use = etcd_db_bytes(place.etcd)
            row["etcd_db_mb"], row["etcd_db_in_use_mb"] = size / 2**20, in_use / 2**20
        return row


async def _cold_place(
    args: argparse.Namespace, work: Path, place: _Place, store: Path
) -> dict[str, Any]:
    flags = budget_flags(work, args.scale_index_cache, args.scale_section_cache)
    compacted: dict[str, Any] = {}
    if args.scale_compact:
        compacted = {"compacted": True, "compaction_s": _compact(place)}
    a = agent(work, "cold", *place.flags, *flags)
    with running([a]):
        async with client(a.port) as nc:
            last = (await api(nc, "STREAM.INFO.BIG"))["state"]["last_seq"]
        a.stop()  # the INFO read the stream's state: started again, nothing read yet
        a.launch()
        a.wait_ready(120)
        row: dict[str, Any] = {"messages": last, "store": str(store), **compacted}
        row |= await _cold(a, place, last, args.scale_subjects)
        row |= await fill_caches(a, last, args.scale_fill_reads)
        row |= await _own_sections(a, place, last)
    return row


def budget_flags(work: Path, index_cache: str, section_cache: str) -> tuple[str, ...]:
    """The agent's flags for its caches' budgets: the index cache's flag, and the section
    cache's configuration file (the key an agent of any version reads). The zone cache's memory
    tier keeps its default (`--cache-memory`, 256MB)."""
    work.mkdir(parents=True, exist_ok=True)
    conf = work / "budgets.conf"
    conf.write_text(f"infinistream {{\n  cache_bytes: {section_cache}\n}}\n")
    return ("--index-cache", index_cache, "-c", str(conf))


def _keep_store(a: ServerProcess, place: _Place, to: Path) -> None:
    """A copy of the store as the step left it, taken with the agent stopped: on etcd the
    agent's store, its objects and etcd's data, side by side in `to`."""
    a.stop()
    if place.etcd is None:
        shutil.copytree(place.flags[1], to)
    else:
        store = Path(place.flags[1])
        if store.exists():  # the agent's local files, when it made any
            shutil.copytree(store, to / "store")
        shutil.copytree(store.parent / "objects", to / "objects")
        etcd_keep(store.parent, to / "etcd-m0")
    a.launch()
    a.wait_ready(120)


async def _wire_step(
    a: ServerProcess, place: _Place, have: int, target: int, subjects: int
) -> dict[str, Any]:
    """Publish the step's messages over the wire; the publish rate and warm reads."""
    before = await _index_keys(place)
    async with client(a.port) as nc:
        rate, errors = await publish_spread(
            nc, lambda i: f"big.{(have + i) % subjects}", target - have, window=20000, size=16
        )
        row: dict[str, Any] = {"messages": target, "written": "wire"}
        row |= {"publish_msgs_per_s": rate, "publish_errors": errors}
        row["new_sections"] = await _index_keys(place) - before
        row |= await _warm(nc, target)
        row["rss_mb"] = rss_bytes(a.pid) / 2**20
    return row


async def _fill_step(
    a: ServerProcess, place: _Place, have: int, target: int, subjects: int, section: int
) -> dict[str, Any]:
    """Write the step's messages through the write path (the agent stopped meanwhile), in
    sections of `section` messages; then warm reads on the agent started again."""
    a.stop()
    payload = b"x" * 16
    # Formatted once: the fill asks for every message's subject, 7% of its time otherwise (py-spy).
    names = [f"big.{s}" for s in range(subjects)]
    filled = await fill(
        place.store,
        "BIG",
        target - have,
        lambda i: (names[i % subjects], payload),
        first=have,
        batch=section,
    )
    if filled.last_seq != target:
        raise BenchError(
            f"filled to {target} messages, the stream's last sequence is {filled.last_seq}"
        )
    a.launch()
    a.wait_ready(120)
    row: dict[str, Any] = {"messages": target, "written": "library fill"}
    row |= {"fill_msgs_per_s": filled.rate, "fill_messages_per_section": section}
    async with client(a.port) as nc:
        row |= await _warm(nc, target)
    return row


async def _warm(nc: Client, target: int) -> dict[str, Any]:
    get_ms = await _get_msg_ms(nc, target)
    durable = f"F{random.getrandbits(32)}"
    first_ms, fetch_rate = await _fetch_from_start(nc, durable, min(200_000, target))
    return {
        "get_msg_p50_ms": statistics.median(get_ms),
        "get_msg_p90_ms": pct(get_ms, 0.9),
        "fetch_first_batch_ms": first_ms,
        "fetch_msgs_per_s": fetch_rate,
    }


async def _index_keys(place: _Place) -> int:
    """Index entries of BIG so far (one per section), counted in metadata."""
    prefix = f"{GROUP}/sd/BIG/i/"
    return (await metadata_counts(place.store.metadata, {"index": prefix}))["index"]


async def _counts(place: _Place, messages: int) -> dict[str, Any]:
    prefix = f"{GROUP}/sd/BIG/"
    counts = await metadata_counts(place.store.metadata, {"index": f"{prefix}i/", "all": prefix})
    row: dict[str, Any] = {
        "index_keys": counts["index"],
        "stream_keys_per_million": counts["all"] / (messages / 1e6),
        "stream_metadata_mb": counts["all_bytes"] / 2**20,
    }
    if place.etcd is not None:
        size, in_use = etcd_db_bytes(place.etcd)
        row["etcd_db_mb"], row["etcd_db_in_use_mb"] = size / 2**20, in_use / 2**20
    return row


async def _compacted(
    a: ServerProcess, place: _Place, have: int, subjects: int, fill_reads: int
) -> dict[str, Any]:
    """Compact the stream (local Spark), then the same reads on the agent started again."""
    a.stop()
    compaction_s = _compact(place)
    a.launch()
    a.wait_ready(120)
    row: dict[str, Any] = {"messages": have, "compacted": True, "compaction_s": compaction_s}
    async with client(a.port) as nc:
        row |= await _warm(nc, have)
    row |= await _counts(place, have)
    a.stop()
    a.launch()
    a.wait_ready(120)
    row |= await _cold(a, place, have, subjects)
    row |= await fill_caches(a, have, fill_reads)
    row |= await _own_sections(a, place, have)
    return row


def _compact(place: _Place) -> float:
    """Compact the place's streams (local Spark, no agent running); the seconds it took."""
    started = time.perf_counter()
    cmd = [sys.executable, "-m", "infinistream", "pipeline", "compact", *place.flags]
    done = subprocess.run([*cmd, "--min-age", "0"], capture_output=True, text=True)
    if done.returncode:
        raise BenchError(f"compaction failed: {done.stderr[-2000:]}")
    return time.perf_counter() - started


async def _cold(a: ServerProcess, place: _Place, last: int, subjects: int) -> dict[str, Any]:
    """What a freshly started agent costs on the stream: the first get (it opens the stream),
    random gets, last-by-subject gets, new consumers' first fetch from the start and from the
    middle, its RSS after all that, and the index's metadata bytes per message."""
    async with client(a.port) as nc:
        start = time.perf_counter()
        await api(nc, "STREAM.MSG.GET.BIG", {"seq": random.randint(1, last)})
        open_ms = (time.perf_counter() - start) * 1000
        # The agent's CPU for the gets too: on shared cores their latency is mostly waiting.
        cpu = cpu_seconds(a.pid)
        # And etcd's, which serves each get's read of the index.
        etcd_cpu = 0.0 if place.etcd_pid is None else cpu_seconds(place.etcd_pid)
        get_ms = await _get_msg_ms(nc, last)
        get_cpu_ms = (cpu_seconds(a.pid) - cpu) * 1000 / len(get_ms)
        if place.etcd_pid is not None:
            etcd_cpu = (cpu_seconds(place.etcd_pid) - etcd_cpu) * 1000 / len(get_ms)
        last_ms = []
        for _ in range(50):
            subject = f"big.{random.randrange(subjects)}"
            start = time.perf_counter()
            answer = await api(nc, "STREAM.MSG.GET.BIG", {"last_by_subj": subject})
            last_ms.append((time.perf_counter() - start) * 1000)
            if answer["message"]["subject"] != subject:
                raise BenchError(f"last_by_subj {subject} answered {answer}")
        # New consumers each time (a step, or the compacted stream, asks again).
        tag = random.getrandbits(32)
        start_ms = await _first_fetch(nc, f"COLDSTART{tag}", 1)
        middle_ms = await _first_fetch(nc, f"COLDMIDDLE{tag}", last // 2)
        rss = rss_bytes(a.pid)
    prefix = f"{GROUP}/sd/BIG/"
    wanted = {"index": f"{prefix}i/", "subjects": f"{prefix}p/"}
    counts = await metadata_counts(place.store.metadata, wanted)
    return {
        "cold_open_ms": open_ms,
        "cold_get_p50_ms": statistics.median(get_ms),
        "cold_get_p99_ms": pct(get_ms, 0.99),
        "cold_get_cpu_ms": get_cpu_ms,
        **({} if place.etcd_pid is None else {"cold_get_etcd_cpu_ms": etcd_cpu}),
        "last_by_subject_p50_ms": statistics.median(last_ms),
        "first_fetch_start_ms": start_ms,
        "first_fetch_middle_ms": middle_ms,
        "cold_rss_mb": rss / 2**20,
        "index_bytes_per_msg": counts["index_bytes"] / last,
        "subject_record_bytes": counts["subjects_bytes"],
    }


async def _own_sections(a: ServerProcess, place: _Place, last: int, n: int = 200) -> dict[str, Any]:
    """Cold gets each in a section of its own (random sections, a random message in each), on
    an agent started again: of `_cold`'s random gets, those that land in a section an earlier
    one read are warm, a share that shrinks as the stream has more sections (at 1 million
    after compaction, 62 sections, most are), so their median flatters short streams."""
    meta = open_metadata(place.store.metadata)
    try:
        items = await meta.range(f"{GROUP}/sd/BIG/i/", keys_only=True)
    finally:
        await meta.close()
    firsts = sorted(int(i.key.rpartition("/")[2]) for i in items)
    bounds = [*firsts[1:], last + 1]
    a.stop()
    a.launch()
    a.wait_ready(120)
    ms = []
    async with client(a.port) as nc:
        for k in random.sample(range(len(firsts)), min(n, len(firsts))):
            ms.append(await _timed_get(nc, random.randint(firsts[k], bounds[k] - 1)))
    return {
        "own_section_gets": len(ms),
        "own_section_get_p50_ms": statistics.median(ms),
        "own_section_get_p99_ms": pct(ms, 0.99),
    }


async def fill_caches(a: ServerProcess, last: int, reads: int) -> dict[str, Any]:
    """`reads` more random gets, then the agent's RSS and what each of its caches holds (its
    /varz): RSS is compared across lengths with the caches full, not as full as the cold reads
    happened to leave them (200 gets reach more distinct sections in a longer stream)."""
    if not reads:
        return {}
    async with client(a.port) as nc:
        await _get_msg_ms(nc, last, reads)
    held = varz(a.http_port)["infinistream"]
    mb = 2**20
    index = held.get("index_cache_bytes")  # not reported by agents before it was
    packs = held.get("pack_index_bytes")
    return {
        "fill_reads": reads,
        "section_cache_mb": held["cache_bytes"] / mb,
        "index_cache_mb": index / mb if index is not None else "",
        "pack_index_mb": packs / mb if packs is not None else "",
        "zone_memory_mb": held["zone_cache"]["memory_bytes"] / mb,
        "full_rss_mb": rss_bytes(a.pid) / mb,
    }


async def _first_fetch(nc: Client, durable: str, start_seq: int) -> float:
    """A new pull consumer from `start_seq`: its first batch's latency (ms)."""
    js = nc.jetstream(timeout=60)
    await js.add_consumer(
        "BIG",
        durable_name=durable,
        ack_policy="none",
        deliver_policy="by_start_sequence",
        opt_start_seq=start_seq,
    )
    sub = await js.pull_subscribe_bind(durable, stream="BIG")
    start = time.perf_counter()
    await sub.fetch(1000, timeout=60)
    return (time.perf_counter() - start) * 1000


async def _get_msg_ms(nc: Client, last: int, n: int = 200) -> list[float]:
    return [await _timed_get(nc, random.randint(1, last)) for _ in range(n)]


async def _timed_get(nc: Client, seq: int) -> float:
    """One `MSG.GET` of `seq`, its answer checked: how long it took (ms)."""
    start = time.perf_counter()
    answer = await api(nc, "STREAM.MSG.GET.BIG", {"seq": seq})
    took = (time.perf_counter() - start) * 1000
    if answer["message"]["seq"] != seq:
        raise BenchError(f"get_msg {seq} answered {answer['message']['seq']}")
    return took


async def _fetch_from_start(nc: Client, durable: str, count: int) -> tuple[float, float]:
    """A new pull consumer reads `count` messages from the start in batches of 1,000: the
    first batch's latency (ms) and the rate."""
    js = nc.jetstream(timeout=60)
    await js.add_consumer(
        "BIG", durable_name=durable, ack_policy="none", deliver_policy="all", max_waiting=512
    )
    sub = await js.pull_subscribe_bind(durable, stream="BIG")
    start = time.perf_counter()
    got = len(await sub.fetch(1000, timeout=60))
    first = (time.perf_counter() - start) * 1000
    while got < count:
        got += len(await sub.fetch(1000, timeout=60))
    return first, got / (time.perf_counter() - start)


# -- a pool on etcd and S3 ------------------------------------------------------------------------


async def run_pool(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    counts = [int(x) for x in args.scale_agents.split(",")]
    rows = []
    with etcd_cluster(work, 3) as meta_url, s3_server(work) as (objects, s3):
        env = {"AWS_ACCESS_KEY_ID": s3["AWS_ACCESS_KEY_ID"]}
        env["AWS_SECRET_ACCESS_KEY"] = s3["AWS_SECRET_ACCESS_KEY"]
        for n in counts:
            group = f"pool{n}"
            common = (
                "--objects",
                objects,
                "--metadata",
                meta_url,
                "--s3-endpoint",
                s3["endpoint"],
                "--s3-region",
                s3["region"],
                "--group",
                group,
            )
            procs = [
                agent(work, f"{group}-{i}", "-sd", str(work / f"{group}-{i}"), *common, env=env)
                for i in range(n)
            ]
            with running(procs):
                await asyncio.sleep(2)  # every agent has read the pool once
                members = len(varz(procs[0].http_port)["infinistream"]["pool"]["members"])
                async with client(procs[0].port) as nc:
                    await api(nc, "STREAM.CREATE.P", {"name": "P", "subjects": ["p.>"]})
                per_agent = 20_000
                results = await asyncio.gather(*(_publish_on(p.port, per_agent) for p in procs))
                rate = sum(r[0] for r in results)
                errors = sum(r[1] for r in results)
                acks = await ack_latency(procs[0].port, 50, "ACKS")
                lat: list[float] = []
                if n > 1:
                    lat = await cross_latency(procs[0].port, procs[1].port, 50, "X")
                rows.append(
                    {
                        "agents": n,
                        "members_seen": members,
                        "publish_msgs_per_s": rate,
                        "publish_errors": errors,
                        # On S3 a publish waits for the PUT budget's flush (250 ms by default).
                        "publish_ack_p50_ms": statistics.median(acks) * 1000,
                        "cross_agent_p50_ms": statistics.median(lat) * 1000 if lat else "",
                        "cross_agent_p90_ms": pct(lat, 0.9) * 1000 if lat else "",
                        "rss_mb_per_agent": statistics.mean(rss_bytes(p.pid) for p in procs)
                        / 2**20,
                    }
                )
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


async def _publish_on(port: int, count: int) -> tuple[float, int]:
    async with client(port) as nc:
        return await publish_spread(nc, lambda i: f"p.{i % 8}", count, window=4000, size=128)


Rows = list[dict[str, Any]]
_RUN: dict[str, Callable[[argparse.Namespace, Path], Coroutine[Any, Any, Rows]]] = {
    "wakeup": run_wakeup,
    "streams": run_streams,
    "messages": run_messages,
    "pool": run_pool,
    "lookups": run_lookups,
}
