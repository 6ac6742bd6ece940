"""The tables of a run, as text for the terminal and as markdown: the comparison of the systems
(this module) and the cost tables (`cost_tables`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Columns = tuple[tuple[str, str], ...]
# nats-py's and nats.go's default limit of async publishes in flight.
CPU_WINDOW = 4000

COLUMNS: Columns = (
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


@dataclass
class Table:
    columns: Columns
    rows: list[Row]

    def text(self) -> str:
        keys = [k for k, _ in self.columns]
        heads = dict(self.columns)
        first = keys[0]
        widths = {k: len(heads[k]) for k in keys}
        for row in self.rows:
            if not row.section:
                widths[first] = max(widths[first], len(row.metric))
                for k, v in row.cells.items():
                    widths[k] = max(widths[k], len(v))

        def line(cells: dict[str, str]) -> str:
            parts = [cells.get(k, "-" if k != first else "").ljust(widths[k]) for k in keys]
            return " | ".join(parts).rstrip()

        out = [line(heads), "-" * (sum(widths.values()) + 3 * (len(keys) - 1))]
        for row in self.rows:
            if row.section:
                out += ["", f"== {row.metric}"]
            else:
                out.append(line({first: row.metric, **row.cells}))
        return "\n".join(out)

    def markdown(self) -> str:
        keys = [k for k, _ in self.columns]
        out = ["| " + " | ".join(title for _, title in self.columns) + " |"]
        out.append("|" + "|".join(["---"] + ["--:"] * (len(keys) - 1)) + "|")
        for row in self.rows:
            if row.section:
                out.append(f"| **{row.metric}** |" + " |" * (len(keys) - 1))
            else:
                cells = [row.metric] + [row.cells.get(k, "-") for k in keys[1:]]
                out.append("| " + " | ".join(cells) + " |")
        return "\n".join(out)


def num(x: float | None) -> str:
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
Value = Callable[[Result], float]
Text = Callable[[Result], str]


def _compare(metric: str, per_system: dict[str, Result], value: Value, text: Text) -> Row:
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


def _field(key: str) -> tuple[Value, Text]:
    """The value of one field of a result, and its text."""
    return (lambda r: float(r[key])), (lambda r: num(r[key]))


def _rate() -> tuple[Value, Text]:
    return (lambda r: float(r["msgs_per_s"])), _throughput_text


def _acked_share() -> tuple[Value, Text]:
    """The share of the offered publishes acked, and when the offer stopped if overloaded."""

    def text(r: Result) -> str:
        share = f"{100 * r['acked_fraction']:.1f}%"
        if r.get("overloaded_at_s"):
            share += f" (overloaded: sending stopped at {r['overloaded_at_s']:.1f} s)"
        return share

    return (lambda r: float(r["acked_fraction"])), text


def _throughput_text(r: Result) -> str:
    text = f"{num(r['msgs_per_s'])} msg/s, {num(r['mb_per_s'])} MB/s"
    if r.get("errors"):
        text += f" ({r['errors']:,} errors)"
    if r.get("rate_from") == "whole run":
        text += " (whole run)"
    return text


def _conns(n: int) -> str:
    return "1 conn" if n == 1 else f"{n} conns"


def _client_rate() -> tuple[Value, Text]:
    """A client's rate and the cores it used: near 1.0, the client is what limits the row."""

    def text(r: Result) -> str:
        return f"{_throughput_text(r)}, client {num(r['client_cpu_cores'])} cores"

    return (lambda r: float(r["msgs_per_s"])), text


# A client using this much of a core is what limits its row (its loop is one thread).
CLIENT_BOUND_CORES = 0.9


def _client_compare(metric: str, per_system: dict[str, Result]) -> Row:
    """A real-client rate row; a ratio between two runs that both spent a core in the client
    says so, since it then compares clients, not servers."""
    row = _compare(metric, per_system, *_client_rate())
    ours = per_system.get("infinistream")
    for key, col in (("nats_lazy", "ratio_lazy"), ("nats_always", "ratio_always")):
        theirs = per_system.get(key)
        if ours is None or theirs is None or col not in row.cells or row.cells[col] == "-":
            continue
        cores = (ours.get("client_cpu_cores", 0.0), theirs.get("client_cpu_cores", 0.0))
        if min(cores) >= CLIENT_BOUND_CORES:
            row.cells[col] += " (client-bound)"
    return row


