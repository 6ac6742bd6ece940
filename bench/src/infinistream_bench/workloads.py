"""The workloads: set up streams and consumers, run load-generator jobs, turn results into figures.

Every method takes the system to measure, so the same code measures nats-server and
InfiniStream; each returns a plain dict that goes into the JSON as it is.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

from infinistream_bench.control import BenchError, ControlClient
from infinistream_bench.jobs import (
    Expect,
    FetchJob,
    FetchResult,
    Job,
    PacedJob,
    PacedResult,
    PublishJob,
    PublishResult,
    ReplyShape,
    Result,
    TailJob,
    TailResult,
)
from infinistream_bench.profiles import Profile
from infinistream_bench.systems import InfiniStream, System
from infinistream_bench.workers import WorkerPool

MB = 1e6  # figures are in decimal megabytes
# Percentiles kept for the latency plot.
CURVE = (0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 100)


def percentile(ordered: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of an ascending sequence."""
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def latency_summary(latencies: list[float]) -> dict[str, Any]:
    """p50/p99/p99.9 and a percentile curve, in milliseconds."""
    ordered = sorted(latencies)
    ms = [x * 1000 for x in ordered]
    return {
        "count": len(ms),
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "p999_ms": percentile(ms, 99.9),
        "max_ms": ms[-1] if ms else math.nan,
        "mean_ms": sum(ms) / len(ms) if ms else math.nan,
        "curve_ms": [[p, percentile(ms, p)] for p in CURVE],
    }


def split(connections: int, workers: int) -> list[tuple[int, int]]:
    """(connections, first connection index) per worker, as even as possible."""
    parts = min(connections, workers)
    base, extra = divmod(connections, parts)
    out, first = [], 0
    for n in range(parts):
        count = base + (1 if n < extra else 0)
        out.append((count, first))
        first += count
    return out


