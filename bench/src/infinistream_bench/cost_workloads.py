"""What InfiniStream's writes cost in object-store requests, measured on a running agent.

Two measurements, both reading the agents' request counters from /varz:

    put_budget     one publisher at a low, a medium and a high rate, open loop: PUTs a second
                   and the monthly bill at S3 prices, next to the ack latency the budget gives
    stream_spread  steady traffic spread over N streams (one object per flush, however many
                   streams), then, after a restart, GETs per MB to read a sample back cold
"""

from __future__ import annotations

import time
from typing import Any, cast

from infinistream.settings import PUT_BURST
from infinistream_bench import cost
from infinistream_bench.control import BenchError, ControlClient
from infinistream_bench.jobs import FetchJob, FetchResult, PacedJob, PacedResult
from infinistream_bench.systems import InfiniStream
from infinistream_bench.workloads import MB, Bench, delta, latency_summary

REQUESTS = ("puts", "gets", "heads", "lists", "deletes")


def put_budget(bench: Bench, agent: InfiniStream) -> dict[str, Any]:
    """Each budget rate in turn, on one stream, `budget_payload` bytes a message."""
    p = bench.profile
    v = agent.varz()[0]["infinistream"]
    interval = float(v["linger_ms"]) / 1000
    rows: list[dict[str, Any]] = []
    for rate in p.budget_rates:
        stream, subject = f"BUDGET_{rate}", f"budget.{rate}"
        with ControlClient(agent.port) as c:
            c.add_stream(stream, [subject])
        before = agent.counters()
        job = PacedJob(
            port=agent.port,
            subjects=(subject,),
            rate=rate,
            duration=p.budget_warmup + p.budget_duration,
            payload_size=p.budget_payload,
            warmup=p.budget_warmup,
            max_outstanding=max(2000, rate),
        )
        results, usage = bench.run(agent, [job], timeout=p.budget_duration + 120)
        r = cast(PacedResult, results[0])
        d = delta(before, agent.counters())
        with ControlClient(agent.port) as c:
            c.delete_stream(stream)
        seconds = r.elapsed
        per_s = {k: d.get(k, 0) / seconds for k in REQUESTS}
        acked = r.acked - r.errors
        row = {
            "rate": rate,
            **latency_summary(r.latencies),
            "seconds": seconds,
            "acked": acked,
            "errors": r.errors,
            "first_error": r.first_error,
            "acked_fraction": acked / r.scheduled,
            "overloaded_at_s": r.overloaded_at,
            "requests": {k: d.get(k, 0) for k in REQUESTS},
            "per_s": per_s,
            "flushes": d.get("flushes", 0),
            "messages_per_put": acked / d["puts"] if d.get("puts") else 0.0,
            "max_puts_per_s": cost.budget_puts_per_second(
                rate, p.budget_payload, interval, int(v["batch_bytes"]), PUT_BURST, seconds
            ),
            "monthly_usd": cost.monthly_request_bill(per_s),
            "agent_cpu_cores": usage["server_cpu_s"] / usage["wall_s"],
        }
        rows.append(row)
        bench.log(
            f"{agent.label}: {rate:,}/s: {per_s['puts']:.1f} PUT/s "
            f"(${row['monthly_usd']:,.2f}/month), ack p50 {row['p50_ms']:.2f} ms"
        )
    return {
        "linger_ms": interval * 1000,
        "burst": PUT_BURST,
        "batch_bytes": v["batch_bytes"],
        "payload": p.budget_payload,
        "results": rows,
    }


def stream_spread(bench: Bench, agent: InfiniStream) -> list[dict[str, Any]]:
    """Steady traffic spread over N streams: object requests while writing, then (after a
    restart, so nothing is cached) while reading a sample of the streams back."""
    p = bench.profile
    v = agent.varz()[0]["infinistream"]
    interval = float(v["linger_ms"]) / 1000
    rows: list[dict[str, Any]] = []
    names_of: list[list[str]] = []
    for n in p.cost_streams:
        names = [f"COST{n}_{i}" for i in range(n)]
        subjects = [f"cost.{n}.{i}" for i in range(n)]
        start = time.perf_counter()
        with ControlClient(agent.port, timeout=120) as c:
            for name, subject in zip(names, subjects, strict=True):
                c.add_stream(name, [subject])
        created = time.perf_counter() - start
        before = agent.counters()
        job = PacedJob(agent.port, tuple(subjects), p.cost_rate, p.cost_duration, p.cost_payload)
        results, usage = bench.run(agent, [job], timeout=p.cost_duration + 120)
        r = cast(PacedResult, results[0])
        d = delta(before, agent.counters())
        if r.errors or r.unanswered:
            raise BenchError(f"cost, {n} streams: publish failed: {r.first_error}")
        seconds = r.elapsed
        written_mb = r.acked * p.cost_payload / MB
        per_s = {k: d.get(k, 0) / seconds for k in REQUESTS}
        rows.append(
            {
                "streams": n,
                "streams_created_per_s": n / created,
                "messages": r.acked,
                "seconds": seconds,
                "written_mb": written_mb,
                "requests": {k: d.get(k, 0) for k in per_s},
                "per_s": per_s,
                "puts_per_mb_written": d.get("puts", 0) / written_mb,
                "object_bytes_per_payload_byte": d.get("bytes_put", 0) / (written_mb * MB),
                "flushes": d.get("flushes", 0),
                "max_puts_per_s": cost.budget_puts_per_second(
                    p.cost_rate, p.cost_payload, interval, int(v["batch_bytes"]), PUT_BURST, seconds
                ),
                "monthly_write_usd": cost.monthly_request_bill(per_s),
                "agent_cpu_cores": usage["server_cpu_s"] / usage["wall_s"],
            }
        )
        names_of.append(names)
        bench.log(
            f"cost, {n} streams: {per_s['puts']:.1f} PUT/s, "
            f"${rows[-1]['monthly_write_usd']:,.2f}/month writing"
        )
    agent.restart()
    for row, names in zip(rows, names_of, strict=True):
        row.update(_cold_read(bench, agent, names, row["written_mb"] / row["seconds"]))
    return rows


def _cold_read(
    bench: Bench, agent: InfiniStream, names: list[str], written_mb_per_s: float
) -> dict[str, Any]:
    p = bench.profile
    sample = names[: p.cost_read_streams]
    with ControlClient(agent.port, timeout=120) as c:
        counts = [(name, "COLD", c.stream_messages(name)) for name in sample]
        for name in sample:
            c.add_consumer(name, "COLD", max_ack_pending=p.fetch_batch * 20)
    before = agent.counters()
    job = FetchJob(agent.port, tuple(counts), batch=p.fetch_batch, expires=2.0)
    results, _ = bench.run(agent, [job], timeout=600)
    r = cast(FetchResult, results[0])
    d = delta(before, agent.counters())
    read_mb = r.payload_bytes / MB
    gets_per_mb = (d.get("gets", 0) + d.get("heads", 0)) / read_mb
    gets_per_s_if_all_read = gets_per_mb * written_mb_per_s
    return {
        "read_streams": len(sample),
        "read_mb": read_mb,
        "read_requests": {k: d.get(k, 0) for k in ("gets", "heads", "lists")},
        "gets_per_mb_read": gets_per_mb,
        "object_bytes_per_payload_byte_read": d.get("bytes_got", 0) / r.payload_bytes,
        "read_msgs_per_s": r.messages / r.seconds,
        "read_errors": bench.note(agent, "cost, cold read", r.errors),
        "monthly_read_usd": cost.monthly_request_bill({"gets": gets_per_s_if_all_read}),
    }
