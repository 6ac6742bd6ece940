"""The zone cache's benchmark section: its table, and its place below the kept marker of the
results page, replaced when run again and kept when the full benchmark is rerun."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infinistream_bench import cache_workloads, report


def results(gets: int) -> dict[str, Any]:
    zone = {
        "zone": "a",
        "agents": 2,
        "messages": 16000,
        "read_mb": 16.0,
        "gets": gets,
        "gets_per_mb_read": gets / 16.0,
        "peer_reads": 700,
        "fallbacks": 0,
        "peer_failures": 0,
        "msgs_per_s": 5000.0,
        "read_errors": 0,
    }
    return {
        "streams": 1000,
        "payload": 1024,
        "duration": 8.0,
        "linger_ms": 250,
        "results": [
            {
                "rate": 2000,
                "messages": 16000,
                "written_mb": 16.0,
                "objects": 32,
                "mb_per_object": 0.5,
                "written_mb_per_s": 2.0,
                "pools": [{"pool": "2 agents, one zone", "agents": 2, "zones": [zone]}],
            }
        ],
    }


def test_the_table_has_a_row_per_zone_under_each_rate() -> None:
    text = cache_workloads.table(results(32)).markdown()
    assert "2,000 msg/s x 1,024 B: 32 objects, 16.0 MB" in text
    row = next(line for line in text.splitlines() if line.startswith("| 2 agents, one zone"))
    assert "| a (2 agents) |" in row and "| 32 | 2.00 |" in row


def test_the_section_replaces_its_older_self_and_keeps_the_rest(tmp_path: Path) -> None:
    md = tmp_path / report.MD_NAME
    md.write_text("# Benchmarks\n\ngenerated\n")
    title = cache_workloads.TITLE
    report.keep_section(md, title, cache_workloads.markdown(results(32)))
    report.keep_section(md, "Other tool", "## Other tool\n\nkept\n")
    report.keep_section(md, title, cache_workloads.markdown(results(64)))
    text = md.read_text()
    assert text.startswith("# Benchmarks\n\ngenerated\n")
    assert text.count(report.KEPT_MARKER) == 1 and text.count(f"## {title}") == 1
    assert "| 64 | 4.00 |" in text and "| 32 | 2.00 |" not in text
    assert "## Other tool\n\nkept\n" in text
