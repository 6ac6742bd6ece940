"""The Key-Value rows: nats-py's KV API (put, get, watch) against every JetStream system.

Each row creates its own bucket with `js.create_key_value` (nats-py's defaults: history 1,
file storage), measures, then reads the bucket's stream state (every acked put has a revision)
and deletes it. Client CPU is the load-generator worker's, as in the other real-client rows.
"""

from __future__ import annotations

from typing import Any, cast

from infinistream_bench.connection import STALL_SECONDS
from infinistream_bench.control import ControlClient
from infinistream_bench.jobs import (
    KvOpsResult,
    KvWatchResult,
    NatsPyKvGetJob,
    NatsPyKvPutJob,
    NatsPyKvWatchJob,
)
from infinistream_bench.profiles import Profile
from infinistream_bench.systems import System
from infinistream_bench.workloads import MB, Bench, latency_summary


def rows(profile: Profile) -> dict[str, str]:
    """Row keys of the JSON, with what each measures."""
    return {
        "kv_put": "nats-py `await kv.put()`, one at a time",
        "kv_put_tasks": f"nats-py `await kv.put()` in {profile.kv_put_tasks} coroutines "
        "(no put_async in its KV API)",
        "kv_get_direct": "nats-py `await kv.get()`, bucket with allow_direct (DIRECT.GET)",
        "kv_get": "nats-py `await kv.get()`, nats-py's default bucket (STREAM.MSG.GET)",
        "kv_watch": f"nats-py `kv.watch()` on another connection, "
        f"{profile.kv_watch_rate:g} puts/s: put -> update seen",
    }


class KvBench:
    def __init__(self, bench: Bench) -> None:
        self.bench = bench

    def measure(self, system: System) -> dict[str, dict[str, Any]]:
        """Every Key-Value row on one system: {row key: result}."""
        tasks = self.bench.profile.kv_put_tasks
        return {
            "kv_put": self._put(system, "kv_put", 1),
            "kv_put_tasks": self._put(system, "kv_put_tasks", tasks),
            "kv_get_direct": self._get(system, "kv_get_direct", direct=True),
            "kv_get": self._get(system, "kv_get", direct=False),
            "kv_watch": self._watch(system),
        }

    def _put(self, system: System, key: str, tasks: int) -> dict[str, Any]:
        b, p = self.bench, self.bench.profile
        bucket = f"BENCH_{key.upper()}"
        job = NatsPyKvPutJob(
            system.port, bucket, p.payload, p.kv_keys, tasks, p.client_warmup, p.client_duration
        )
        results, usage = b.run(system, [job], timeout=p.client_warmup + p.client_duration + 120)
        r = cast(KvOpsResult, results[0])
        state = _drop(system, bucket)["state"]
        out = {
            **_ops(r, p.payload, usage),
            "tasks": tasks,
            # A put's revision is its stream sequence: the bucket is new, so the last one
            # counts every put the server stored; with history 1 a key holds one message.
            "stored": state["last_seq"],
            "keys": state["messages"],
        }
        if tasks == 1:
            out.update(latency_summary(r.latencies))
        self._errors(system, key, r)
        latency = f", p50 {out['p50_ms']:.2f} ms" if tasks == 1 else ""
        b.log(f"{system.label}: {key}: {out['ops_per_s']:,.0f} puts/s{latency}")
        return out

    def _get(self, system: System, key: str, direct: bool) -> dict[str, Any]:
        b, p = self.bench, self.bench.profile
        bucket = f"BENCH_{key.upper()}"
        job = NatsPyKvGetJob(
            system.port, bucket, direct, p.payload, p.kv_keys, p.client_warmup, p.client_duration
        )
        results, usage = b.run(system, [job], timeout=p.client_warmup + p.client_duration + 120)
        r = cast(KvOpsResult, results[0])
        info = _drop(system, bucket)
        out = {
            **_ops(r, p.payload, usage),
            **latency_summary(r.latencies),
            # What the server made of the bucket: nats-py reads it to choose DIRECT.GET.
            "allow_direct": bool(info["config"].get("allow_direct")),
            "keys": info["state"]["messages"],
        }
        self._errors(system, key, r)
        b.log(f"{system.label}: {key}: {out['ops_per_s']:,.0f} gets/s, p50 {out['p50_ms']:.2f} ms")
        return out

    def _watch(self, system: System) -> dict[str, Any]:
        b, p = self.bench, self.bench.profile
        bucket = "BENCH_KV_WATCH"
        job = NatsPyKvWatchJob(
            system.port,
            bucket,
            p.payload,
            p.kv_watch_keys,
            p.kv_watch_rate,
            p.kv_watch_warmup,
            p.kv_watch_duration,
        )
        seconds = p.kv_watch_warmup + p.kv_watch_duration
        results, usage = b.run(system, [job], timeout=seconds + STALL_SECONDS + 120)
        r = cast(KvWatchResult, results[0])
        state = _drop(system, bucket)["state"]
        out = {
            **latency_summary(r.latencies),
            "rate": p.kv_watch_rate,
            "put": r.put,
            "seen": r.seen,
            "stored": state["last_seq"],
            "errors": r.errors,
            "first_error": r.first_error,
            "max_send_lag_ms": r.max_send_lag * 1000,
            "server_cpu_s_per_million": usage["server_cpu_s"] / max(r.put, 1) * 1e6,
            "client_cpu_cores": usage["loadgen_cpu_s"] / usage["wall_s"],
        }
        problems = [f"{r.errors} puts failed, first: {r.first_error}"] if r.errors else []
        if r.seen < r.put:
            problems.append(f"the watcher saw {r.seen} of {r.put} acked puts")
        b.note(system, "kv_watch", problems)
        b.log(
            f"{system.label}: kv_watch: p50 {out['p50_ms']:.2f} ms, p99 {out['p99_ms']:.2f} ms, "
            f"{r.seen} of {r.put} seen"
        )
        return out

    def _errors(self, system: System, key: str, r: KvOpsResult) -> None:
        if r.errors:
            self.bench.note(system, key, [f"{r.errors} errors, first: {r.first_error}"])


def _ops(r: KvOpsResult, payload: int, usage: dict[str, float]) -> dict[str, Any]:
    """The figures every put and get row has."""
    return {
        "ops_per_s": r.rate,
        "mb_per_s": r.rate * payload / MB,
        "rate_from": r.rate_from,
        "ops": r.ops,
        "errors": r.errors,
        "first_error": r.first_error,
        "server_cpu_s_per_million": usage["server_cpu_s"] / max(r.ops, 1) * 1e6,
        "client_cpu_cores": usage["loadgen_cpu_s"] / usage["wall_s"],
    }


def _drop(system: System, bucket: str) -> dict[str, Any]:
    """The bucket's stream info, then the bucket deleted."""
    stream = f"KV_{bucket}"
    with ControlClient(system.port) as c:
        info = c.stream_info(stream)
        c.delete_stream(stream)
    return info
