"""The workloads: set up streams and consumers, run load-generator jobs, turn results into figures.

Every method takes the system to measure, so the same code measures nats-server and
InfiniStream; each returns a plain dict that goes into the JSON as it is.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, cast

from infinistream.bench import cost
from infinistream.bench.control import BenchError, ControlClient
from infinistream.bench.jobs import (
    Expect,
    FetchJob,
    FetchResult,
    Job,
    PacedJob,
    PacedResult,
    PublishJob,
    PublishResult,
    Result,
    TailJob,
    TailResult,
)
from infinistream.bench.systems import InfiniStream, System
from infinistream.bench.workers import WorkerPool

MB = 1e6  # figures are in decimal megabytes
# Percentiles kept for the latency plot.
CURVE = (0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 100)


@dataclass(frozen=True)
class Profile:
    """How long and how hard every workload runs."""

    name: str
    # publish throughput
    cells: tuple[tuple[int, int], ...]  # (connections, payload bytes)
    warmup: float
    duration: float
    window_nats: int  # publishes in flight per cell, over all its connections
    window_agent: int
    # publish latency, open loop
    latency_rates: tuple[int, ...]
    latency_warmup: float
    latency_duration: float
    # fetch and ack
    fetch_messages: int
    fetch_batch: int
    # end to end
    tail_rate: float
    tail_warmup: float
    tail_duration: float
    # cost
    cost_streams: tuple[int, ...]
    cost_rate: float
    cost_duration: float
    cost_payload: int
    cost_read_streams: int
    # scale-out
    scale_out_cell: tuple[int, int]
    payload: int = 128  # latency, fetch and end-to-end payloads

    def settings(self) -> dict[str, Any]:
        return asdict(self)


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

    def _run(
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

    def _note(self, system: System, workload: str, errors: list[str]) -> list[str]:
        """Keep errors a job reported (rather than raised) for the report."""
        for error in errors:
            self.problems.append(f"{system.label}, {workload}: {error}")
            self.log(f"{system.label}, {workload}: {error}")
        return errors

    def window(self, system: System) -> int:
        p = self.profile
        return p.window_agent if isinstance(system, InfiniStream) else p.window_nats

    # -- publish throughput ---------------------------------------------------------------

    def publish_throughput(
        self, system: System, connections: int, size: int, expect: Expect = "puback"
    ) -> dict[str, Any]:
        p = self.profile
        stream, subject = f"TP_{connections}_{size}", f"tp.{connections}.{size}"
        jetstream = expect == "puback"
        if jetstream:
            with ControlClient(system.port) as c:
                c.add_stream(stream, [subject])
        window = max(connections, min(self.window(system), 64 * 1024 * 1024 // size))
        jobs = [
            PublishJob(
                ports=tuple(system.ports),
                connections=count,
                first_connection=first,
                subject=subject,
                payload_size=size,
                window=window // connections,
                warmup=p.warmup,
                duration=p.duration,
                expect=expect,
            )
            for count, first in split(connections, self.pool.size)
        ]
        before = _counters(system)
        results, usage = self._run(system, jobs, timeout=p.warmup + p.duration + 120)
        rs = cast(list[PublishResult], results)
        acked = sum(r.acked for r in rs)
        errors = sum(r.errors for r in rs)
        rate = sum(r.rate for r in rs)
        out: dict[str, Any] = {
            "msgs_per_s": rate,
            "mb_per_s": rate * size / MB,
            "rate_from": next((r.rate_from for r in rs if r.rate_from != "window"), "window"),
            "in_flight": window,
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
            out["agent"] = _delta(before, _counters(system) or {})
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
        results, _ = self._run(system, [job], timeout=p.latency_duration + 120)
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
            window=self.window(system),
            warmup=0,
            duration=0,
            messages=messages,
        )
        results, _ = self._run(system, [job], timeout=600)
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
        before = _counters(system)
        job = FetchJob(
            port=system.port,
            consumers=((stream, durable, p.fetch_messages),),
            batch=p.fetch_batch,
            expires=2.0,
        )
        results, usage = self._run(system, [job], timeout=600)
        r = cast(FetchResult, results[0])
        out: dict[str, Any] = {
            "msgs_per_s": r.messages / r.seconds,
            "mb_per_s": r.payload_bytes / r.seconds / MB,
            "messages": r.messages,
            "seconds": r.seconds,
            "statuses": {str(k): v for k, v in r.statuses.items()},
            "cpu_s_per_million": usage["server_cpu_s"] / max(r.messages, 1) * 1e6,
            "errors": self._note(system, "fetch", r.errors),
        }
        if not r.errors:
            out["acks_settled_s"] = self._acks_settled(system, stream, durable, p.fetch_messages)
        if before is not None:
            out["agent"] = _delta(before, _counters(system) or {})
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
        results, _ = self._run(system, [job], timeout=p.tail_duration + 120)
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

    # -- the cost model -------------------------------------------------------------------

    def cost(self, agent: InfiniStream) -> list[dict[str, Any]]:
        """Steady traffic spread over N streams: object requests while writing, then (after a
        restart, so nothing is cached) while reading a sample of the streams back."""
        p = self.profile
        rows: list[dict[str, Any]] = []
        for n in p.cost_streams:
            names = [f"COST{n}_{i}" for i in range(n)]
            subjects = [f"cost.{n}.{i}" for i in range(n)]
            start = time.perf_counter()
            with ControlClient(agent.port, timeout=120) as c:
                for name, subject in zip(names, subjects, strict=True):
                    c.add_stream(name, [subject])
            created = time.perf_counter() - start
            before = agent.counters()
            job = PacedJob(
                agent.port, tuple(subjects), p.cost_rate, p.cost_duration, p.cost_payload
            )
            results, usage = self._run(agent, [job], timeout=p.cost_duration + 120)
            r = cast(PacedResult, results[0])
            delta = _delta(before, agent.counters())
            if r.errors or r.unanswered:
                raise BenchError(f"cost, {n} streams: publish failed: {r.first_error}")
            seconds = r.elapsed
            written_mb = r.acked * p.cost_payload / MB
            per_s = {
                k: delta.get(k, 0) / seconds for k in ("puts", "gets", "heads", "lists", "deletes")
            }
            rows.append(
                {
                    "streams": n,
                    "streams_created_per_s": n / created,
                    "messages": r.acked,
                    "seconds": seconds,
                    "written_mb": written_mb,
                    "requests": {k: delta.get(k, 0) for k in per_s},
                    "per_s": per_s,
                    "puts_per_mb_written": delta.get("puts", 0) / written_mb,
                    "object_bytes_per_payload_byte": delta.get("bytes_put", 0) / (written_mb * MB),
                    "flushes": delta.get("flushes", 0),
                    "monthly_write_usd": cost.monthly_request_bill(per_s),
                    "agent_cpu_cores": usage["server_cpu_s"] / usage["wall_s"],
                    "names": names,
                }
            )
        agent.restart()
        for row in rows:
            row.update(self._cold_read(agent, row.pop("names"), row["written_mb"] / row["seconds"]))
        return rows

    def _cold_read(
        self, agent: InfiniStream, names: list[str], written_mb_per_s: float
    ) -> dict[str, Any]:
        p = self.profile
        sample = names[: p.cost_read_streams]
        with ControlClient(agent.port, timeout=120) as c:
            counts = [(name, "COLD", c.stream_messages(name)) for name in sample]
            for name in sample:
                c.add_consumer(name, "COLD", max_ack_pending=p.fetch_batch * 20)
        before = agent.counters()
        job = FetchJob(agent.port, tuple(counts), batch=p.fetch_batch, expires=2.0)
        results, _ = self._run(agent, [job], timeout=600)
        r = cast(FetchResult, results[0])
        delta = _delta(before, agent.counters())
        read_mb = r.payload_bytes / MB
        gets_per_mb = (delta.get("gets", 0) + delta.get("heads", 0)) / read_mb
        gets_per_s_if_all_read = gets_per_mb * written_mb_per_s
        return {
            "read_streams": len(sample),
            "read_mb": read_mb,
            "read_requests": {k: delta.get(k, 0) for k in ("gets", "heads", "lists")},
            "gets_per_mb_read": gets_per_mb,
            "object_bytes_per_payload_byte_read": delta.get("bytes_got", 0) / r.payload_bytes,
            "read_msgs_per_s": r.messages / r.seconds,
            "read_errors": self._note(agent, "cost, cold read", r.errors),
            "monthly_read_usd": cost.monthly_request_bill({"gets": gets_per_s_if_all_read}),
        }


def _counters(system: System) -> dict[str, float] | None:
    """The agents' object requests and write stats; None for nats-server."""
    return system.counters() if isinstance(system, InfiniStream) else None


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0) for k in after}
