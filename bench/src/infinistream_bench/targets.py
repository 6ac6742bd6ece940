"""`infinistream bench --targets N`: the rows of durable speed, in N rounds, systems alternating.

A round starts every system afresh and runs the rows on each in turn (nats-server with
`sync_interval: always` only those it is the baseline of): a sequential
publisher (nats-py and nats.js, p50 from call to PubAck), raw publishes on one connection (128 B
and 4 KiB, 512 and 4,000 in flight) with the server's CPU per acked publish, and a durable pull
consumer fetching with an ack per message (raw protocol, batch 500; nats-py, batch 100), and
the tail of publishes sent on a schedule at half what one connection takes (p99 and p99.9,
from send to PubAck: the pauses of the server, not its pace). On a
shared machine a figure moves with the load from one minute to the next; a ratio between
systems measured within one round moves much less, so every round's ratios are reported, and
the median of them.

`--baseline-src DIR` adds another agent, run from the source tree DIR (its `src`, through
PYTHONPATH), measured in the same rounds: a before and after of a change on the same machine
at the same time. The two agents swap places every other round.

A run writes OUT/targets.json and its section of OUT/results.md (kept when the full benchmark
runs again): every round's figures and ratios, and their medians. `--targets-profile` adds a
pass of the agent alone, after the rounds, with py-spy sampling it during each publish row
(bench/spy.py): its top functions by self time.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infinistream_bench import natsjs, report, spy
from infinistream_bench.client_workloads import ClientBench
from infinistream_bench.control import BenchError
from infinistream_bench.machine import load_average, machine_info
from infinistream_bench.profiles import FULL, QUICK
from infinistream_bench.systems import InfiniStream, NatsServer, System, nats_server_version
from infinistream_bench.workers import WorkerPool
from infinistream_bench.workloads import Bench

JSON_NAME = "targets.json"
TITLE = "Durable speed: agent against nats-server, round by round"

# (row key, label, what a better figure is: "lower" or "higher", target ratio to a baseline)
ROWS: tuple[tuple[str, str, str], ...] = (
    ("nats_py_seq_p50", "nats-py `await js.publish()` one at a time, p50 ms", "lower"),
    ("nats_js_seq_p50", "nats.js `await js.publish()` one at a time, p50 ms", "lower"),
    ("raw_128_512", "raw publish, 1 conn x 128 B, 512 in flight, msg/s", "higher"),
    ("raw_128_4000", "raw publish, 1 conn x 128 B, 4,000 in flight, msg/s", "higher"),
    ("raw_4096_512", "raw publish, 1 conn x 4 KiB, 512 in flight, msg/s", "higher"),
    ("raw_4096_4000", "raw publish, 1 conn x 4 KiB, 4,000 in flight, msg/s", "higher"),
    ("cpu_128_4000", "server CPU s per 1M acked publishes, 1 conn x 128 B, 4,000", "lower"),
    ("cpu_4096_4000", "server CPU s per 1M acked publishes, 1 conn x 4 KiB, 4,000", "lower"),
    ("fetch_raw", "fetch + ack, raw protocol, batch 500, msg/s", "higher"),
    ("fetch_nats_py", "fetch + ack, nats-py, batch 100, msg/s", "higher"),
    ("open_150k_p99", "open-loop publish, 1 conn x 128 B at 150,000 msg/s, p99 ms", "lower"),
    ("open_150k_p999", "open-loop publish, 1 conn x 128 B at 150,000 msg/s, p99.9 ms", "lower"),
)
# What each row is compared with: the sequential publisher with nats-server's fsync per write,
# the rest with its default.
BASELINE = {"nats_py_seq_p50": "nats_always", "nats_js_seq_p50": "nats_always"}
# The open-loop rows' rate: about half of what either system takes on one connection, where
# its tail is what the pauses of its server make of it, not a queue of work it cannot keep up
# with.
OPEN_RATE = 150_000
THROUGHPUT = {
    "raw_128_512": (128, 512),
    "raw_128_4000": (128, 4000),
    "raw_4096_512": (4096, 512),
    "raw_4096_4000": (4096, 4000),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add(
        "--targets",
        type=int,
        metavar="ROUNDS",
        help="only the durable-speed rows, in ROUNDS rounds with the systems alternating; "
        "writes OUT/targets.json",
    )
    add("--targets-rows", help="only these rows of --targets, comma-separated")
    add("--baseline-src", help="with --targets: also an agent run from this source tree")
    add(
        "--targets-profile",
        action="store_true",
        help="with --targets: then profile the agent alone with py-spy during each publish row",
    )


def unmeasurable(rows: list[str], js: natsjs.NatsJs | str) -> list[str]:
    """Why rows asked for cannot be measured on this machine (nats.js missing)."""
    if "nats_js_seq_p50" in rows and not isinstance(js, natsjs.NatsJs):
        return [f"the nats.js row is not measured: {js}"]
    return []


def main(args: argparse.Namespace, work: Path, binary: str) -> int:
    profile = QUICK if args.quick else FULL
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", flush=True)

    rows = [r for r, _, _ in ROWS]
    if args.targets_rows:
        rows = [r.strip() for r in args.targets_rows.split(",") if r.strip()]
    js = natsjs.find(args.node_modules)
    results: dict[str, Any] = {
        "machine": machine_info(work, nats_server_version(binary)),
        "rows": {key: {"label": label, "better": better} for key, label, better in ROWS},
        "rounds": [],
    }
    with WorkerPool(args.workers) as pool:
        bench = Bench(profile, pool, log)
        clients = ClientBench(bench, js)
        for problem in unmeasurable(rows, js):
            # Its row stays empty in every round: the report says why.
            bench.problems.append(problem)
            log(problem)
        for n in range(args.targets):
            systems = _systems(work / f"round{n}", binary, args.baseline_src)
            figures: dict[str, dict[str, float]] = {system.key: {} for system in systems}
            for system in _in_turn(systems, n):
                try:
                    with system:
                        its_rows = _rows_of(system, rows)
                        _measure(bench, clients, system, its_rows, log, figures[system.key])
                except BenchError as exc:
                    # Said in the report; the round goes on with the other systems.
                    bench.problems.append(f"round {n + 1}, {system.label}: {exc}")
                    log(f"round {n + 1}, {system.label}: {exc}")
                finally:
                    # Nothing reads a system's store again, and the 4 KiB rows write gigabytes
                    # into it: kept for every round, they filled the disk.
                    shutil.rmtree(system.work_dir, ignore_errors=True)
            results["rounds"].append(figures)
            log(f"round {n + 1}:\n{render_round(figures, rows)}")
        profiles: list[spy.Profile] = []
        if args.targets_profile:
            try:
                profiles = _profile(bench, clients, work / "profile", rows)
            except (BenchError, RuntimeError) as exc:
                bench.problems.append(f"profile: {exc}")
    results["profiles"] = [dataclasses.asdict(p) for p in profiles]
    results["machine"]["load_average_at_end"] = load_average()
    results["problems"] = bench.problems
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / JSON_NAME).write_text(json.dumps(results, indent=1) + "\n")
    section = markdown(results, rows, args.targets, profiles)
    report.keep_section(out / report.MD_NAME, TITLE, section)
    print(render(results, rows))
    print(f"wrote {out / JSON_NAME} and {out / report.MD_NAME}")
    return 0


def _systems(work: Path, binary: str, baseline_src: str | None) -> list[System]:
    systems: list[System] = [
        NatsServer("nats_lazy", "nats-server lazy fsync", work / "lazy", "lazy", binary),
        NatsServer("nats_always", "nats-server sync always", work / "always", "always", binary),
        InfiniStream("infinistream", "InfiniStream", work / "agent", work / "agent" / "store"),
    ]
    if baseline_src:
        src = str(Path(baseline_src).resolve() / "src")
        systems.append(
            InfiniStream(
                "baseline",
                f"InfiniStream from {baseline_src}",
                work / "baseline",
                work / "baseline" / "store",
                env={"PYTHONPATH": src},
            )
        )
    return systems


def _in_turn(systems: list[System], n: int) -> list[System]:
    """The order round `n` runs its systems in: the two agents swap places every other round,
    so that neither always runs on a machine the other has just left warm, or busy."""
    if n % 2 == 0 or len(systems) < 4:
        return systems
    return [*systems[:-2], systems[-1], systems[-2]]


def _rows_of(system: System, rows: list[str]) -> list[str]:
    """The rows a system runs: nats-server with a sync per write is the baseline of the
    sequential publisher only (its throughput rows, a fsync per write, would take minutes)."""
    if system.key == "nats_always":
        return [r for r in rows if BASELINE.get(r) == "nats_always"]
    return rows


def _measure(
    bench: Bench,
    clients: ClientBench,
    system: System,
    rows: list[str],
    log: Callable[[str], None],
    out: dict[str, float],
) -> None:
    """The rows of one system, into `out` as they are measured (a failure keeps those
    measured before it)."""
    if "nats_py_seq_p50" in rows:
        out["nats_py_seq_p50"] = clients.publish(system, "nats_py", "sequential")["p50_ms"]
    if "nats_js_seq_p50" in rows and isinstance(clients.natsjs, natsjs.NatsJs):
        out["nats_js_seq_p50"] = clients.publish(system, "nats_js", "sequential")["p50_ms"]
    for key, (size, window) in THROUGHPUT.items():
        cpu_key = f"cpu_{size}_{window}"
        if key in rows or cpu_key in rows:
            r = bench.publish_throughput(system, 1, size, window)
            out[key] = r["msgs_per_s"]
            out[cpu_key] = r["cpu_s_per_million"]
            log(f"{system.label}: {key}: {r['msgs_per_s']:,.0f} msg/s")
    if "fetch_raw" in rows:
        out["fetch_raw"] = bench.fetch(system)["msgs_per_s"]
        log(f"{system.label}: fetch_raw: {out['fetch_raw']:,.0f} msg/s")
    if "fetch_nats_py" in rows:
        out["fetch_nats_py"] = clients.fetch(system, "nats_py")["msgs_per_s"]
    if "open_150k_p99" in rows or "open_150k_p999" in rows:
        r = bench.publish_latency(system, OPEN_RATE)
        out["open_150k_p99"], out["open_150k_p999"] = r["p99_ms"], r["p999_ms"]
        if r["acked_fraction"] < 1:
            # Fell a second behind the schedule and stopped: what it never answered counts
            # as waiting to the end, so its percentiles are lower bounds.
            bench.problems.append(
                f"{system.label}: open loop at {OPEN_RATE:,} msg/s fell behind, "
                f"{r['acked_fraction']:.1%} of the schedule acked"
            )
        log(f"{system.label}: open loop p99 {r['p99_ms']:.2f} ms, p99.9 {r['p999_ms']:.2f} ms")
    for key in [k for k in out if k not in rows]:
        del out[key]


def _profile(bench: Bench, clients: ClientBench, work: Path, rows: list[str]) -> list[spy.Profile]:
    """py-spy's view of a fresh agent during each publish row of `rows`."""
    agent = InfiniStream("profiled", "InfiniStream under py-spy", work, work / "store")
    labels = {key: label for key, label, _ in ROWS}
    profiles: list[spy.Profile] = []
    p = bench.profile
    with agent:
        pid = agent.processes[0].pid
        if "nats_py_seq_p50" in rows:
            out = work / "nats_py_seq_p50.txt"
            recording = spy.start(pid, p.client_warmup + p.client_duration, out)
            p50 = clients.publish(agent, "nats_py", "sequential")["p50_ms"]
            profiles.append(spy.finish(recording, out, labels["nats_py_seq_p50"], f"{p50:.2f} ms"))
        for key, (size, window) in THROUGHPUT.items():
            if key not in rows:
                continue
            out = work / f"{key}.txt"
            recording = spy.start(pid, p.warmup + p.duration, out)
            rate = bench.publish_throughput(agent, 1, size, window)["msgs_per_s"]
            profiles.append(spy.finish(recording, out, labels[key], f"{rate:,.0f} msg/s"))
    return profiles


