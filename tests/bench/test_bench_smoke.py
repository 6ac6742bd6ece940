"""`infinistream bench --quick` end to end, into a temporary directory.

Real nats-server processes (lazy fsync, sync always, core-only sink), real agents and real
clients (nats-py; nats.js with node, which scripts/test installs); the JSON must have every
workload with positive figures for every system it measures, no publish errors, and every
acked publish stored. This checks the benchmark's pipeline, not its numbers.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from infinistream_bench import natsjs, options, plot, report
from infinistream_bench.natspy_kv import watched_puts
from infinistream_bench.profiles import QUICK

JETSTREAM = ("nats_lazy", "nats_always", "infinistream")
KV_ROWS = ("kv_put", "kv_put_tasks", "kv_get_direct", "kv_get", "kv_watch")
BUDGETS = ("infinistream", "infinistream_s3_budget")


def _positive(result: dict[str, Any], *keys: str) -> None:
    for key in keys:
        value = result[key]
        assert isinstance(value, int | float) and value > 0, (key, value, result)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("bench")
    out = tmp / "out"
    command = [sys.executable, "-m", "infinistream", "bench", "--quick", "--out", str(out)]
    try:
        # The time limit is a safety net: about 70 s alone, and the full suite's other workers
        # can take most of the two cores meanwhile.
        proc = subprocess.run(
            [*command, "--work-dir", str(tmp / "work")],
            capture_output=True,
            text=True,
            timeout=400,
        )
    except subprocess.TimeoutExpired as exc:
        # Say which step it was in: its progress lines are on stderr.
        progress = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        pytest.fail(f"bench --quick did not finish in {exc.timeout:.0f} s:\n{progress[-4000:]}")
    assert proc.returncode == 0, proc.stderr[-8000:]
    return out, proc.stdout


@pytest.fixture(scope="module")
def results(quick_run: tuple[Path, str]) -> dict[str, Any]:
    out, _ = quick_run
    data: dict[str, Any] = json.loads((out / "benchmarks.json").read_text())
    return data


@pytest.mark.timeout(240)
def test_machine_versions_and_settings_are_recorded(results: dict[str, Any]) -> None:
    m = results["machine"]
    assert m["cores"] > 0 and m["ram_gib"] > 0
    for key in ("cpu_model", "kernel", "python", "nats_server", "date"):
        assert m[key] and m[key] != "unknown", key
    assert results["profile"]["name"] == "quick"
    clients = results["clients"]
    assert clients["loadgen_workers"] >= 1 and clients["event_loop"]
    assert clients["nats_py"].startswith("2.")
    # scripts/test installs node and tests/js: the nats.js rows must run, not be skipped.
    assert clients["nats_js"] and clients["node"].startswith("v"), clients
    systems = results["systems"]
    # The embedded default: a PUT budget of one per 250 us on a local directory.
    assert systems["infinistream"]["linger_ms"] == 0.25
    assert systems["infinistream_s3_budget"]["linger_ms"] == 250
    assert "--linger 250ms" in systems["infinistream_s3_budget"]["argv"]
    assert "sync_interval: always" in systems["nats_always"]["config"]
    assert "sync_interval" not in systems["nats_lazy"]["config"]
    assert "jetstream" not in systems["sink"]["config"]


@pytest.mark.timeout(240)
def test_publish_throughput_has_every_cell_and_system(results: dict[str, Any]) -> None:
    cells = results["workloads"]["publish_throughput"]
    expected = {(c, s, w, "per_publish") for c, s, w in QUICK.throughput}
    expected.add((*QUICK.literal_cell, "literal"))
    assert {(c["connections"], c["payload"], c["in_flight"], c["reply"]) for c in cells} == (
        expected
    )
    assert {512, 4000, 20000} <= {c["in_flight"] for c in cells}
    for cell in cells:
        res = cell["results"]
        assert set(res) == {"sink", *JETSTREAM}
        for key, r in res.items():
            _positive(r, "msgs_per_s", "mb_per_s", "acked", "cpu_s_per_million")
            assert r["in_flight"] == cell["in_flight"]
            assert r["errors"] == 0, (key, r["first_error"])
            assert r["acked"] == r["sent"], key
            if key != "sink":
                assert r["stored"] == r["acked"], (key, r)


@pytest.mark.timeout(240)
def test_real_clients_against_every_system(results: dict[str, Any]) -> None:
    rows = results["workloads"]["clients"]
    assert set(rows) == {
        f"{client}_{kind}"
        for client in ("nats_py", "nats_js")
        for kind in ("publish", "publish_async", "fetch")
    }
    for key, entry in rows.items():
        assert "not_run" not in entry, entry
        assert set(entry["results"]) == set(JETSTREAM), key
        for system, r in entry["results"].items():
            where = (key, system)
            _positive(r, "msgs_per_s")
            # CPU is read in clock ticks: a quick run's share may round to zero.
            assert r["client_cpu_cores"] >= 0 and r["server_cpu_s_per_million"] >= 0, where
            if key.endswith("fetch"):
                assert r["messages"] == QUICK.client_fetch_messages, where
                assert r["errors"] == [], where
                continue
            assert r["errors"] == 0, (where, r["first_error"])
            assert r["stored"] == r["acked"] > 0, where
            if key.endswith("_publish"):
                _positive(r, "count", "p50_ms", "p99_ms")
                assert r["p50_ms"] <= r["p99_ms"], where
            elif key == "nats_py_publish_async":
                assert r["in_flight_limit"] == 4000, where  # nats-py's default


@pytest.mark.timeout(240)
def test_key_value_against_every_system(results: dict[str, Any]) -> None:
    kv = results["workloads"]["kv"]
    assert kv["keys"] == QUICK.kv_keys
    assert tuple(kv["rows"]) == KV_ROWS
    for key, entry in kv["rows"].items():
        assert set(entry["results"]) == set(JETSTREAM), key
        for system, r in entry["results"].items():
            where = (key, system)
            assert r["errors"] == 0, (where, r["first_error"])
            # CPU is read in clock ticks: a quick run's share may round to zero.
            assert r["client_cpu_cores"] >= 0 and r["server_cpu_s_per_million"] >= 0, where
            if key == "kv_watch":
                # Every acked put reached the watcher on the other connection, and each one
                # after the warm-up was timed.
                rate, warmup = QUICK.kv_watch_rate, QUICK.kv_watch_warmup
                puts = watched_puts(rate, warmup + QUICK.kv_watch_duration)
                assert r["seen"] == r["put"] == r["stored"] == puts, (where, r)
                assert r["count"] == puts - watched_puts(rate, warmup), (where, r)
                _positive(r, "p50_ms", "p99_ms")
                assert r["p50_ms"] <= r["p99_ms"], where
                continue
            _positive(r, "ops_per_s", "ops")
            if key.startswith("kv_put"):
                # Every acked put has a revision and no other put got one; history 1 keeps
                # one message per key.
                assert r["stored"] == r["ops"], (where, r)
                assert r["keys"] == min(QUICK.kv_keys, r["ops"]), (where, r)
                assert r["tasks"] == (1 if key == "kv_put" else QUICK.kv_put_tasks), where
            else:
                # nats-py chose DIRECT.GET from the bucket's allow_direct, MSG.GET otherwise.
                assert r["allow_direct"] is (key == "kv_get_direct"), where
                assert r["keys"] == QUICK.kv_keys, where
            if key != "kv_put_tasks":
                _positive(r, "count", "p50_ms", "p99_ms")
                assert r["p50_ms"] <= r["p99_ms"], where


def test_mirror_lag_against_every_system(results: dict[str, Any]) -> None:
    mirror = results["workloads"]["mirror"]
    assert tuple(mirror["rows"]) == ("mirror_lag",)
    for system, r in mirror["rows"]["mirror_lag"]["results"].items():
        # Every message published on the origin was delivered from the mirror.
        assert r["seen"] == r["published"] > 0, (system, r)
        _positive(r, "count", "p50_ms", "p99_ms")
        assert r["p50_ms"] <= r["p99_ms"], system
    assert set(mirror["rows"]["mirror_lag"]["results"]) == set(JETSTREAM)


@pytest.mark.timeout(240)
def test_latency_workloads(results: dict[str, Any]) -> None:
    w = results["workloads"]
    assert [e["rate"] for e in w["publish_latency"]] == [1000, 10000]
    for entry in [*w["publish_latency"], w["e2e_latency"]]:
        assert set(entry["results"]) == set(JETSTREAM)
        for r in entry["results"].values():
            _positive(r, "count", "p50_ms", "p99_ms", "p999_ms")
            assert r["p50_ms"] <= r["p99_ms"] <= r["p999_ms"]
            assert r["errors"] == 0, r["first_error"]
    for r in w["e2e_latency"]["results"].values():
        assert r["delivered"] == r["published"]


@pytest.mark.timeout(240)
def test_fetch_reads_everything(results: dict[str, Any]) -> None:
    f = results["workloads"]["fetch"]
    assert set(f["results"]) == set(JETSTREAM)
    for r in f["results"].values():
        _positive(r, "msgs_per_s", "mb_per_s", "acks_settled_s")
        assert r["messages"] == f["messages"] and r["errors"] == []


@pytest.mark.timeout(240)
def test_put_budget_cost_table(results: dict[str, Any]) -> None:
    b = results["workloads"]["put_budget"]
    assert "$0.005 per 1,000" in b["prices"] and "$0.0004 per 1,000" in b["prices"]
    assert tuple(b["results"]) == BUDGETS
    for key in BUDGETS:
        rows = b["results"][key]["results"]
        assert [r["rate"] for r in rows] == list(QUICK.budget_rates)
        for r in rows:
            assert r["errors"] == 0 and r["acked_fraction"] == 1.0, (key, r["first_error"])
            _positive(r, "p50_ms", "p99_ms", "monthly_usd", "max_puts_per_s")
            # The counters come from this agent's /varz: every acked publish is in an object,
            # and no object holds less than one publish.
            assert 0 < r["requests"]["puts"] <= r["acked"], (key, r)
    # The S3 budget holds: its burst plus one PUT per 250 ms, whatever the rate (batches
    # that fill batch_bytes aside, which the ceiling counts).
    for r in b["results"]["infinistream_s3_budget"]["results"]:
        assert r["requests"]["puts"] <= r["max_puts_per_s"] * r["seconds"] + 1, r


@pytest.mark.timeout(240)
def test_cost_of_spreading_over_streams(results: dict[str, Any]) -> None:
    c = results["workloads"]["cost"]
    assert c["system"] == "infinistream_s3_budget" and c["linger_ms"] == 250
    assert [r["streams"] for r in c["results"]] == list(QUICK.cost_streams)
    for r in c["results"]:
        _positive(r, "messages", "puts_per_mb_written", "gets_per_mb_read")
        assert r["read_errors"] == []
        _positive(r, "monthly_write_usd", "monthly_read_usd")
        _positive(r["per_s"], "puts")
        # One object per flush, however many streams: the S3 budget holds whatever N is.
        assert r["requests"]["puts"] <= r["max_puts_per_s"] * r["seconds"] + 1, r


@pytest.mark.timeout(240)
def test_scale_out_on_serve_workers(results: dict[str, Any]) -> None:
    s = results["workloads"]["scale_out"]
    assert s["workers"] == 2
    assert "--workers 2" in results["systems"]["infinistream_w2"]["argv"]
    # Every throughput row with several connections, run again on two workers.
    assert [(c["connections"], c["payload"], c["in_flight"]) for c in s["cells"]] == [
        cell for cell in QUICK.throughput if cell[0] > 1
    ]
    for cell in s["cells"]:
        assert set(cell["results"]) == {*JETSTREAM, "infinistream_w2"}
        for key, r in cell["results"].items():
            _positive(r, "msgs_per_s", "cpu_s_per_million")
            assert r["errors"] == 0 and r["stored"] == r["acked"] == r["sent"], key


@pytest.mark.timeout(240)
def test_no_server_failed(results: dict[str, Any]) -> None:
    assert results["problems"]["workloads"] == []
    for key, lines in results["problems"].items():
        bad = [x for x in lines if "[ERR]" in x or "[FTL]" in x or "killed" in x or "exited" in x]
        assert not bad, (key, bad[:5])


@pytest.mark.timeout(240)
def test_nats_js_not_run_is_said_in_every_output(results: dict[str, Any], tmp_path: Path) -> None:
    """Without node or its packages the nats.js rows are not run: the report says why, in
    the table, the machine section and the problems, rather than leaving them out."""
    reason = natsjs.find(str(tmp_path / "nowhere"))
    assert isinstance(reason, str)
    missing = copy.deepcopy(results)
    for key, entry in missing["workloads"]["clients"].items():
        if key.startswith("nats_js"):
            entry["results"] = {}
            entry["not_run"] = reason
    missing["clients"].update(nats_js=None, nats_js_not_run=reason)
    missing["problems"]["workloads"] = [f"nats.js rows not run: {reason}"]
    md = report.render_markdown(missing, "plot.png")
    assert md.count(f"not run: {reason}") >= 4  # three rows and the machine section
    assert f"nats.js rows not run: {reason}" in md
    assert f"not run: {reason}" in report.render_text(missing)
    plot.plot_latency(missing, tmp_path / "plot.png")  # the nats.js panel is left out


@pytest.mark.timeout(240)
def test_outputs_written(quick_run: tuple[Path, str]) -> None:
    out, stdout = quick_run
    assert "load-gen ceiling" in stdout and "Load generator ceiling" in stdout
    assert "PUT budget" in stdout and "$/month at S3 prices" in stdout
    md = (out / report.MD_NAME).read_text()
    assert "| Metric | nats-server lazy fsync | nats-server sync always | InfiniStream |" in md
    assert "| publish rate | PUT budget | PUT/s |" in md
    assert "nats-py `await js.publish()`, one at a time: p50 (ms)" in md
    assert "one literal reply subject for every publish" in md
    assert "nats-py `await kv.put()`, one at a time: puts/s" in md
    assert "nats-py `await kv.get()`, bucket with allow_direct (DIRECT.GET): gets/s" in md
    assert "put -> update seen: p99 (ms)" in md
    assert "benchmarks-latency.png" in md
    assert (out / "benchmarks-latency.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.timeout(240)
def test_a_run_writes_the_results_page_and_leaves_the_summary_alone(
    results: dict[str, Any], tmp_path: Path
) -> None:
    """The raw page goes into the output directory (docs/benchmarks by default); the summary
    beside it (docs/benchmarks.md) is written by hand and a run never touches it. A section
    kept by another run (the zone cache's) survives, and the page links to the summary."""
    docs = tmp_path / "docs"
    out = docs / "benchmarks"
    out.mkdir(parents=True)
    summary = docs / "benchmarks.md"
    summary.write_text("# Benchmarks\n\nwritten by hand\n")
    report.keep_section(out / report.MD_NAME, "Zone cache", "## Zone cache\n\nkept\n")
    written = report.write(results, out)
    assert summary.read_text() == "# Benchmarks\n\nwritten by hand\n"
    assert {p.name for p in written} == {report.MD_NAME, report.JSON_NAME, report.PNG_NAME}
    assert {p.parent for p in written} == {out}
    page = (out / report.MD_NAME).read_text()
    assert page.startswith("# Benchmark results: InfiniStream against nats-server\n")
    assert page.endswith("## Zone cache\n\nkept\n")
    # The figures are in benchmarks.json, linked, not repeated in the page.
    assert f"]({report.JSON_NAME})" in page and '"workloads"' not in page
    assert f"]({report.SUMMARY_LINK})" in page and (out / report.SUMMARY_LINK).resolve() == summary


def test_the_default_output_directory_is_docs_benchmarks() -> None:
    parser = argparse.ArgumentParser()
    options.add_arguments(parser)
    assert parser.parse_args([]).out == "docs/benchmarks"
