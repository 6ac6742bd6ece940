"""The one table of a run: its rows, as text for the terminal and as markdown."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

COLUMNS = (
    ("metric", "Metric"),
    ("nats_lazy", "nats-server lazy fsync"),
    ("nats_always", "nats-server sync always"),
    ("infinistream", "InfiniStream"),
    ("ratio_lazy", "IS / lazy"),
    ("ratio_always", "IS / always"),
    ("ceiling", "load-gen ceiling"),
)


@dataclass
class Row:
    metric: str
    cells: dict[str, str] = field(default_factory=dict)
    section: bool = False


def num(x: float) -> str:
    """A figure with about three significant digits, thousands separated."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    if abs(x) >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def ratio(a: float | None, b: float | None) -> str:
    if not a or not b:
        return "-"
    return num(a / b) + "x"


Result = dict[str, Any]


def _compare(
    metric: str,
    per_system: dict[str, Result],
    value: Callable[[Result], float],
    text: Callable[[Result], str],
) -> Row:
    """A row with the three JetStream systems and InfiniStream's ratio to each nats-server."""
    row = Row(metric)
    for key in ("nats_lazy", "nats_always", "infinistream"):
        if key in per_system:
            row.cells[key] = text(per_system[key])
    ours = per_system.get("infinistream")
    if ours is not None:
        for key, col in (("nats_lazy", "ratio_lazy"), ("nats_always", "ratio_always")):
            if key in per_system:
                row.cells[col] = ratio(value(ours), value(per_system[key]))
    return row


def _field(key: str) -> tuple[Callable[[Result], float], Callable[[Result], str]]:
    """The value of one field of a result, and its text."""
    return (lambda r: float(r[key])), (lambda r: num(r[key]))


def _acked_share() -> tuple[Callable[[Result], float], Callable[[Result], str]]:
    """The share of the offered publishes acked, and when the offer stopped if overloaded."""

    def text(r: Result) -> str:
        share = f"{100 * r['acked_fraction']:.1f}%"
        if r.get("overloaded_at_s"):
            share += f" (overloaded: sending stopped at {r['overloaded_at_s']:.1f} s)"
        return share

    return (lambda r: float(r["acked_fraction"])), text


def _throughput_text(r: dict[str, Any]) -> str:
    return f"{num(r['msgs_per_s'])} msg/s, {num(r['mb_per_s'])} MB/s"


