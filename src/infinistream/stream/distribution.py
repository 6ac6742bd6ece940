"""A distribution of observed values in fixed buckets (a histogram), cheap to observe.

The write buffer keeps its batch sizes and commit latencies in these; monitoring exports them
as Prometheus histograms. Buckets are upper bounds; `counts[i]` holds the observations in
(bounds[i-1], bounds[i]], and the last count those above every bound.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

# Seconds, for latencies of object PUTs and metadata commits (1 ms .. 10 s).
LATENCY_BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Bytes of a batch object (1 KiB .. 64 MiB, by fours).
SIZE_BOUNDS = tuple(float(1024 * 4**i) for i in range(9))
# Messages in a batch (1 .. 100k).
COUNT_BOUNDS = (1.0, 10.0, 100.0, 1000.0, 10_000.0, 100_000.0)


@dataclass
class Distribution:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or below it), the last bound being infinity."""
        out, running = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out
