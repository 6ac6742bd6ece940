"""Go's time.Duration as text, both ways: nats-server writes durations in its error texts and
headers with Duration.String, and reads them (`Nats-TTL`) with time.ParseDuration."""

from __future__ import annotations

from typing import Final

from infinistream import natsconf

# Nanoseconds in a second: Go durations are nanoseconds, nats-server's headers and TTLs seconds.
SECOND_NS: Final = 1_000_000_000


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
    """Nanoseconds from Go's time.ParseDuration syntax ("1.5s", "2m30s", "-1h"); None if it is
    not one. As in Go, a bare number is no duration, except "0"."""
    try:
        return natsconf.duration_ns(text)
    except ValueError:
        return None
