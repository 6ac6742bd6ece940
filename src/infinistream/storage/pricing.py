"""Object storage prices (S3 Standard, us-east-1): what the benchmark's bill and the agent's
/metrics estimate from request counts and bytes stored.

DELETE is free on S3; HEAD is priced as GET; LIST as PUT. Storage is priced per GB-month.
"""

from __future__ import annotations

from typing import Final

# US dollars per request.
PUT_PRICE: Final = 0.005 / 1000  # PUT, COPY, POST, LIST
LIST_PRICE: Final = 0.005 / 1000
GET_PRICE: Final = 0.0004 / 1000  # GET, SELECT, HEAD
DELETE_PRICE: Final = 0.0
# US dollars per GB (10^9 bytes) stored for a month (the first 50 TB).
STORAGE_PRICE_GB_MONTH: Final = 0.023
SECONDS_PER_MONTH: Final = 30 * 24 * 3600

PRICES_TEXT: Final = (
    "S3 Standard request prices: PUT/COPY/POST/LIST $0.005 per 1,000; GET/HEAD $0.0004 per "
    "1,000; DELETE free; a month is 30 days"
)


def request_cost(*, puts: int, gets: int, heads: int, lists: int, deletes: int) -> float:
    """Dollars the requests cost."""
    return (
        puts * PUT_PRICE + lists * LIST_PRICE + (gets + heads) * GET_PRICE + deletes * DELETE_PRICE
    )


def monthly_storage_cost(stored_bytes: int) -> float:
    """Dollars a month to keep `stored_bytes`."""
    return stored_bytes / 1e9 * STORAGE_PRICE_GB_MONTH
