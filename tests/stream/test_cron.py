"""Cron patterns: fields, names, ranges, lists and steps as nats-server's cron.go reads them, and
the next time each fires, worked out by hand."""

from __future__ import annotations

import calendar
import zoneinfo

import pytest

from infinistream.stream.cron import Cron, InvalidCron

S = 1_000_000_000


def ns(text: str) -> int:
    """Nanoseconds of a UTC time written YYYY-MM-DDTHH:MM:SS."""
    date, clock = text.split("T")
    parts = [int(p) for p in date.split("-")] + [int(p) for p in clock.split(":")]
    return calendar.timegm(tuple(parts)) * S  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("pattern", "after", "expected"),
    [
        ("* * * * * *", "2026-11-25T02:40:00", "2026-11-25T02:40:01"),
        ("*/15 * * * * *", "2026-11-25T12:00:07", "2026-11-25T12:00:15"),
        ("5/20 * * * * *", "2026-11-25T12:00:26", "2026-11-25T12:00:45"),
        ("0 0 0 1 1 *", "2026-11-25T02:40:00", "2027-01-01T00:00:00"),
        ("0 0 * * * *", "2026-11-25T02:40:00", "2026-11-25T03:00:00"),
        # The 1st and 15th, and every Friday (both day fields restricted: either matches).
        ("0 30 4 1,15 * 5", "2026-11-25T05:00:00", "2026-11-27T04:30:00"),
        ("0 30 4 1,15 * 5", "2026-11-27T05:00:00", "2026-12-01T04:30:00"),
        # With a star in one day field, both must match.
        ("0 0 9 * * mon-fri", "2026-11-27T10:00:00", "2026-11-30T09:00:00"),
        ("0 0 0 1 JAN-mar *", "2026-04-01T00:00:00", "2027-01-01T00:00:00"),
        ("0 0 0 29 2 *", "2026-03-01T00:00:00", "2028-02-29T00:00:00"),
        ("0 0 12 ? * sun", "2026-11-25T00:00:00", "2026-11-29T12:00:00"),
        ("0 59 23 31 12 *", "2026-12-31T23:59:00", "2027-12-31T23:59:00"),
    ],
)
def test_next_time(pattern: str, after: str, expected: str) -> None:
    assert Cron.parse(pattern).next_after(ns(after)) == ns(expected)


def test_a_fraction_of_a_second_counts_as_the_second() -> None:
    cron = Cron.parse("* * * * * *")
    assert cron.next_after(ns("2026-11-25T02:40:00") + S // 2) == ns("2026-11-25T02:40:01")


def test_in_a_time_zone() -> None:
    # 09:00 in Tokyo is midnight UTC; just after it, the next is a day later.
    cron = Cron.parse("0 0 9 * * *")
    tokyo = zoneinfo.ZoneInfo("Asia/Tokyo")
    assert cron.next_after(ns("2026-11-25T00:00:00"), tokyo) == ns("2026-11-26T00:00:00")
    assert cron.next_after(ns("2026-11-24T23:00:00"), tokyo) == ns("2026-11-25T00:00:00")


@pytest.mark.parametrize(
    "pattern",
    [
        "* * * * *",
        "* * * * * * *",
        "60 * * * * *",
        "* * 24 * * *",
        "* * * 0 * *",
        "* * * * 13 *",
        "* * * * * 7",
        "5-1 * * * * *",
        "*/0 * * * * *",
        "1-2-3 * * * * *",
        "1/2/3 * * * * *",
        "a * * * * *",
        "1_0 * * * * *",
        "-1 * * * * *",
        "* * * * * funday",
    ],
)
def test_refused(pattern: str) -> None:
    with pytest.raises(InvalidCron):
        Cron.parse(pattern)


def test_a_date_that_never_comes_is_refused() -> None:
    with pytest.raises(InvalidCron):
        Cron.parse("0 0 0 30 2 *").next_after(ns("2026-01-01T00:00:00"))
