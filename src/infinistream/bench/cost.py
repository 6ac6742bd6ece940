"""The object-storage bill at S3 Standard request prices (storage/prices.py, which the
agent's web console uses too), and the PUT rates the benchmark expects."""

from __future__ import annotations

from infinistream.storage.prices import (
    DELETE_PRICE,
    GET_PRICE,
    LIST_PRICE,
    PRICES_TEXT,
    PUT_PRICE,
    SECONDS_PER_MONTH,
    monthly_request_bill,
)

__all__ = [
    "DELETE_PRICE",
    "GET_PRICE",
    "LIST_PRICE",
    "PRICES_TEXT",
    "PUT_PRICE",
    "SECONDS_PER_MONTH",
    "budget_puts_per_second",
    "expected_puts_per_second",
    "monthly_request_bill",
]


def expected_puts_per_second(linger_seconds: float) -> float:
    """One object per flush per agent while traffic stays under batch_bytes per linger."""
    return 1.0 / linger_seconds


def budget_puts_per_second(
    publish_rate: float,
    payload: int,
    put_interval: float,
    batch_bytes: int,
    burst: int,
    seconds: float,
) -> float:
    """The most PUTs a second a steady publisher can cause in a run of `seconds` under a PUT
    budget: one object per publish at most; the burst plus one per `put_interval`, plus the
    batches that fill `batch_bytes`, which go at once whatever the budget (they spend what is
    left of it, so in practice the two overlap)."""
    messages = publish_rate * seconds
    budgeted = burst + seconds / put_interval
    full = messages * payload / batch_bytes
    return min(messages, budgeted + full) / seconds
