"""The PUT budget: a token bucket that says how soon the next object PUT may go."""

from __future__ import annotations

import pytest

from infinistream.stream.put_budget import PutBudget


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_goes_at_once_then_the_rate_paces_puts() -> None:
    clock = Clock()
    budget = PutBudget(rate=4.0, burst=2, clock=clock)
    assert budget.take() == 0.0
    assert budget.take() == 0.0
    # Empty: the next PUT is a quarter second away, and asking spends nothing.
    assert budget.take() == pytest.approx(0.25)
    assert budget.take() == pytest.approx(0.25)
    clock.now += 0.1
    assert budget.take() == pytest.approx(0.15)
    clock.now += 0.15
    assert budget.take() == 0.0


def test_a_quiet_spell_refills_no_more_than_the_burst() -> None:
    clock = Clock()
    budget = PutBudget(rate=10.0, burst=3, clock=clock)
    for _ in range(3):
        assert budget.take() == 0.0
    clock.now += 3600
    assert [budget.take() for _ in range(4)] == [0.0, 0.0, 0.0, pytest.approx(0.1)]


def test_puts_that_do_not_wait_still_use_the_budget() -> None:
    clock = Clock()
    budget = PutBudget(rate=2.0, burst=2, clock=clock)
    budget.spend()
    budget.spend()
    budget.spend()  # over budget: it never goes below empty, so nothing is owed later
    assert budget.take() == pytest.approx(0.5)
    clock.now += 0.5
    assert budget.take() == 0.0


def test_a_budget_needs_a_rate_and_a_burst() -> None:
    with pytest.raises(ValueError):
        PutBudget(rate=0)
    with pytest.raises(ValueError):
        PutBudget(rate=1, burst=0)