def _client_rows(w: dict[str, Any]) -> list[Row]:
    clients = w["clients"]
    payload = next(iter(clients.values()))["payload"]
    out = [
        Row(
            f"Real clients, {payload} B messages: what an application gets (client costs included)",
            section=True,
        )
    ]
    for key, entry in clients.items():
        label, res = entry["label"], entry["results"]
        if entry.get("not_run"):
            out.append(Row(label, {"infinistream": f"not run: {entry['not_run']}"}))
            continue
        if key.endswith("_publish"):
            out.append(_client_compare(f"{label}: msg/s", res))
            out.append(_compare(f"{label}: p50 (ms)", res, *_field("p50_ms")))
            out.append(_compare(f"{label}: p99 (ms)", res, *_field("p99_ms")))
        elif key.endswith("_async"):
            limit = next((r["in_flight_limit"] for r in res.values()), 0)
            out.append(_client_compare(f"{label} ({limit:,}): msg/s", res))
        else:
            batch = next((r["batch"] for r in res.values()), 0)
            out.append(_client_compare(f"{label}, batch {batch}: msg/s", res))
    return out


def _kv_rate(unit: str) -> tuple[Value, Text]:
    """Operations a second and the client's cores, as in the other real-client rows."""

    def text(r: Result) -> str:
        out = f"{num(r['ops_per_s'])} {unit}/s"
        if r.get("errors"):
            out += f" ({r['errors']:,} errors)"
        if r.get("rate_from") == "whole run":
            out += " (whole run)"
        return f"{out}, client {num(r['client_cpu_cores'])} cores"

    return (lambda r: float(r["ops_per_s"])), text


def _kv_seen(label: str, per_system: dict[str, Result]) -> Row:
    """How many of the acked puts the watcher saw, and the client's cores (no ratio: every
    system should see them all)."""
    row = Row(f"{label}: updates seen / puts acked")
    for key in ("nats_lazy", "nats_always", "infinistream"):
        if key in per_system:
            r = per_system[key]
            errors = f" ({r['errors']:,} put errors)" if r.get("errors") else ""
            row.cells[key] = (
                f"{r['seen']:,} / {r['put']:,}{errors}, client {num(r['client_cpu_cores'])} cores"
            )
    return row


def _kv_rows(w: dict[str, Any]) -> list[Row]:
    kv = w["kv"]
    entries = kv["rows"]
    payload = next(iter(entries.values()))["payload"]
    out = [
        Row(
            f"Key-Value, nats-py, {payload} B values over {kv['keys']:,} keys, a bucket with "
            "history 1: what an application gets (client costs included)",
            section=True,
        )
    ]
    for key, entry in entries.items():
        label, res = entry["label"], entry["results"]
        if key == "kv_watch":
            out.append(_compare(f"{label}: p50 (ms)", res, *_field("p50_ms")))
            out.append(_compare(f"{label}: p99 (ms)", res, *_field("p99_ms")))
            out.append(_kv_seen(label, res))
            continue
        unit = "puts" if key.startswith("kv_put") else "gets"
        out.append(_compare(f"{label}: {unit}/s", res, *_kv_rate(unit)))
        if any("p50_ms" in r for r in res.values()):
            out.append(_compare(f"{label}: p50 (ms)", res, *_field("p50_ms")))
            out.append(_compare(f"{label}: p99 (ms)", res, *_field("p99_ms")))
    return out


def _mirror_rows(w: dict[str, Any]) -> list[Row]:
    """Mirror lag (absent from results of runs before the row existed)."""
    mirror = w.get("mirror")
    if not mirror:
        return []
    out = [
        Row(
            f"Mirror lag, nats-py, {mirror['payload']} B at {mirror['rate']:g} msg/s: a stream "
            "mirroring another in the same server or pool",
            section=True,
        )
    ]
    for entry in mirror["rows"].values():
        label, res = entry["label"], entry["results"]
        out.append(_compare(f"{label}: p50 (ms)", res, *_field("p50_ms")))
        out.append(_compare(f"{label}: p99 (ms)", res, *_field("p99_ms")))
    return out


