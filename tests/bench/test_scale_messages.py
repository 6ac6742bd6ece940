"""The scale benchmark's long-stream workload on a small stream: its caches' budgets stated and
reached before the RSS it compares, each step's store kept, and a kept store read cold again."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

MB = 2**20


def bench(work: Path, out: Path, *args: str, reads: int = 300) -> list[dict[str, Any]]:
    argv = [sys.executable, "-m", "infinistream", "bench", "--scale", "messages", *args]
    argv += ["--scale-index-cache", "1MB", "--scale-section-cache", "4MB"]
    argv += ["--scale-fill-reads", str(reads), "--work-dir", str(work), "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    last = (out / "scale.json").read_text().splitlines()[-1]
    rows: list[dict[str, Any]] = json.loads(last)["rows"]
    return rows


def test_the_caches_are_at_their_budgets_and_the_zone_cache_holds_no_second_copy(
    tmp_path: Path,
) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    steps = ("--scale-messages", "20000,200000", "--scale-fill", "50000", "--scale-keep-steps")
    rows = bench(work, out, *steps, reads=1000)
    assert [r["messages"] for r in rows] == [20000, 200000]
    # Filled: 200,000 16 B messages hold about 14 MB of records and directories, over three times
    # the section budget, and 1,000 gets reach more than the budget of them however the wire
    # step's flushes cut its sections (the fill copies their size). The cache keeps whole sections,
    # least recently used out first, so it holds more than its budget less its largest section:
    # at most the wire step's 20,000 records, 1.4 MB.
    assert rows[1]["section_cache_mb"] >= 2.5
    for row in rows:
        assert row["fill_reads"] == 1000
        assert 0 < row["section_cache_mb"] <= 4.0
        assert 0 < row["index_cache_mb"] <= 1.0
        assert 0 < row["pack_index_mb"] <= 2.0  # the local store's pack index, within its default
        assert row["zone_memory_mb"] == 0  # the agent's own reads are not kept twice
        assert row["full_rss_mb"] > 0
    kept = work / "messages" / "20000-store"
    assert (kept / "meta.db").exists()
    assert not (work / "messages" / "60000-store").exists()  # the last step's is the store
    (again,) = bench(tmp_path / "cold", out, "--scale-cold-store", str(kept))
    assert again["messages"] == 20000 and again["store"] == str(kept)
    assert again["cold_get_p50_ms"] > 0 and again["zone_memory_mb"] == 0
    assert again["cold_get_cpu_ms"] > 0  # the agent's CPU for one cold get
    # A get in each of as many sections, up to 200, each read first by its get.
    assert again["own_section_gets"] == min(200, rows[0]["index_keys"])
    assert again["own_section_get_p50_ms"] > 0
    # A copy of the kept store compacted, then read cold: fewer, larger sections.
    copy = tmp_path / "compacted-store"
    shutil.copytree(kept, copy)
    (compacted,) = bench(
        tmp_path / "compact", out, "--scale-cold-store", str(copy), "--scale-compact"
    )
    assert compacted["compacted"] is True and compacted["compaction_s"] > 0
    assert compacted["messages"] == 20000 and compacted["cold_get_p50_ms"] > 0
    assert compacted["index_bytes_per_msg"] < again["index_bytes_per_msg"]
    assert 0 < compacted["own_section_gets"] <= again["own_section_gets"]


def test_an_etcd_step_is_kept_and_read_cold_again_from_etcd_started_on_its_copy(
    tmp_path: Path,
) -> None:
    work, out = tmp_path / "work", tmp_path / "out"
    steps = ("--scale-messages", "20000,40000", "--scale-fill", "40000", "--scale-keep-steps")
    rows = bench(work, out, "--scale-metadata", "etcd", *steps)
    assert [r["messages"] for r in rows] == [20000, 40000]
    kept = work / "messages" / "20000-store"
    # The step's objects and etcd's data, side by side: etcd starts on a copy of the data.
    assert (kept / "objects").is_dir() and (kept / "etcd-m0" / "member").is_dir()
    for store, messages in ((kept, 20000), (work / "messages", 40000)):
        (again,) = bench(tmp_path / f"cold-{messages}", out, "--scale-cold-store", str(store))
        assert again["messages"] == messages and again["etcd_db_mb"] > 0
        assert again["index_bytes_per_msg"] == rows[messages // 20000 - 1]["index_bytes_per_msg"]
        assert again["cold_get_etcd_cpu_ms"] >= 0  # etcd's CPU for one cold get, counted
