"""The section `infinistream bench --tables` writes: the size rows, and the lag when measured."""

from __future__ import annotations

import argparse

from infinistream_bench.tables import LAG_TITLE, TITLE, add_arguments, lag_markdown, markdown

SIZE_ROW = {
    "messages": 1_000_000,
    "on": "local (2 cores)",
    "rows": 1_000_000,
    "parquet_bytes": 61_000_000.0,
    "rows_per_s_per_core": 41_000.0,
    "parquet_bytes_per_msg": 61.0,
}
LAG = {"interval_s": 300.0, "cycles": 1, "rate": 200.0, "messages": 60_000}


def args_of(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["--tables", *argv])


def record(lag: dict[str, float] | None) -> dict[str, object]:
    return {"at": "2026-11-27T12:00:00Z", "cpus": 2, "load_average": (3.0, 2.0, 1.0),
            "sizes": [SIZE_ROW], "lag": lag}  # fmt: skip


def test_the_sizes_section_gives_a_row_per_size_and_place() -> None:
    args = args_of("--tables-sizes", "1000000", "--tables-cycles", "0")
    text = markdown(record(None), args)
    assert text.startswith(f"## {TITLE}\n")
    assert "--tables-sizes 1000000`" in text
    assert "| 1,000,000 | local (2 cores) | 1,000,000 | 61,000,000 | 41,000 | 61 |" in text
    assert "Lag" not in text


def test_the_lag_run_gives_its_percentiles() -> None:
    lag = {**LAG, "p50_s": 171.2, "p90_s": 290.0, "max_s": 330.5}
    text = lag_markdown(record(lag))
    assert text.startswith(f"## {LAG_TITLE}\n")
    assert "`infinistream bench --tables --tables-interval 300 --tables-cycles 1`" in text
    assert "every 300 s while 200 messages/s are published for 1 intervals" in text
    assert "p50 171.2 s, p90 290.0 s, max 330.5 s over 60,000 messages" in text


def test_the_sizes_section_says_which_streams_were_filled() -> None:
    args = args_of("--tables-sizes", "10000000", "--tables-fill", "10000000")
    text = markdown(record(None), args)
    assert "--tables-sizes 10000000 --tables-fill 10000000`" in text
    assert "written through the write path by bench/fill.py from 10,000,000 on" in text