def _throughput_rows(w: dict[str, Any]) -> list[Row]:
    out = [
        Row(
            "Publish throughput, raw protocol, a reply subject per publish under one "
            "`_INBOX.<id>.*` subscription (as clients send); in flight: over all connections",
            section=True,
        )
    ]
    literal: list[Row] = []
    for cell in w["publish_throughput"]:
        res = cell["results"]
        metric = (
            f"{_conns(cell['connections'])} x {cell['payload']:,} B, "
            f"{cell['in_flight']:,} in flight"
        )
        row = _compare(metric, res, *_rate())
        if "sink" in res:
            row.cells["ceiling"] = _throughput_text(res["sink"])
        (literal if cell["reply"] == "literal" else out).append(row)
    if literal:
        out.append(
            Row(
                "Publish throughput, one literal reply subject for every publish (the old "
                "benchmark's shape: no client sends this)",
                section=True,
            )
        )
        out += literal
    # CPU at the clients' default window (the largest when the profile has no such window).
    windows = {c["in_flight"] for c in w["publish_throughput"] if c["reply"] != "literal"}
    at = CPU_WINDOW if CPU_WINDOW in windows else max(windows)
    out.append(Row(f"Server CPU s per 1M acked publishes, {at:,} in flight", section=True))
    for cell in w["publish_throughput"]:
        if cell["in_flight"] == at and cell["reply"] != "literal":
            out.append(
                _compare(
                    f"{_conns(cell['connections'])} x {cell['payload']:,} B",
                    cell["results"],
                    *_field("cpu_s_per_million"),
                )
            )
    return out


def _scale_out_rows(w: dict[str, Any]) -> list[Row]:
    s = w["scale_out"]
    n = s["workers"]
    out = [
        Row(
            f"Scale-out: `serve --workers {n}` ({n} agents on one port sharing the store) "
            "against one agent",
            section=True,
        )
    ]
    for cell in s["cells"]:
        res = cell["results"]
        many, one = res["infinistream_w2"], res["infinistream"]
        what = (
            f"{_conns(cell['connections'])} x {cell['payload']:,} B, "
            f"{cell['in_flight']:,} in flight"
        )
        out.append(
            Row(
                f"{what}: publish, {n} workers",
                {
                    "infinistream": f"{_throughput_text(many)} "
                    f"({ratio(many['msgs_per_s'], one['msgs_per_s'])} of 1 agent)",
                    "ratio_lazy": ratio(many["msgs_per_s"], res["nats_lazy"]["msgs_per_s"]),
                    "ratio_always": ratio(many["msgs_per_s"], res["nats_always"]["msgs_per_s"]),
                },
            )
        )
        out.append(
            Row(
                f"{what}: server CPU s per 1M acked publishes, {n} workers",
                {
                    "infinistream": f"{num(many['cpu_s_per_million'])} "
                    f"({num(one['cpu_s_per_million'])} with 1 agent)",
                    "ratio_lazy": ratio(
                        many["cpu_s_per_million"], res["nats_lazy"]["cpu_s_per_million"]
                    ),
                    "ratio_always": ratio(
                        many["cpu_s_per_million"], res["nats_always"]["cpu_s_per_million"]
                    ),
                },
            )
        )
    return out


def rows(results: dict[str, Any]) -> list[Row]:
    w = results["workloads"]
    out = _client_rows(w) + _kv_rows(w) + _mirror_rows(w) + _throughput_rows(w)
    for entry in w["publish_latency"]:
        out.append(
            Row(
                f"Publish -> ack latency, raw protocol, open loop, {entry['rate']:,} msg/s "
                f"offered, {entry['payload']} B (ms)",
                section=True,
            )
        )
        for name, key in (("p50", "p50_ms"), ("p99", "p99_ms"), ("p99.9", "p999_ms")):
            out.append(_compare(name, entry["results"], *_field(key)))
        out.append(_compare("acked / offered", entry["results"], *_acked_share()))
    f = w["fetch"]
    out.append(
        Row(
            f"Fetch and ack, raw protocol, durable pull consumer, batch {f['batch']}, "
            f"{f['payload']} B",
            section=True,
        )
    )
    out.append(_compare(f"{f['messages']:,} messages", f["results"], *_rate()))
    e = w["e2e_latency"]
    out.append(
        Row(
            f"End to end, publish -> delivery to a waiting pull request, {e['rate']:g} msg/s (ms)",
            section=True,
        )
    )
    for name, key in (("p50", "p50_ms"), ("p99", "p99_ms"), ("p99.9", "p999_ms")):
        out.append(_compare(name, e["results"], *_field(key)))
    return out + _scale_out_rows(w)


def comparison(results: dict[str, Any]) -> Table:
    return Table(COLUMNS, rows(results))


def ceiling_sentence(results: dict[str, Any]) -> str:
    parts = []
    for cell in results["workloads"]["publish_throughput"]:
        res = cell["results"]
        if "sink" not in res or cell["reply"] == "literal":
            continue
        sink, best = res["sink"]["msgs_per_s"], res["nats_lazy"]["msgs_per_s"]
        parts.append(
            f"{cell['connections']}x{cell['payload']}B/{cell['in_flight']} {num(sink)} msg/s "
            f"({ratio(sink, best)} nats-server lazy)"
        )
    return "Load generator ceiling (core-NATS sink, no JetStream): " + "; ".join(parts)