class Bench:
    def __init__(self, profile: Profile, pool: WorkerPool, log: Callable[[str], None]) -> None:
        self.profile = profile
        self.pool = pool
        self.log = log
        self.problems: list[str] = []  # failures noted by workloads, for the report

    # -- running jobs ---------------------------------------------------------------------

    def run(
        self, system: System, jobs: Sequence[Job], timeout: float
    ) -> tuple[list[Result], dict[str, float]]:
        """Run jobs together; also return the system's and the load generator's CPU use."""
        marks: dict[str, float] = {}

        def on_start() -> None:
            marks["server"] = system.cpu_seconds()
            marks["loadgen"] = self.pool.cpu_seconds()
            marks["t"] = time.perf_counter()

        results = self.pool.run(jobs, timeout, on_start)
        wall = time.perf_counter() - marks["t"]
        system.check_alive()
        usage = {
            "wall_s": wall,
            "server_cpu_s": system.cpu_seconds() - marks["server"],
            "loadgen_cpu_s": self.pool.cpu_seconds() - marks["loadgen"],
        }
        return results, usage

    def note(self, system: System, workload: str, errors: list[str]) -> list[str]:
        """Keep errors a job reported (rather than raised) for the report."""
        for error in errors:
            self.problems.append(f"{system.label}, {workload}: {error}")
            self.log(f"{system.label}, {workload}: {error}")
        return errors

    # -- publish throughput ---------------------------------------------------------------

    def publish_throughput(
        self,
        system: System,
        connections: int,
        size: int,
        in_flight: int,
        reply: ReplyShape = "per_publish",
        expect: Expect = "puback",
    ) -> dict[str, Any]:
        """Pipelined publishes, `in_flight` unanswered at most over all `connections`."""
        p = self.profile
        stream, subject = f"TP_{connections}_{size}", f"tp.{connections}.{size}"
        jetstream = expect == "puback"
        if jetstream:
            with ControlClient(system.port) as c:
                c.add_stream(stream, [subject])
        window = max(1, in_flight // connections)
        jobs = [
            PublishJob(
                ports=tuple(system.ports),
                connections=count,
                first_connection=first,
                subject=subject,
                payload_size=size,
                window=window,
                warmup=p.warmup,
                duration=p.duration,
                expect=expect,
                reply=reply,
            )
            for count, first in split(connections, self.pool.size)
        ]
        before = counters(system)
        results, usage = self.run(system, jobs, timeout=p.warmup + p.duration + 120)
        rs = cast(list[PublishResult], results)
        acked = sum(r.acked for r in rs)
        errors = sum(r.errors for r in rs)
        rate = sum(r.rate for r in rs)
        out: dict[str, Any] = {
            "msgs_per_s": rate,
            "mb_per_s": rate * size / MB,
            "rate_from": next((r.rate_from for r in rs if r.rate_from != "window"), "window"),
            "in_flight": window * connections,
            "sent": sum(r.sent for r in rs),
            "acked": acked,
            "errors": errors,
            "first_error": next((r.first_error for r in rs if r.first_error), ""),
            "cpu_s_per_million": usage["server_cpu_s"] / max(acked - errors, 1) * 1e6,
            "server_cpu_cores": usage["server_cpu_s"] / usage["wall_s"],
            "loadgen_cpu_cores": usage["loadgen_cpu_s"] / usage["wall_s"],
        }
        if jetstream:
            with ControlClient(system.port) as c:
                out["stored"] = c.stream_messages(stream)
                c.delete_stream(stream)
        if before is not None:
            out["agent"] = delta(before, counters(system) or {})
        return out

    # -- publish latency ------------------------------------------------------------------

    def publish_latency(self, system: System, rate: int) -> dict[str, Any]:
        p = self.profile
        stream, subject = f"LAT_{rate}", f"lat.{rate}"
        with ControlClient(system.port) as c:
            c.add_stream(stream, [subject])
        job = PacedJob(
            port=system.port,
            subjects=(subject,),
            rate=rate,
            duration=p.latency_warmup + p.latency_duration,
            payload_size=p.payload,
            warmup=p.latency_warmup,
            # More than a second of the offered load (at least 2,000) unanswered: overloaded.
            max_outstanding=max(2000, rate),
        )
        results, _ = self.run(system, [job], timeout=p.latency_duration + 120)
        r = cast(PacedResult, results[0])
        with ControlClient(system.port) as c:
            c.delete_stream(stream)
        return {
            **latency_summary(r.latencies),
            "scheduled": r.scheduled,
            "sent": r.sent,
            "acked": r.acked - r.errors,
            "errors": r.errors,
            "unanswered": r.unanswered,
            "acked_fraction": (r.acked - r.errors) / r.scheduled,
            "overloaded_at_s": r.overloaded_at,
            "first_error": r.first_error,
            "max_send_lag_ms": r.max_send_lag * 1000,
        }

    # -- fetch and ack --------------------------------------------------------------------

    def preload(self, system: System, subject: str, messages: int, size: int) -> None:
        job = PublishJob(
            ports=(system.port,),
            connections=1,
            first_connection=0,
            subject=subject,
            payload_size=size,
            window=self.profile.preload_window,
            warmup=0,
            duration=0,
            messages=messages,
        )
        results, _ = self.run(system, [job], timeout=600)
        r = cast(PublishResult, results[0])
        if r.errors:
            raise BenchError(f"{system.label}: preload failed: {r.first_error}")

    def fetch(self, system: System) -> dict[str, Any]:
        p = self.profile
        stream, subject, durable = "FETCH", "fetch.x", "READER"
        with ControlClient(system.port) as c:
            c.add_stream(stream, [subject])
        self.preload(system, subject, p.fetch_messages, p.payload)
        with ControlClient(system.port) as c:
            c.add_consumer(stream, durable, max_ack_pending=p.fetch_batch * 20)
        before = counters(system)
        job = FetchJob(
            port=system.port,
            consumers=((stream, durable, p.fetch_messages),),
            batch=p.fetch_batch,
            expires=2.0,
        )
        results, usage = self.run(system, [job], timeout=600)
        r = cast(FetchResult, results[0])
        out: dict[str, Any] = {
            "msgs_per_s": r.messages / r.seconds,
            "mb_per_s": r.payload_bytes / r.seconds / MB,
            "messages": r.messages,
            "seconds": r.seconds,
            "statuses": {str(k): v for k, v in r.statuses.items()},
            "cpu_s_per_million": usage["server_cpu_s"] / max(r.messages, 1) * 1e6,
            "errors": self.note(system, "fetch", r.errors),
        }
        if not r.errors:
            out["acks_settled_s"] = self._acks_settled(system, stream, durable, p.fetch_messages)
        if before is not None:
            out["agent"] = delta(before, counters(system) or {})
        with ControlClient(system.port) as c:
            c.delete_stream(stream)
        return out

    def _acks_settled(self, system: System, stream: str, durable: str, last: int) -> float:
        """Seconds until consumer info shows every message acked (the ack floor at `last`)."""
        start = time.perf_counter()
        with ControlClient(system.port) as c:
            while True:
                info = c.consumer_info(stream, durable)
                if info["ack_floor"]["stream_seq"] >= last and not info["num_ack_pending"]:
                    return time.perf_counter() - start
                if time.perf_counter() - start > 30:
                    raise BenchError(f"{system.label}: acks not settled after 30s: {info}")
                time.sleep(0.01)

    # -- end to end -----------------------------------------------------------------------

    def tail(self, system: System) -> dict[str, Any]:
        p = self.profile
        stream, subject, durable = "TAIL", "tail.x", "TAILER"
        with ControlClient(system.port) as c:
            c.add_stream(stream, [subject])
            c.add_consumer(stream, durable, max_ack_pending=100_000)
        job = TailJob(
            port=system.port,
            stream=stream,
            durable=durable,
            subject=subject,
            rate=p.tail_rate,
            duration=p.tail_warmup + p.tail_duration,
            payload_size=p.payload,
            warmup=p.tail_warmup,
        )
        results, _ = self.run(system, [job], timeout=p.tail_duration + 120)
        r = cast(TailResult, results[0])
        with ControlClient(system.port) as c:
            c.delete_stream(stream)
        return {
            **latency_summary(r.latencies),
            "published": r.published,
            "delivered": r.delivered,
            "errors": r.publish_errors,
            "first_error": r.first_error,
        }


def counters(system: System) -> dict[str, float] | None:
    """The agent's object requests and write stats; None for nats-server, and for `serve
    --workers`, whose workers after the first have no monitoring port to read them from."""
    if isinstance(system, InfiniStream) and system.workers == 1:
        return system.counters()
    return None


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0) for k in after}
