"""A short in-memory history of the agent's figures, for the web console's plots.

A ring buffer: every `interval` seconds the sampler given at construction is asked for the
figures of the moment (gauges, such as connections or consumer lag, and counters, which only
grow, such as PUTs issued), and the oldest sample goes once `size` are kept. Counters are
turned into rates per second between consecutive samples. Nothing is written anywhere: an
agent holds nothing that cannot be rebuilt, and a restarted agent starts a new history.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 2.0
# Ten minutes at the default interval.
DEFAULT_SIZE = 300
# The pause after a sample is at least this many times as long as the sample took.
SAMPLE_SHARE_INVERSE = 20


@dataclass(frozen=True, slots=True)
class Sample:
    at: float
    gauges: dict[str, float]
    counters: dict[str, float]


# What a sampler answers: (gauges, counters).
Sampler = Callable[[], Awaitable[tuple[dict[str, float], dict[str, float]]]]


class History:
    def __init__(
        self, sampler: Sampler, *, interval: float = DEFAULT_INTERVAL, size: int = DEFAULT_SIZE
    ) -> None:
        self.sampler = sampler
        self.interval = interval
        self.samples: deque[Sample] = deque(maxlen=size)

    async def sample(self) -> None:
        gauges, counters = await self.sampler()
        self.samples.append(Sample(time.time(), gauges, counters))

    async def run(self) -> None:
        """Sample until cancelled; a failed sample (a store down) leaves a gap, not a stop.

        A sample reads every stream and consumer; on an agent with thousands of them that
        takes a while, so the pause after one is at least SAMPLE_SHARE_INVERSE times as long
        as it took: the history never costs more than 1/SAMPLE_SHARE_INVERSE of a core.
        """
        while True:
            started = time.monotonic()
            try:
                await self.sample()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("history sample failed: %s", exc)
            took = time.monotonic() - started
            await asyncio.sleep(max(self.interval, took * SAMPLE_SHARE_INVERSE))

    def series(self) -> dict[str, Any]:
        """The samples as columns: times, each gauge, and each counter's rate per second (the
        first sample has no rate; a counter that went down, as after a restart, counts 0)."""
        samples = list(self.samples)
        gauges = sorted({k for s in samples for k in s.gauges})
        counters = sorted({k for s in samples for k in s.counters})
        rates: dict[str, list[float | None]] = {k: [None] for k in counters} if samples else {}
        for before, after in itertools.pairwise(samples):
            elapsed = after.at - before.at
            for k in counters:
                if k in before.counters and k in after.counters and elapsed > 0:
                    delta = max(after.counters[k] - before.counters[k], 0.0)
                    rates[k].append(delta / elapsed)
                else:
                    rates[k].append(None)
        return {
            "interval": self.interval,
            "t": [s.at for s in samples],
            "gauges": {k: [s.gauges.get(k) for s in samples] for k in gauges},
            "rates": rates,
            "totals": dict(samples[-1].counters) if samples else {},
        }
