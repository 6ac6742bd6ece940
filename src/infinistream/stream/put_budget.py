"""How many object PUTs a write buffer may make: a token bucket, a budget not a delay.

Object stores that bill per request (S3: $0.005 per 1,000 PUTs) make every flush cost money,
so an agent spends PUTs from a budget: `rate` per second on average, with a small `burst` so a
lone publish on an idle agent goes out at once. While a flush is in flight the next batch
grows by itself (group commit); the budget only decides how soon an empty pipe may flush.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class PutBudget:
    def __init__(
        self, rate: float, burst: int = 1, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0:
            raise ValueError("a PUT budget needs a positive rate")
        if burst < 1:
            raise ValueError("a PUT budget needs a burst of at least 1")
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now

    def take(self) -> float:
        """Spend one PUT now and return 0.0, or (spending nothing) the seconds until one is
        available."""
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rate

    def spend(self) -> None:
        """Account for a PUT that does not wait for the budget (a full batch): it uses what
        is there, so the average stays near the rate when full and timed flushes mix."""
        self._refill()
        self._tokens = max(0.0, self._tokens - 1.0)
