"""Six-field cron patterns (seconds, minutes, hours, day of month, month, day of week), as
nats-server's server/cron.go reads them (itself robfig/cron's): `*` or `?`, numbers, names of
months and days, ranges, lists and steps; a pattern restricting both day fields fires when
either matches. The next time is searched field by field, within five years.

Times are walked on the wall clock of the schedule's time zone; nats-server adds hours,
minutes and seconds as elapsed time instead, so the two can differ by an hour around a
daylight saving change (which ADR-51 advises against scheduling across).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from infinistream.jetstream.durations import SECOND_NS

_STAR = 1 << 63
_INT = re.compile(r"[+-]?[0-9]+\Z")
_MONTHS = {
    name: n
    for n, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}
_DAYS = {name: n for n, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}


class InvalidCron(ValueError):
    """A pattern cron.go refuses, or one that never fires within five years."""


@dataclass(frozen=True, slots=True)
class _Bounds:
    low: int
    high: int
    names: dict[str, int] | None = None


_SECONDS = _Bounds(0, 59)
_MINUTES = _Bounds(0, 59)
_HOURS = _Bounds(0, 23)
_DOM = _Bounds(1, 31)
_MONTH = _Bounds(1, 12, _MONTHS)
_DOW = _Bounds(0, 6, _DAYS)


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed pattern: per field, a bit per value it allows (and the star bit)."""

    second: int
    minute: int
    hour: int
    dom: int
    month: int
    dow: int

    @classmethod
    def parse(cls, pattern: str) -> Cron:
        fields = pattern.split()
        if len(fields) != 6:
            raise InvalidCron(f"pattern requires 6 fields, got {len(fields)}")
        bounds = (_SECONDS, _MINUTES, _HOURS, _DOM, _MONTH, _DOW)
        return cls(*(_field(f, b) for f, b in zip(fields, bounds, strict=True)))

    def next_after(self, ts: int, zone: tzinfo | None = None) -> int:
        """The first time after `ts` (ns) that the pattern matches, to the second."""
        loc = zone or UTC
        start = datetime.fromtimestamp(ts // SECOND_NS + 1, loc).replace(tzinfo=None)
        wall = self._next_wall(start)
        return int(wall.replace(tzinfo=loc).timestamp()) * SECOND_NS

    def _next_wall(self, t: datetime) -> datetime:
        year_limit = t.year + 5
        truncated = False
        while True:  # each pass is cron.go's WRAP
            if t.year > year_limit:
                raise InvalidCron("pattern exceeds maximum range")
            for unit in _UNITS:
                t, truncated, wrapped = unit.advance(self, t, truncated)
                if wrapped:
                    break
            else:
                return t

    def _day_matches(self, t: datetime) -> bool:
        dom_match = bool(self.dom & 1 << t.day)
        dow_match = bool(self.dow & 1 << (t.weekday() + 1) % 7)
        if self.dom & _STAR or self.dow & _STAR:
            return dom_match and dow_match
        return dom_match or dow_match


def _add_month(t: datetime) -> datetime:
    # Called on the first of a month only (the month loop truncates first), so no day overflows.
    return t.replace(year=t.year + 1, month=1) if t.month == 12 else t.replace(month=t.month + 1)


@dataclass(frozen=True, slots=True)
class _Unit:
    """One field of the search, as cron.go walks it: whether `t` matches, `t` with the
    smaller units zeroed, `t` one unit on, and whether that step wrapped into the next
    larger unit (the search then starts again from the months)."""

    matches: Callable[[Cron, datetime], bool]
    truncate: Callable[[datetime], datetime]
    step: Callable[[datetime], datetime]
    wrapped: Callable[[datetime], bool]

    def advance(self, cron: Cron, t: datetime, truncated: bool) -> tuple[datetime, bool, bool]:
        """`t` moved on to this unit's first match: (t, truncated, wrapped)."""
        while not self.matches(cron, t):
            if not truncated:
                # The first step of the whole search starts the unit from its beginning.
                truncated = True
                t = self.truncate(t)
            t = self.step(t)
            if self.wrapped(t):
                return t, truncated, True
        return t, truncated, False


# Largest first, as the search goes.
_UNITS = (
    _Unit(
        lambda c, t: bool(c.month & 1 << t.month),
        lambda t: t.replace(day=1, hour=0, minute=0, second=0),
        _add_month,
        lambda t: t.month == 1,
    ),
    _Unit(
        lambda c, t: c._day_matches(t),
        lambda t: t.replace(hour=0, minute=0, second=0),
        lambda t: t + timedelta(days=1),
        lambda t: t.day == 1,
    ),
    _Unit(
        lambda c, t: bool(c.hour & 1 << t.hour),
        lambda t: t.replace(minute=0, second=0),
        lambda t: t + timedelta(hours=1),
        lambda t: t.hour == 0,
    ),
    _Unit(
        lambda c, t: bool(c.minute & 1 << t.minute),
        lambda t: t.replace(second=0),
        lambda t: t + timedelta(minutes=1),
        lambda t: t.minute == 0,
    ),
    _Unit(
        lambda c, t: bool(c.second & 1 << t.second),
        lambda t: t,
        lambda t: t + timedelta(seconds=1),
        lambda t: t.second == 0,
    ),
)


def _field(text: str, bounds: _Bounds) -> int:
    bits = 0
    for expr in text.split(","):
        if expr:
            bits |= _range(expr, bounds)
    return bits


def _range(expr: str, bounds: _Bounds) -> int:
    """number | number "-" number [ "/" step ] | "*" [ "/" step ], as bits."""
    range_and_step = expr.split("/")
    low_and_high = range_and_step[0].split("-")
    extra = 0
    if low_and_high[0] in ("*", "?"):
        start, end, extra = bounds.low, bounds.high, _STAR
    else:
        start = _int_or_name(low_and_high[0], bounds.names)
        if len(low_and_high) == 1:
            end = start
        elif len(low_and_high) == 2:
            end = _int_or_name(low_and_high[1], bounds.names)
        else:
            raise InvalidCron(f"too many hyphens: {expr}")
    if len(range_and_step) == 1:
        step = 1
    elif len(range_and_step) == 2:
        step = _int(range_and_step[1])
        if len(low_and_high) == 1:
            end = bounds.high  # "N/step" means "N-max/step"
        if step > 1:
            extra = 0
    else:
        raise InvalidCron(f"too many slashes: {expr}")
    if start < bounds.low or end > bounds.high or start > end or step == 0:
        raise InvalidCron(f"invalid range: {expr}")
    bits = 0
    for value in range(start, end + 1, step):
        bits |= 1 << value
    return bits | extra


def _int_or_name(expr: str, names: dict[str, int] | None) -> int:
    if names is not None and expr.lower() in names:
        return names[expr.lower()]
    return _int(expr)


def _int(expr: str) -> int:
    # No field of a cron pattern is near 19 digits (Go's Atoi would overflow past them).
    if not _INT.match(expr) or len(expr) > 19:
        raise InvalidCron(f"failed to parse int from {expr}")
    value = int(expr)
    if value < 0:
        raise InvalidCron(f"negative number ({value}) not allowed: {expr}")
    return value
