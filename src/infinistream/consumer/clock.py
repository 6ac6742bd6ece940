"""Time as the consumer layer reads it, passed in so that tests can move it.

Wall-clock nanoseconds for what other agents read too (redelivery deadlines and activity times
in the shared consumer state, pauses); monotonic seconds for what is this agent's alone (idle
heartbeats, the rate limit).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Clock:
    wall_ns: Callable[[], int] = time.time_ns
    monotonic: Callable[[], float] = time.monotonic


SYSTEM_CLOCK = Clock()
