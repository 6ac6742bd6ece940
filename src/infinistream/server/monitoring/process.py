"""The agent process's CPU and memory as /varz reports them (nats-server's pse package).

`cpu` is the percentage of one core used since the previous sample (at least SAMPLE_SECONDS
apart; the first covers the time since the sampler was made); `mem` the resident set now.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass, field

SAMPLE_SECONDS = 1.0


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def resident_bytes() -> int:
    """The current resident set size (Linux /proc; elsewhere the peak, as getrusage has)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak * 1024  # kilobytes on Linux


@dataclass
class CpuSampler:
    started: float = field(default_factory=time.monotonic)
    _at: float = field(default=0.0, init=False)
    _cpu: float = field(default=0.0, init=False)
    _percent: float = field(default=0.0, init=False)

    _sampled: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._at, self._cpu = self.started, _cpu_seconds()

    def percent(self) -> float:
        now, cpu = time.monotonic(), _cpu_seconds()
        elapsed = now - self._at
        if elapsed >= SAMPLE_SECONDS or (not self._sampled and elapsed > 0):
            self._percent = round(100.0 * (cpu - self._cpu) / elapsed, 2)
            self._at, self._cpu, self._sampled = now, cpu, True
        return self._percent
