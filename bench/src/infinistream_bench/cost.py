"""The object-storage bill at S3 Standard request prices.

Only requests are priced here: storage (GB-month) and transfer depend on retention and on
where readers are, not on the agent. DELETE is free on S3; HEAD is priced as GET.
"""

from __future__ import annotations

# The prices live with storage, where the agent's /metrics estimate its bill from them too.
from infinistream.storage.pricing import (
    DELETE_PRICE,
    GET_PRICE,
    LIST_PRICE,
    PRICES_TEXT,
    PUT_PRICE,
    SECONDS_PER_MONTH,
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


def monthly_request_bill(per_second: dict[str, float]) -> float:
    """Dollars per month for a steady rate of requests (keys: puts, gets, heads, lists,
    deletes; missing keys count as zero)."""
    rate = (
        per_second.get("puts", 0.0) * PUT_PRICE
        + per_second.get("lists", 0.0) * LIST_PRICE
        + (per_second.get("gets", 0.0) + per_second.get("heads", 0.0)) * GET_PRICE
        + per_second.get("deletes", 0.0) * DELETE_PRICE
    )
    return rate * SECONDS_PER_MONTH


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