def _ratio(figures: dict[str, dict[str, float]], system: str, row: str) -> float | None:
    base = figures.get(BASELINE.get(row, "nats_lazy"), {}).get(row)
    mine = figures.get(system, {}).get(row)
    if not base or mine is None:
        return None
    return mine / base


def render_round(figures: dict[str, dict[str, float]], rows: list[str]) -> str:
    systems = list(figures)
    lines = []
    for key, label, _ in ROWS:
        if key not in rows:
            continue
        cells = [f"{figures[s].get(key, float('nan')):,.3g}" for s in systems]
        ratios = [
            f"{s}/{BASELINE.get(key, 'nats_lazy')} {r:.2f}x"
            for s in systems
            if s not in ("nats_lazy", "nats_always") and (r := _ratio(figures, s, key)) is not None
        ]
        lines.append(f"  {label}: {' | '.join(cells)}  ({', '.join(ratios)})")
    return f"  systems: {' | '.join(systems)}\n" + "\n".join(lines)


def render(results: dict[str, Any], rows: list[str]) -> str:
    """Every round's ratio of each agent to its baseline, and their median."""
    rounds: list[dict[str, dict[str, float]]] = results["rounds"]
    agents = [s for s in rounds[0] if s not in ("nats_lazy", "nats_always")] if rounds else []
    lines = []
    for key, label, better in ROWS:
        if key not in rows:
            continue
        base = BASELINE.get(key, "nats_lazy")
        for agent in agents:
            ratios = [r for fig in rounds if (r := _ratio(fig, agent, key)) is not None]
            if not ratios:
                continue
            each = " / ".join(f"{r:.2f}x" for r in ratios)
            lines.append(
                f"{label} [{agent} / {base}, {better} is better]: {each}"
                f"  (median {statistics.median(ratios):.2f}x)"
            )
    return "\n".join(lines)