def rows(results: dict[str, Any]) -> list[Row]:
    w = results["workloads"]
    out: list[Row] = []
    out.append(Row("Publish throughput, pipelined, every publish acked", section=True))
    for cell in w["publish_throughput"]:
        res = cell["results"]
        conns = "1 conn" if cell["connections"] == 1 else f"{cell['connections']} conns"
        row = _compare(
            f"{conns} x {cell['payload']:,} B", res, lambda r: r["msgs_per_s"], _throughput_text
        )
        if "sink" in res:
            row.cells["ceiling"] = _throughput_text(res["sink"])
        out.append(row)

    for entry in w["publish_latency"]:
        out.append(
            Row(
                f"Publish -> ack latency, open loop, {entry['rate']:,} msg/s offered, "
                f"{entry['payload']} B (ms)",
                section=True,
            )
        )
        for name, key in (("p50", "p50_ms"), ("p99", "p99_ms"), ("p99.9", "p999_ms")):
            out.append(_compare(name, entry["results"], *_field(key)))
        out.append(_compare("acked / offered", entry["results"], *_acked_share()))

    f = w["fetch"]
    out.append(
        Row(
            f"Fetch and ack, durable pull consumer, batch {f['batch']}, {f['payload']} B",
            section=True,
        )
    )
    out.append(
        _compare(
            f"{f['messages']:,} messages", f["results"], lambda r: r["msgs_per_s"], _throughput_text
        )
    )

    e = w["e2e_latency"]
    out.append(
        Row(
            f"End to end, publish -> delivery to a waiting pull request, {e['rate']:g} msg/s (ms)",
            section=True,
        )
    )
    for name, key in (("p50", "p50_ms"), ("p99", "p99_ms"), ("p99.9", "p999_ms")):
        out.append(_compare(name, e["results"], *_field(key)))

    s = w["scale_out"]
    res = s["results"]
    out.append(Row(f"Scale-out, {s['connections']} conns x {s['payload']} B", section=True))
    out.append(_compare("publish, 1 agent", res, lambda r: r["msgs_per_s"], _throughput_text))
    pair, single = res["infinistream_x2"], res["infinistream"]
    out.append(
        Row(
            "publish, 2 agents sharing one store",
            {
                "infinistream": f"{_throughput_text(pair)} "
                f"({ratio(pair['msgs_per_s'], single['msgs_per_s'])} of 1 agent)",
                "ratio_lazy": ratio(pair["msgs_per_s"], res["nats_lazy"]["msgs_per_s"]),
                "ratio_always": ratio(pair["msgs_per_s"], res["nats_always"]["msgs_per_s"]),
            },
        )
    )
    out.append(
        _compare(
            "server CPU s per 1M acked publishes",
            res,
            lambda r: r["cpu_s_per_million"],
            lambda r: num(r["cpu_s_per_million"]),
        )
    )
    out.append(
        Row(
            "server CPU s per 1M acked publishes, 2 agents",
            {
                "infinistream": num(pair["cpu_s_per_million"]),
                "ratio_lazy": ratio(
                    pair["cpu_s_per_million"], res["nats_lazy"]["cpu_s_per_million"]
                ),
                "ratio_always": ratio(
                    pair["cpu_s_per_million"], res["nats_always"]["cpu_s_per_million"]
                ),
            },
        )
    )

    c = w["cost"]
    out.append(
        Row(
            f"Object storage, InfiniStream, {c['rate']:,} msg/s x {c['payload']:,} B spread "
            f"over N streams, linger {c['linger_ms']:g} ms ({c['prices']})",
            section=True,
        )
    )
    for r in c["results"]:
        n = f"{r['streams']:,} stream{'s' if r['streams'] != 1 else ''}"
        p = r["per_s"]
        out.append(
            Row(
                f"{n}: requests/s while writing",
                {
                    "infinistream": (
                        f"PUT {num(p['puts'])}, GET {num(p['gets'] + p['heads'])}, "
                        f"LIST {num(p['lists'])}, DELETE {num(p['deletes'])}"
                    )
                },
            )
        )
        out.append(
            Row(
                f"{n}: PUT per MB written; GET per MB read cold",
                {
                    "infinistream": (
                        f"{num(r['puts_per_mb_written'])}; {num(r['gets_per_mb_read'])}"
                    )
                },
            )
        )
        out.append(
            Row(
                f"{n}: $/month writing; reading it all once, cold",
                {
                    "infinistream": (
                        f"${r['monthly_write_usd']:,.2f}; ${r['monthly_read_usd']:,.2f}"
                    )
                },
            )
        )
    return out


def render_text(results: dict[str, Any]) -> str:
    table = rows(results)
    keys = [k for k, _ in COLUMNS]
    heads = dict(COLUMNS)
    widths = {k: len(heads[k]) for k in keys}
    for row in table:
        if not row.section:
            widths["metric"] = max(widths["metric"], len(row.metric))
            for k, v in row.cells.items():
                widths[k] = max(widths[k], len(v))
    total = sum(widths.values()) + 3 * (len(keys) - 1)

    def line(cells: dict[str, str]) -> str:
        parts = [cells.get(k, "-" if k != "metric" else "").ljust(widths[k]) for k in keys]
        return " | ".join(parts).rstrip()

    out = [line(heads), "-" * total]
    for row in table:
        if row.section:
            out.append("")
            out.append(f"== {row.metric}")
        else:
            out.append(line({"metric": row.metric, **row.cells}))
    out.append("")
    out.append(ceiling_sentence(results))
    return "\n".join(out)


def render_table_markdown(results: dict[str, Any]) -> str:
    keys = [k for k, _ in COLUMNS]
    out = ["| " + " | ".join(title for _, title in COLUMNS) + " |"]
    out.append("|" + "|".join(["---"] + ["--:"] * (len(keys) - 1)) + "|")
    for row in rows(results):
        if row.section:
            out.append(f"| **{row.metric}** |" + " |" * (len(keys) - 1))
        else:
            cells = [row.metric] + [row.cells.get(k, "-") for k in keys[1:]]
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def ceiling_sentence(results: dict[str, Any]) -> str:
    parts = []
    for cell in results["workloads"]["publish_throughput"]:
        res = cell["results"]
        sink, best = res["sink"]["msgs_per_s"], res["nats_lazy"]["msgs_per_s"]
        parts.append(
            f"{cell['connections']}x{cell['payload']}B {num(sink)} msg/s "
            f"({ratio(sink, best)} nats-server lazy)"
        )
    return "Load generator ceiling (core-NATS sink, no JetStream): " + "; ".join(parts)
