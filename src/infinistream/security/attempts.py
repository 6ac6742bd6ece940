"""Failed logins, counted per client address, to slow down whoever guesses passwords.

A bcrypt check costs a core tens or hundreds of milliseconds by design; a client that sends
wrong passwords as fast as it can would keep the agent's password threads busy for everyone.
Each address may fail `BURST` times at once, then once every `1 / PER_SECOND` seconds: a check
from an address over its budget waits for its turn (it is not refused, so a right password
from the same address still gets in, later). Only `MAX_ADDRESSES` addresses are remembered,
the least recently failed forgotten first.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = ["BURST", "MAX_ADDRESSES", "PER_SECOND", "FailedAttempts"]

BURST: Final = 5
PER_SECOND: Final = 1.0
MAX_ADDRESSES: Final = 10_000


@dataclass(slots=True)
class _Budget:
    tokens: float
    at: float


class FailedAttempts:
    """A token bucket of failures per address: `wait` says how long the next check from an
    address must wait, `failed` spends a token for a check that failed."""

    def __init__(
        self,
        *,
        burst: int = BURST,
        per_second: float = PER_SECOND,
        max_addresses: int = MAX_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.per_second = per_second
        self.max_addresses = max_addresses
        self._clock = clock
        self._budgets: OrderedDict[str, _Budget] = OrderedDict()
        # Checks waiting per address: each waits for the tokens of those before it too.
        self._waiting: dict[str, int] = {}

    def _tokens(self, address: str, now: float) -> float:
        budget = self._budgets.get(address)
        if budget is None:
            return float(self.burst)
        return min(float(self.burst), budget.tokens + (now - budget.at) * self.per_second)

    def wait(self, address: str) -> float:
        """Seconds before a check from `address` may run (0: at once); the caller waits
        that long, then calls `done_waiting`."""
        now = self._clock()
        ahead = self._waiting.get(address, 0)
        self._waiting[address] = ahead + 1
        missing = ahead + 1 - self._tokens(address, now)
        return max(0.0, missing / self.per_second)

    def done_waiting(self, address: str) -> None:
        left = self._waiting.get(address, 1) - 1
        if left > 0:
            self._waiting[address] = left
        else:
            self._waiting.pop(address, None)

    def failed(self, address: str) -> None:
        now = self._clock()
        tokens = self._tokens(address, now) - 1.0
        self._budgets[address] = _Budget(tokens, now)
        self._budgets.move_to_end(address)
        while len(self._budgets) > self.max_addresses:
            self._budgets.popitem(last=False)

    def __len__(self) -> int:
        return len(self._budgets)
