"""The S3 mode's section of benchmarks.md: a row per budget and rate, the peers' figures."""

from __future__ import annotations

from infinistream_bench.s3_latency import PEERS, TITLE, markdown


def test_the_section_has_a_row_per_budget_and_rate_and_the_peers() -> None:
    def row(rate: int, p50: float) -> dict[str, object]:
        return {
            "rate": rate,
            "p50_ms": p50,
            "p99_ms": p50 * 2,
            "acked_fraction": 1.0,
            "per_s": {"puts": 4.0},
            "monthly_usd": 51.84,
        }

    budgets = [
        {
            "linger_ms": ms,
            "publish": {"results": [row(100, ms / 2), row(1000, ms)]},
            "e2e": {"p50_ms": ms * 1.5, "p99_ms": ms * 3},
            "mean_put_ms": 3.5,
        }
        for ms in (250, 50)
    ]
    results = {
        "machine": {
            "date": "2026-11-27",
            "cores": 2,
            "load_average_at_start": [1.0],
            "load_average_at_end": [2.0],
        },
        "peers": list(PEERS),
        "budgets": budgets,
    }
    text = markdown(results)
    assert text.startswith(f"## {TITLE}\n")
    row_250 = "| 250 ms | 100 msg/s | 125.0 | 250.0 | 100.0% | 4.00 | $51.84 | 375.0 | 750.0 |"
    assert row_250 in text
    assert "| 50 ms | 1,000 msg/s | 50.0 | 100.0 |" in text
    assert "| WarpStream, S3 Standard, 250 ms batch timeout (default), 25 ms linger | 250 |" in text
