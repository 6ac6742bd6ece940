"""Go's time.Duration as text, both ways: nats-server writes durations in its error texts and
headers with Duration.String, and reads them (`Nats-TTL`) with time.ParseDuration."""

from __future__ import annotations

import re
from typing import Final

NS_PER: Final = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # µs, micro sign
    "\u03bcs": 1_000,  # μs, Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_PART: Final = re.compile(r"([0-9]*)(?:\.([0-9]*))?(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")


def go_duration(ns: int) -> str:
    """Go's time.Duration.String(), e.g. "1.5s", "2m0s", "250ms", "1h0m0s"."""
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    u = abs(ns)
    if u < 1_000_000_000:
        unit, prec = ("ns", 0) if u < 1_000 else ("µs", 3) if u < 1_000_000 else ("ms", 6)
        whole, frac = divmod(u, 10**prec)
        return f"{sign}{whole}{_fraction(frac, prec)}{unit}"
    seconds, frac = divmod(u, 1_000_000_000)
    text = f"{seconds % 60}{_fraction(frac, 9)}s"
    if seconds >= 60:
        text = f"{seconds // 60 % 60}m{text}"
    if seconds >= 3600:
        text = f"{seconds // 3600}h{text}"
    return sign + text


def _fraction(frac: int, prec: int) -> str:
    if not frac:
        return ""
    return "." + str(frac).rjust(prec, "0").rstrip("0")


def parse_go_duration(text: str) -> int | None:
    """Nanoseconds from Go's time.ParseDuration syntax ("1.5s", "2m30s", "-1h"); None if
    it is not one. As in Go, a bare number is no duration, except "0"."""
    sign = 1
    rest = text
    if rest[:1] in ("-", "+"):
        sign = -1 if rest[0] == "-" else 1
        rest = rest[1:]
    if rest == "0":
        return 0
    if not rest:
        return None
    total = 0
    pos = 0
    while pos < len(rest):
        m = _PART.match(rest, pos)
        if m is None:
            return None
        whole, frac, unit = m.group(1), m.group(2) or "", m.group(3)
        if not whole and not frac:
            return None  # "." or nothing before the unit
        scale = NS_PER[unit]
        total += int(whole or "0") * scale
        if frac:
            total += int(frac) * scale // 10 ** len(frac)
        pos = m.end()
    return sign * total
