"""The real-client rows: nats-py and nats.js publishing and fetching as applications do.

nats-py runs in a load-generator worker (`natspy`), nats.js in node (`natsjs`); both against
every JetStream system of the run. Each row says which call it measures. Latency of a
sequential publisher is each `await js.publish()` from call to PubAck, in the client.
"""

from __future__ import annotations

import time
from typing import Any, cast

from infinistream_bench.control import BenchError, ControlClient
from infinistream_bench.jobs import (
    ClientFetchResult,
    ClientPublishMode,
    ClientPublishResult,
    NatsPyFetchJob,
    NatsPyPublishJob,
)
from infinistream_bench.natsjs import NatsJs, NatsJsError
from infinistream_bench.systems import System
from infinistream_bench.workloads import MB, Bench, latency_summary

# Row keys of the JSON, with what each measures.
ROWS = {
    "nats_py_publish": "nats-py `await js.publish()`, one at a time",
    "nats_py_publish_async": "nats-py `await js.publish_async()`, its default in-flight limit",
    "nats_py_fetch": "nats-py pull `fetch(batch)`, `await msg.ack()` each",
    "nats_js_publish": "nats.js `await js.publish()`, one at a time",
    "nats_js_publish_async": "nats.js `js.publish()`, promises kept unsettled up to a window",
    "nats_js_fetch": "nats.js `consumer.fetch({max_messages})`, `m.ack()` each",
}


class ClientBench:
    def __init__(self, bench: Bench, natsjs: NatsJs | str) -> None:
        self.bench = bench
        # nats.js, or why it cannot run (node or its packages missing): said in the report.
        self.natsjs = natsjs

    def measure(self, system: System) -> dict[str, dict[str, Any]]:
        """Every real-client row on one system: {row key: result}."""
        out = {
            "nats_py_publish": self.publish(system, "nats_py", "sequential"),
            "nats_py_publish_async": self.publish(system, "nats_py", "async"),
            "nats_py_fetch": self.fetch(system, "nats_py"),
        }
        if isinstance(self.natsjs, NatsJs):
            out["nats_js_publish"] = self.publish(system, "nats_js", "sequential")
            out["nats_js_publish_async"] = self.publish(system, "nats_js", "async")
            out["nats_js_fetch"] = self.fetch(system, "nats_js")
        return out

    # -- publishing -----------------------------------------------------------------------

    def publish(self, system: System, client: str, mode: ClientPublishMode) -> dict[str, Any]:
        b, p = self.bench, self.bench.profile
        key = f"{client}_publish" + ("_async" if mode == "async" else "")
        stream, subject = f"CLIENT_{key.upper()}", f"client.{key}"
        with ControlClient(system.port) as c:
            c.add_stream(stream, [subject])
        if client == "nats_py":
            job = NatsPyPublishJob(
                system.port, subject, p.payload, mode, p.client_warmup, p.client_duration
            )
            results, usage = b.run(system, [job], timeout=p.client_duration + 120)
            r = cast(ClientPublishResult, results[0])
            raw: dict[str, Any] = {
                "rate": r.rate,
                "rate_from": r.rate_from,
                "acked": r.acked,
                "errors": r.errors,
                "first_error": r.first_error,
                "latencies": r.latencies,
                "in_flight_limit": r.in_flight_limit,
                "client_cpu_s": usage["loadgen_cpu_s"],
            }
        else:
            spec = {
                "url": f"nats://127.0.0.1:{system.port}",
                "mode": "publish" if mode == "sequential" else "publish_async",
                "subject": subject,
                "payload_size": p.payload,
                "warmup": p.client_warmup,
                "duration": p.client_duration,
                "window": p.natsjs_window,
            }
            raw, usage = self._natsjs(system, spec, p.client_duration + 120)
        with ControlClient(system.port) as c:
            stored = c.stream_messages(stream)
            c.delete_stream(stream)
        acked = int(raw["acked"])
        out: dict[str, Any] = {
            "msgs_per_s": raw["rate"],
            "mb_per_s": raw["rate"] * p.payload / MB,
            "rate_from": raw.get("rate_from", "window"),
            "acked": acked,
            "stored": stored,
            "errors": raw["errors"],
            "first_error": raw["first_error"],
            "server_cpu_s_per_million": usage["server_cpu_s"] / max(acked, 1) * 1e6,
            "client_cpu_cores": raw["client_cpu_s"] / usage["wall_s"],
        }
        if mode == "sequential":
            out.update(latency_summary(raw["latencies"]))
        else:
            out["in_flight_limit"] = raw["in_flight_limit"]
        latency = f", p50 {out['p50_ms']:.2f} ms" if mode == "sequential" else ""
        b.log(f"{system.label}: {key}: {out['msgs_per_s']:,.0f} msg/s{latency}")
        return out

    # -- fetching -------------------------------------------------------------------------

    def fetch(self, system: System, client: str) -> dict[str, Any]:
        b, p = self.bench, self.bench.profile
        key = f"{client}_fetch"
        stream, subject, durable = f"CLIENT_{key.upper()}", f"client.{key}", "READER"
        with ControlClient(system.port) as c:
            c.add_stream(stream, [subject])
        b.preload(system, subject, p.client_fetch_messages, p.payload)
        with ControlClient(system.port) as c:
            c.add_consumer(stream, durable)  # the server's default max_ack_pending
        if client == "nats_py":
            job = NatsPyFetchJob(
                system.port, stream, durable, p.client_fetch_messages, p.client_fetch_batch
            )
            results, usage = b.run(system, [job], timeout=600)
            r = cast(ClientFetchResult, results[0])
            raw: dict[str, Any] = {
                "messages": r.messages,
                "seconds": r.seconds,
                "errors": r.errors,
                "client_cpu_s": usage["loadgen_cpu_s"],
            }
        else:
            spec = {
                "url": f"nats://127.0.0.1:{system.port}",
                "mode": "fetch",
                "stream": stream,
                "durable": durable,
                "messages": p.client_fetch_messages,
                "batch": p.client_fetch_batch,
            }
            raw, usage = self._natsjs(system, spec, 600)
        with ControlClient(system.port) as c:
            c.delete_stream(stream)
        seconds = float(raw["seconds"])
        out = {
            "msgs_per_s": raw["messages"] / seconds if seconds else 0.0,
            "mb_per_s": raw["messages"] * p.payload / seconds / MB if seconds else 0.0,
            "messages": raw["messages"],
            "seconds": seconds,
            "batch": p.client_fetch_batch,
            "errors": b.note(system, key, list(raw["errors"])),
            "server_cpu_s_per_million": usage["server_cpu_s"] / max(raw["messages"], 1) * 1e6,
            "client_cpu_cores": raw["client_cpu_s"] / usage["wall_s"],
        }
        b.log(f"{system.label}: {key}: {out['msgs_per_s']:,.0f} msg/s")
        return out

    def _natsjs(
        self, system: System, spec: dict[str, Any], timeout: float
    ) -> tuple[dict[str, Any], dict[str, float]]:
        assert isinstance(self.natsjs, NatsJs)
        marks: dict[str, float] = {}

        def on_start() -> None:
            marks["server"] = system.cpu_seconds()
            marks["t"] = time.perf_counter()

        try:
            raw = self.natsjs.run(spec, timeout, on_start)
        except NatsJsError as exc:
            system.check_alive()  # a server that died says so first
            raise BenchError(str(exc)) from exc
        system.check_alive()
        usage = {
            "wall_s": time.perf_counter() - marks["t"],
            "server_cpu_s": system.cpu_seconds() - marks["server"],
        }
        return raw, usage
