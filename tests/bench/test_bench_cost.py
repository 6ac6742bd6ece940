"""The S3 bill and a PUT budget's ceiling, worked out by hand."""

from __future__ import annotations

import pytest

from infinistream_bench.cost import budget_puts_per_second, monthly_request_bill

MiB = 1024 * 1024


def test_monthly_bill_at_s3_prices() -> None:
    # 4 PUT/s (the S3 budget, 250 ms) for 30 days: 10,368,000 PUTs at $0.005 per 1,000.
    assert monthly_request_bill({"puts": 4}) == pytest.approx(51.84)
    # 1,000 PUT/s (one per millisecond): $12,960; GETs at $0.0004 per 1,000, LIST as PUT.
    assert monthly_request_bill({"puts": 1000}) == pytest.approx(12_960)
    assert monthly_request_bill({"gets": 100, "heads": 100}) == pytest.approx(207.36)
    assert monthly_request_bill({"lists": 1, "deletes": 1000}) == pytest.approx(12.96)


def test_a_slow_publisher_puts_at_most_once_per_publish() -> None:
    assert budget_puts_per_second(10, 1024, 0.001, 4 * MiB, 4, 10.0) == pytest.approx(10)


def test_a_budget_holds_a_fast_publisher_to_its_rate_plus_the_burst() -> None:
    # 1,000 msg/s of 1 KiB for 10 s under 250 ms: 4 + 40 PUTs, plus 2.4 full batches at most.
    assert budget_puts_per_second(1000, 1024, 0.25, 4 * MiB, 4, 10.0) == pytest.approx(
        (4 + 40 + 10_000 * 1024 / (4 * MiB)) / 10
    )


def test_full_batches_go_whatever_the_budget() -> None:
    # 100 MiB/s: 25 full batches a second, far above 4 a second.
    ceiling = budget_puts_per_second(100 * 1024, 1024, 0.25, 4 * MiB, 4, 10.0)
    assert ceiling == pytest.approx(25 + 4 + 0.4)
