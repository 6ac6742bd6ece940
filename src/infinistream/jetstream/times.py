"""Go's time.Time as text, both ways, for the times nats-server reads and writes.

nats-server's JSON holds times as Go's time.Time marshals them: RFC 3339 with nanoseconds,
trailing zeros of the fraction left out, `Z` for UTC (`2024-05-01T12:00:00.5Z`), and Go's zero
time `0001-01-01T00:00:00Z` for a time that is not set. It reads them as time.Time unmarshals
them, which is time.Parse with the RFC 3339 layout: a little more than RFC 3339 (a one-digit
hour, a comma before the fraction, any number of fraction digits, offsets up to 24:60), with
Go's error texts for the rest. Times are nanoseconds since the Unix epoch here; the calendar
is computed directly (proleptic Gregorian, years 0 to 9999 as Go's parser takes them), not by
`datetime`, which has no year 0.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, tzinfo
from typing import Final

from infinistream.jetstream.durations import SECOND_NS

# What nats-server writes for a time that is not set: Go's zero time.Time.
ZERO_TIME: Final = "0001-01-01T00:00:00Z"
# The layout Go's errors name.
_LAYOUT: Final = "2006-01-02T15:04:05Z07:00"
_DAY: Final = 86_400
_DAYS_IN: Final = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_RFC3339: Final = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:Z|([+-])(\d\d):(\d\d))",
    re.ASCII,
)


def go_time(ns: int, zone: tzinfo | None = None) -> str:
    """Go's Time.Format(time.RFC3339Nano) of an instant, in UTC or in `zone` (with its offset
    at that instant: `Z` where it is zero), as time.Time's JSON has it."""
    seconds, fraction = divmod(ns, SECOND_NS)
    offset = 0
    if zone is not None:
        delta = datetime.fromtimestamp(seconds, UTC).astimezone(zone).utcoffset()
        offset = int(delta.total_seconds()) if delta is not None else 0
    days, clock = divmod(seconds + offset, _DAY)
    year, month, day = _civil(days)
    hour, minute, second = clock // 3600, clock // 60 % 60, clock % 60
    text = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
    if fraction:
        text += "." + f"{fraction:09d}".rstrip("0")
    if offset == 0:
        return text + "Z"
    # Go writes whole minutes of the offset, dropping any seconds.
    minutes = abs(offset) // 60
    sign = "-" if offset < 0 else "+"
    return f"{text}{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def go_time_or_zero(ns: int) -> str:
    """A time field that may be unset (0, or less): Go's zero time then, as nats-server writes
    an unset time.Time; else `go_time`."""
    return go_time(ns) if ns > 0 else ZERO_TIME


def parse_go_time(text: str) -> int:
    """Nanoseconds since the epoch of a time as time.Time's JSON decoding reads it (time.Parse
    with time.RFC3339); ValueError with Go's words if it is not one."""
    # As in Go, strict RFC 3339 first (the common case, fast), then the layout's parser, which
    # takes the same times and a little more, and words the errors.
    found = _RFC3339.fullmatch(text)
    if found is not None:
        ns = _strict(found)
        if ns is not None:
            return ns
    return _Parse(text).run()


def _strict(found: re.Match[str]) -> int | None:
    """The time a strict RFC 3339 match names (Go's parseRFC3339), None if a field is out of
    its range."""
    year, month, day, hour, minute, second = (int(g) for g in found.groups()[:6])
    if not 1 <= month <= 12 or not 1 <= day <= _days_in(month, year):
        return None
    if hour > 23 or minute > 59 or second > 59:
        return None
    fraction, sign, offset_hours, offset_minutes = found.groups()[6:]
    east = 0
    if sign is not None:
        if int(offset_hours) > 23 or int(offset_minutes) > 59:
            return None
        east = (int(offset_hours) * 60 + int(offset_minutes)) * 60
        east = -east if sign == "-" else east
    seconds = _days(year, month, day) * _DAY + hour * 3600 + minute * 60 + second - east
    return seconds * SECOND_NS + (int(fraction[:9].ljust(9, "0")) if fraction else 0)


