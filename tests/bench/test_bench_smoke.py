"""`infinistream bench --quick` end to end, into a temporary directory.

Real nats-server processes (lazy fsync, sync always, core-only sink) and real agents; the JSON
must have every workload with positive figures for every system it measures, no publish
errors, and every acked publish stored.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

JETSTREAM = ("nats_lazy", "nats_always", "infinistream")


def _positive(result: dict[str, Any], *keys: str) -> None:
    for key in keys:
        value = result[key]
        assert isinstance(value, int | float) and value > 0, (key, value, result)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("bench")
    out = tmp / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "infinistream",
            "bench",
            "--quick",
            "--out",
            str(out),
            "--work-dir",
            str(tmp / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stderr[-8000:]
    return out, proc.stdout


@pytest.fixture(scope="module")
def results(quick_run: tuple[Path, str]) -> dict[str, Any]:
    out, _ = quick_run
    data: dict[str, Any] = json.loads((out / "benchmarks.json").read_text())
    return data


@pytest.mark.timeout(180)
def test_machine_and_settings_are_recorded(results: dict[str, Any]) -> None:
    m = results["machine"]
    assert m["cores"] > 0 and m["ram_gib"] > 0
    for key in ("cpu_model", "kernel", "python", "nats_server", "date"):
        assert m[key] and m[key] != "unknown", key
    assert results["profile"]["name"] == "quick"
    # The embedded default: a PUT budget of one per millisecond on a local directory.
    assert results["systems"]["infinistream"]["linger_ms"] == 1
    assert "sync_interval: always" in results["systems"]["nats_always"]["config"]
    assert "sync_interval" not in results["systems"]["nats_lazy"]["config"]
    assert "jetstream" not in results["systems"]["sink"]["config"]


@pytest.mark.timeout(180)
def test_publish_throughput_has_every_cell_and_system(results: dict[str, Any]) -> None:
    cells = results["workloads"]["publish_throughput"]
    assert {(c["connections"], c["payload"]) for c in cells} == {
        (1, 128),
        (8, 128),
        (1, 4096),
        (8, 4096),
    }
    for cell in cells:
        res = cell["results"]
        assert set(res) == {"sink", *JETSTREAM}
        for key, r in res.items():
            _positive(r, "msgs_per_s", "mb_per_s", "acked", "cpu_s_per_million")
            assert r["errors"] == 0, (key, r["first_error"])
            assert r["acked"] == r["sent"], key
            if key != "sink":
                assert r["stored"] == r["acked"], (key, r)


@pytest.mark.timeout(180)
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


@pytest.mark.timeout(180)
def test_fetch_reads_everything(results: dict[str, Any]) -> None:
    f = results["workloads"]["fetch"]
    assert set(f["results"]) == set(JETSTREAM)
    for r in f["results"].values():
        _positive(r, "msgs_per_s", "mb_per_s", "acks_settled_s")
        assert r["messages"] == f["messages"] and r["errors"] == []


@pytest.mark.timeout(180)
def test_cost_model(results: dict[str, Any]) -> None:
    c = results["workloads"]["cost"]
    assert "$0.005 per 1,000" in c["prices"] and "$0.0004 per 1,000" in c["prices"]
    assert [r["streams"] for r in c["results"]] == [1, 10, 100]
    for r in c["results"]:
        _positive(r, "messages", "puts_per_mb_written", "gets_per_mb_read")
        assert r["read_errors"] == []
        _positive(r, "monthly_write_usd", "monthly_read_usd")
        _positive(r["per_s"], "puts")
        # One object per flush, however many streams: about 1000 / linger_ms PUTs a second.
        assert r["per_s"]["puts"] <= 2 * c["expected_puts_per_s"]


@pytest.mark.timeout(180)
def test_scale_out(results: dict[str, Any]) -> None:
    s = results["workloads"]["scale_out"]
    assert set(s["results"]) == {*JETSTREAM, "infinistream_x2"}
    for r in s["results"].values():
        _positive(r, "msgs_per_s", "cpu_s_per_million")
        assert r["errors"] == 0


@pytest.mark.timeout(180)
def test_no_server_failed(results: dict[str, Any]) -> None:
    assert results["problems"]["workloads"] == []
    for key, lines in results["problems"].items():
        bad = [x for x in lines if "[ERR]" in x or "[FTL]" in x or "killed" in x or "exited" in x]
        assert not bad, (key, bad[:5])


@pytest.mark.timeout(180)
def test_outputs_written(quick_run: tuple[Path, str]) -> None:
    out, stdout = quick_run
    assert "load-gen ceiling" in stdout and "Load generator ceiling" in stdout
    md = (out / "benchmarks.md").read_text()
    assert "| Metric | nats-server lazy fsync | nats-server sync always | InfiniStream |" in md
    assert "benchmarks-latency.png" in md
    assert (out / "benchmarks-latency.png").read_bytes().startswith(b"\x89PNG")