def markdown(
    results: dict[str, Any], rows: list[str], rounds: int, profiles: list[spy.Profile]
) -> str:
    """The section of results.md: a row per figure, each round's figure of every system and
    the agents' ratios to the row's baseline, then the median ratio."""
    m = results["machine"]
    figures: list[dict[str, dict[str, float]]] = results["rounds"]
    systems = list(figures[0]) if figures else []
    agents = [s for s in systems if s not in ("nats_lazy", "nats_always")]
    lines = [
        f"## {TITLE}",
        "",
        f"Recorded with `infinistream bench --targets {rounds}` on {m['date']} ({m['cores']} "
        f"cores, load average {m['load_average_at_start'][0]:.1f} at start, "
        f"{m['load_average_at_end'][0]:.1f} at end; the machine was shared), nats-server "
        f"{m['nats_server']}. Each round starts every system afresh and runs the rows on each in "
        "turn; a ratio divides an agent's figure by its baseline's in the same round "
        "(nats-server `sync_interval: always` for the sequential publishers, its default lazy "
        "fsync for the rest).",
        "",
        "| row | round | " + " | ".join([*systems, *(f"{a} ratio" for a in agents)]) + " |",
        "|---|--:|" + "--:|" * (len(systems) + len(agents)),
    ]
    for key, label, better in ROWS:
        if key not in rows:
            continue
        for n, fig in enumerate(figures):
            cells = [_figure(fig.get(s, {}).get(key)) for s in systems]
            ratios = [_ratio_cell(_ratio(fig, a, key)) for a in agents]
            lines.append(f"| {label} | {n + 1} | " + " | ".join(cells + ratios) + " |")
        medians = []
        for a in agents:
            each = [r for fig in figures if (r := _ratio(fig, a, key)) is not None]
            medians.append(_ratio_cell(statistics.median(each) if each else None))
        blank = [""] * len(systems)
        lines.append(f"| ({better} is better) | median | " + " | ".join(blank + medians) + " |")
    if profiles:
        lines += ["", *spy.markdown(profiles)]
    if results.get("problems"):
        lines += ["", "Problems:", "", *(f"- {p}" for p in results["problems"])]
    return "\n".join(lines) + "\n"


def _figure(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _ratio_cell(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}x"
