"""The object-storage bill at S3 Standard request prices (the benchmark's cost tables and the
web console's estimate).

Only requests are priced here: storage (GB-month) and transfer depend on retention and on
where readers are, not on the agent. DELETE is free on S3; HEAD is priced as GET.
"""

from __future__ import annotations

from typing import Final

# US dollars per request.
PUT_PRICE: Final = 0.005 / 1000  # PUT, COPY, POST, LIST
LIST_PRICE: Final = 0.005 / 1000
GET_PRICE: Final = 0.0004 / 1000  # GET, SELECT, HEAD
DELETE_PRICE: Final = 0.0
SECONDS_PER_MONTH: Final = 30 * 24 * 3600

PRICES_TEXT: Final = (
    "S3 Standard request prices: PUT/COPY/POST/LIST $0.005 per 1,000; GET/HEAD $0.0004 per "
    "1,000; DELETE free; a month is 30 days"
)


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
