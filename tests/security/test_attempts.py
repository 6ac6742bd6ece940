"""Failed logins per address: a burst, then one a second, the rest waiting their turn."""

from __future__ import annotations

from infinistream.security.attempts import FailedAttempts


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_address_fails_a_burst_at_once_then_waits_its_turn() -> None:
    clock = Clock()
    attempts = FailedAttempts(burst=3, per_second=2.0, clock=clock)
    for _ in range(3):
        assert attempts.wait("10.0.0.1") == 0.0
        attempts.done_waiting("10.0.0.1")
        attempts.failed("10.0.0.1")
    assert attempts.wait("10.0.0.1") == 0.5  # one token back after half a second
    # Another check from the same address while that one waits: behind it.
    assert attempts.wait("10.0.0.1") == 1.0
    # Other addresses are not held up.
    assert attempts.wait("10.0.0.2") == 0.0
    clock.now += 0.5
    attempts.done_waiting("10.0.0.1")
    attempts.failed("10.0.0.1")
    attempts.done_waiting("10.0.0.1")
    clock.now += 10
    assert attempts.wait("10.0.0.1") == 0.0


def test_successes_spend_nothing() -> None:
    attempts = FailedAttempts(burst=1, per_second=1.0, clock=Clock())
    for _ in range(10):
        assert attempts.wait("a") == 0.0
        attempts.done_waiting("a")
    assert len(attempts) == 0


def test_only_so_many_addresses_are_remembered() -> None:
    attempts = FailedAttempts(burst=1, per_second=1.0, max_addresses=100, clock=Clock())
    for n in range(100_000):
        attempts.failed(f"10.{n}")
    assert len(attempts) == 100
    assert attempts.wait("10.99999") == 1.0  # the most recent are kept
    assert attempts.wait("10.0") == 0.0
