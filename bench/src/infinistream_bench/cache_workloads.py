"""What the zone cache saves: cold reads of many uncompacted streams by agents in zones.

One agent on the S3 PUT budget writes steady traffic spread over N streams (every object holds
a section of nearly every stream), then stops. Then, for each pool below, fresh agents (nothing
cached) on the same store read every stream back through pull consumers, each zone reading all
of them, its agents a share each. The GETs (and HEADs) are counted from each agent's own /varz
counters and summed per zone:

    no zone cache   one agent without the cache role: one range GET per stream section
    one agent       the agent owns every block: one GET per object
    2 agents        one zone: each object's owner GETs it once and serves the other agent
    2 zones x 2     each zone pays its own GET per object, no more

A zone pays about one GET per object, so its GETs per MB read are about 1 / (MB per object),
which is the PUTs per MB written: objects of a MB or more (4 MB/s or more into one agent on
the 250 ms budget) cost at most 1 GET per MB read.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, cast

from infinistream_bench import cost
from infinistream_bench.control import BenchError, ControlClient, varz
from infinistream_bench.jobs import FetchJob, FetchResult, PacedJob, PacedResult
from infinistream_bench.systems import InfiniStream, ServerProcess, System
from infinistream_bench.table import Row, Table, num
from infinistream_bench.workloads import MB, Bench

STREAMS = 1000
RATES = (2000, 8000)  # msg/s into the writing agent
DURATION = 8.0
PAYLOAD = 1024
LINGER_MS = 250  # the S3 PUT budget
NO_CACHE_ROLES = "publish,fetch,jobs"

# (label, one zone name per agent, extra agent arguments)
POOLS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("one agent, no zone cache", ("z",), ("--roles", NO_CACHE_ROLES)),
    ("one agent", ("z",), ()),
    ("2 agents, one zone", ("a", "a"), ()),
    ("2 zones x 2 agents", ("a", "a", "b", "b"), ()),
)

JSON_NAME = "zone-cache.json"
TITLE = "Zone cache: cold reads of 1,000 uncompacted streams, per zone"
COLUMNS = (
    ("pool", "pool"),
    ("object_mb", "MB per object"),
    ("zone", "zone"),
    ("read_mb", "MB read"),
    ("gets", "GETs"),
    ("gets_mb", "GET per MB read"),
    ("peer", "ranges from the owner"),
    ("fallbacks", "direct reads"),
    ("rate", "msgs/s read"),
    ("bill", "$/month reading all once"),
)


class ZonePool(System):
    """Agents sharing one embedded store, each with its zone: a pool on one host."""

    def __init__(
        self,
        key: str,
        label: str,
        work_dir: Path,
        store_dir: Path,
        zones: tuple[str, ...],
        extra: tuple[str, ...],
    ) -> None:
        super().__init__(key, label, work_dir)
        work_dir.mkdir(parents=True, exist_ok=True)
        self.zones = zones
        self.extra = extra
        base = [sys.executable, "-m", "infinistream", "serve", "-a", "127.0.0.1", "-p", "0"]
        self.processes = [
            ServerProcess(
                f"{label} #{i}",
                [
                    *base,
                    "-m",
                    "-1",
                    "-sd",
                    str(store_dir),
                    "--linger",
                    f"{LINGER_MS}ms",
                    "--zone",
                    zone,
                    *extra,
                ],
                work_dir / f"{key}-{i}.log",
            )
            for i, zone in enumerate(zones)
        ]

    def wait_for_members(self, timeout: float = 30.0) -> None:
        """Until every agent sees the cache agents of its zone (none without the role)."""
        caching = "--roles" not in self.extra
        deadline = time.monotonic() + timeout
        for proc, zone in zip(self.processes, self.zones, strict=True):
            want = self.zones.count(zone) if caching else 0
            while True:
                members = varz(proc.http_port)["infinistream"]["pool"]["members"]
                seen = sum(1 for m in members if m["zone"] == zone and m["cache_address"])
                if seen == want:
                    break
                if time.monotonic() > deadline:
                    raise BenchError(f"{self.label}: zone {zone}: {seen} cache agents, not {want}")
                time.sleep(0.2)


def _requests(proc: ServerProcess) -> tuple[int, dict[str, int]]:
    ours = varz(proc.http_port)["infinistream"]
    r = ours["object_requests"]
    return int(r["gets"]) + int(r["heads"]), dict(ours["zone_cache"])


def zone_cache(bench: Bench, work: Path) -> dict[str, Any]:
    """Every rate, then every pool reading what it wrote."""
    return {
        "streams": STREAMS,
        "payload": PAYLOAD,
        "duration": DURATION,
        "linger_ms": LINGER_MS,
        "results": [_at_rate(bench, work / f"zone-cache-{rate}", rate) for rate in RATES],
    }


def _at_rate(bench: Bench, work: Path, rate: int) -> dict[str, Any]:
    store = work / "store"
    names = [f"ZC{i}" for i in range(STREAMS)]
    subjects = tuple(f"zc.{i}" for i in range(STREAMS))
    writer = InfiniStream(
        "zc_writer", "zone cache writer", work, store, extra=("--linger", f"{LINGER_MS}ms")
    )
    with writer:
        with ControlClient(writer.port, timeout=120) as c:
            for name, subject in zip(names, subjects, strict=True):
                c.add_stream(name, [subject])
        job = PacedJob(writer.port, subjects, rate, DURATION, PAYLOAD)
        results, _ = bench.run(writer, [job], timeout=DURATION + 120)
        written = cast(PacedResult, results[0])
        if written.errors or written.unanswered:
            raise BenchError(f"zone cache, {rate} msg/s: publish failed: {written.first_error}")
        objects = int(writer.varz()[0]["infinistream"]["objects_written"])
        with ControlClient(writer.port, timeout=120) as c:
            counts = {name: c.stream_messages(name) for name in names}
    written_mb = written.acked * PAYLOAD / MB
    bench.log(f"zone cache: {rate} msg/s wrote {objects} objects, {written_mb:.1f} MB")
    pools = []
    for n, (label, zones, extra) in enumerate(POOLS):
        pool = ZonePool(f"zc{n}", label, work / f"pool{n}", store, zones, extra)
        with pool:
            pool.wait_for_members()
            pools.append(
                {
                    "pool": label,
                    "agents": len(zones),
                    "zones": [
                        _read_zone(bench, pool, zone, names, counts, n, rate)
                        for zone in dict.fromkeys(zones)
                    ],
                }
            )
    return {
        "rate": rate,
        "messages": written.acked,
        "written_mb": written_mb,
        "objects": objects,
        "mb_per_object": written_mb / objects if objects else 0.0,
        "written_mb_per_s": written_mb / written.elapsed,
        "pools": pools,
    }


def _read_zone(
    bench: Bench,
    pool: ZonePool,
    zone: str,
    names: list[str],
    counts: dict[str, int],
    n: int,
    rate: int,
) -> dict[str, Any]:
    """Every stream read by the agents of `zone`, a share each, at once."""
    p = bench.profile
    procs = [proc for proc, z in zip(pool.processes, pool.zones, strict=True) if z == zone]
    durable = f"ZC{n}{zone.upper()}"
    shares: list[list[tuple[str, str, int]]] = [[] for _ in procs]
    for i, name in enumerate(names):
        shares[i % len(procs)].append((name, durable, counts[name]))
    for proc, share in zip(procs, shares, strict=True):
        with ControlClient(proc.port, timeout=120) as c:
            for name, _, _ in share:
                c.add_consumer(name, durable, max_ack_pending=p.fetch_batch * 20)
    before = [_requests(proc) for proc in procs]
    jobs = [
        FetchJob(proc.port, tuple(share), batch=p.fetch_batch, expires=2.0)
        for proc, share in zip(procs, shares, strict=True)
    ]
    results, _ = bench.run(pool, jobs, timeout=900)
    after = [_requests(proc) for proc in procs]
    fetched = [cast(FetchResult, r) for r in results]
    for r in fetched:
        bench.note(pool, f"zone cache, zone {zone}", r.errors)
    read_mb = sum(r.payload_bytes for r in fetched) / MB
    gets = sum(a[0] - b[0] for a, b in zip(after, before, strict=True))

    def grew(key: str) -> int:
        return sum(a[1][key] - b[1][key] for a, b in zip(after, before, strict=True))

    gets_per_mb = gets / read_mb if read_mb else 0.0
    seconds = max(r.seconds for r in fetched)
    row = {
        "zone": zone,
        "agents": len(procs),
        "messages": sum(r.messages for r in fetched),
        "read_mb": read_mb,
        "gets": gets,
        "gets_per_mb_read": gets_per_mb,
        "peer_reads": grew("peer_reads"),
        "fallbacks": grew("fallbacks"),
        "peer_failures": grew("peer_failures"),
        "msgs_per_s": sum(r.messages for r in fetched) / seconds if seconds else 0.0,
        "read_errors": sum(len(r.errors) for r in fetched),
    }
    bench.log(
        f"zone cache, {rate} msg/s, {pool.label}, zone {zone}: {gets} GETs for "
        f"{read_mb:.1f} MB ({gets_per_mb:.2f} per MB)"
    )
    return row


def table(results: dict[str, Any]) -> Table:
    rows: list[Row] = []
    for at in results["results"]:
        rows.append(
            Row(
                f"{at['rate']:,} msg/s x {results['payload']:,} B: {at['objects']} objects, "
                f"{at['written_mb']:.1f} MB",
                section=True,
            )
        )
        for pool in at["pools"]:
            for z in pool["zones"]:
                # Reading everything written, at the rate it was written.
                per_s = z["gets_per_mb_read"] * at["written_mb_per_s"]
                rows.append(
                    Row(
                        pool["pool"],
                        {
                            "object_mb": num(at["mb_per_object"]),
                            "zone": f"{z['zone']} ({z['agents']} agent{'s' * (z['agents'] > 1)})",
                            "read_mb": num(z["read_mb"]),
                            "gets": f"{z['gets']:,}",
                            "gets_mb": num(z["gets_per_mb_read"]),
                            "peer": f"{z['peer_reads']:,}",
                            "fallbacks": f"{z['fallbacks']:,}",
                            "rate": num(z["msgs_per_s"]),
                            "bill": f"${cost.monthly_request_bill({'gets': per_s}):,.2f}",
                        },
                    )
                )
    return Table(COLUMNS, rows)


def markdown(results: dict[str, Any]) -> str:
    lines = [
        f"## {TITLE}",
        "",
        "Run with `infinistream bench --zone-cache` (this section only; it is kept when the "
        "full benchmark is rerun). One agent on the S3 PUT budget "
        f"({results['linger_ms']} ms) writes for {results['duration']:g} s, spread round-robin "
        f"over {results['streams']:,} streams, then stops; fresh agents on the same store (a "
        "cold cache) read every stream back through pull consumers, each zone all of them, its "
        "agents a share each. GETs are GETs and HEADs from the agents' own /varz counters, "
        "summed over the zone. A zone pays about one GET per object, so its GETs per MB read "
        "are about 1 / (MB per object): at most 1 once objects reach a MB.",
        "",
        table(results).markdown(),
        "",
    ]
    return "\n".join(lines)