class _Parse:
    """time.Parse(time.RFC3339, text), field by field in the layout's order."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.rest = text

    def fail(self, value: str, element: str) -> ValueError:
        return ValueError(
            f"parsing time {_quote(self.text)} as {_quote(_LAYOUT)}: "
            f"cannot parse {_quote(value)} as {_quote(element)}"
        )

    def out_of_range(self, what: str) -> ValueError:
        return ValueError(f"parsing time {_quote(self.text)}: {what} out of range")

    def literal(self, char: str) -> None:
        if not self.rest.startswith(char):
            raise self.fail(self.rest, char)
        self.rest = self.rest[1:]

    def number(self, element: str, *, fixed: bool = True) -> int:
        """Go's getnum: two digits, or one where `fixed` is off."""
        digits = _leading_digits(self.rest, 2)
        if not digits or (fixed and len(digits) < 2):
            raise self.fail(self.rest, element)
        self.rest = self.rest[len(digits) :]
        return int(digits)

    def run(self) -> int:
        year_text = self.rest[:4]
        if len(year_text) < 4 or not year_text.isascii() or not year_text.isdigit():
            raise self.fail(self.rest, "2006")
        year, self.rest = int(year_text), self.rest[4:]
        self.literal("-")
        month = self.number("01")
        if not 1 <= month <= 12:
            raise self.out_of_range("month")
        self.literal("-")
        day = self.number("02")
        self.literal("T")
        hour = self.number("15", fixed=False)
        if hour >= 24:
            raise self.out_of_range("hour")
        self.literal(":")
        minute = self.number("04")
        if minute >= 60:
            raise self.out_of_range("minute")
        self.literal(":")
        second = self.number("05")
        if second >= 60:
            raise self.out_of_range("second")
        nanos = self.fraction()
        offset = self.offset()
        if self.rest:
            raise ValueError(f"parsing time {_quote(self.text)}: extra text: {_quote(self.rest)}")
        if not 1 <= day <= _days_in(month, year):
            raise self.out_of_range("day")
        seconds = _days(year, month, day) * _DAY + hour * 3600 + minute * 60 + second - offset
        return seconds * SECOND_NS + nanos

    def fraction(self) -> int:
        """A fraction of a second after the seconds, which the layout has not: any number of
        digits after `.` or `,`, cut to nanoseconds."""
        rest = self.rest
        if len(rest) < 2 or rest[0] not in ".," or not _leading_digits(rest[1:], 1):
            return 0
        digits = _leading_digits(rest[1:], len(rest))
        self.rest = rest[1 + len(digits) :]
        return int(digits[:9].ljust(9, "0"))

    def offset(self) -> int:
        """`Z`, or `±hh:mm` (up to 24:60, as Go takes it): seconds east of UTC."""
        rest = self.rest
        if rest.startswith("Z"):
            self.rest = rest[1:]
            return 0
        if len(rest) < 6 or rest[3] != ":":
            raise self.fail(rest, "Z07:00")
        sign, hours, minutes = rest[0], rest[1:3], rest[4:6]
        self.rest = rest[6:]
        # As Go: a bad hour leaves the minutes unread, range errors come first, and of two,
        # the minutes' is told.
        hour = int(hours) if _two_digits(hours) else None
        minute = int(minutes) if hour is not None and _two_digits(minutes) else None
        if minute is not None and minute > 60:
            raise self.out_of_range("time zone offset minute")
        if hour is not None and hour > 24:
            raise self.out_of_range("time zone offset hour")
        if hour is None or minute is None or sign not in "+-":
            raise self.fail(rest, "Z07:00")
        east = (hour * 60 + minute) * 60
        return -east if sign == "-" else east


def _leading_digits(text: str, most: int) -> str:
    n = 0
    while n < len(text) and n < most and "0" <= text[n] <= "9":
        n += 1
    return text[:n]


def _two_digits(text: str) -> bool:
    return len(_leading_digits(text, 2)) == 2


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _days_in(month: int, year: int) -> int:
    return 29 if month == 2 and _is_leap(year) else _DAYS_IN[month - 1]


def _days(year: int, month: int, day: int) -> int:
    """Days from 1970-01-01 to a date of the proleptic Gregorian calendar (negative before)."""
    year -= month <= 2
    era, year_of_era = divmod(year, 400)
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146_097 + day_of_era - 719_468


def _civil(days: int) -> tuple[int, int, int]:
    """The date `days` after 1970-01-01 (`_days` backwards)."""
    era, day_of_era = divmod(days + 719_468, 146_097)
    year_of_era = (
        day_of_era - day_of_era // 1460 + day_of_era // 36_524 - day_of_era // 146_096
    ) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    shifted = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * shifted + 2) // 5 + 1
    month = shifted + (3 if shifted < 10 else -9)
    return year_of_era + era * 400 + (month <= 2), month, day


def _quote(text: str) -> str:
    """Go's time.quote, for error texts: `"` and `\\` escaped, bytes of anything not
    printable ASCII as \\x escapes."""
    out = ['"']
    for char in text:
        if char < " " or char >= "\x80":
            out += (f"\\x{b:02x}" for b in char.encode("utf-8", "surrogatepass"))
        else:
            out.append("\\" + char if char in '"\\' else char)
    out.append('"')
    return "".join(out)
