"""The console's history: a ring buffer of samples, with counters turned into rates, and the
bill worked out from it."""

from __future__ import annotations

import asyncio

from infinistream.server.monitoring.console.history import History, Sample
from infinistream.server.monitoring.console.overview import cost
from infinistream.settings import Settings


def _history(*samples: tuple[float, dict[str, float], dict[str, float]]) -> History:
    async def never() -> tuple[dict[str, float], dict[str, float]]:
        raise AssertionError("not sampled in this test")

    history = History(never, size=3)
    for at, gauges, counters in samples:
        history.samples.append(Sample(at, gauges, counters))
    return history


def test_series_has_rates_and_keeps_the_last_samples() -> None:
    h = _history(
        (10.0, {"lag": 1}, {"puts": 0}),
        (12.0, {"lag": 5}, {"puts": 10}),
        (14.0, {"lag": 2}, {"puts": 30}),
        (16.0, {"lag": 0}, {"puts": 4}),  # a counter that went down (a restart): rate 0
    )
    series = h.series()
    assert series["t"] == [12.0, 14.0, 16.0]
    assert series["gauges"]["lag"] == [5, 2, 0]
    assert series["rates"]["puts"] == [None, 10.0, 0.0]
    assert series["totals"] == {"puts": 4}


def test_empty_history() -> None:
    assert _history().series() == {
        "interval": 2.0,
        "t": [],
        "gauges": {},
        "rates": {},
        "totals": {},
    }


async def test_run_samples_and_survives_a_failing_sample() -> None:
    calls = 0

    async def flaky() -> tuple[dict[str, float], dict[str, float]]:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError("metadata unreachable")
        return {"n": float(calls)}, {}

    history = History(flaky, interval=0.01)
    task = asyncio.create_task(history.run())
    while calls < 4:
        await asyncio.sleep(0.01)
    task.cancel()
    values = [s.gauges["n"] for s in history.samples]
    assert values[:2] == [1.0, 3.0]


def test_cost_at_s3_prices() -> None:
    h = _history(
        (0.0, {}, {"puts": 0, "gets": 0}),
        (100.0, {}, {"puts": 400, "gets": 1000}),
    )
    h.samples[-1].gauges["bytes"] = 2e9
    bill = cost(h, Settings(objects="s3://bucket/prefix"))
    assert bill["billed"] is True
    # 400 PUTs at $0.005/1000 and 1000 GETs at $0.0004/1000.
    assert abs(bill["so_far"] - (400 * 0.005 + 1000 * 0.0004) / 1000) < 1e-12
    # 4 PUT/s and 10 GET/s for 30 days.
    assert abs(bill["monthly"] - (4 * 0.005 + 10 * 0.0004) / 1000 * 30 * 24 * 3600) < 1e-6
    assert abs(bill["storage_monthly"] - 2 * 0.023) < 1e-12  # 2 GB at $0.023 per GB-month
    assert cost(h, Settings())["billed"] is False
