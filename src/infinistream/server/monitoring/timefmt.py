"""Times and durations as nats-server prints them in monitoring answers."""

from __future__ import annotations

from infinistream.jetstream.durations import SECOND_NS
from infinistream.jetstream.times import go_time


def rfc3339(t: float) -> str:
    """Go's time.Time in JSON (RFC 3339 with fractional seconds, UTC) of `time.time()` seconds."""
    return go_time(round(t * SECOND_NS))


def uptime(seconds: float) -> str:
    """nats-server's myUptime: whole seconds as 1y2d3h4m5s, leading zero units left out."""
    secs = max(int(seconds), 0)
    mins, hours, days = secs // 60, secs // 3600, secs // 86400
    years = days // 365
    if years:
        return f"{years}y{days % 365}d{hours % 24}h{mins % 60}m{secs % 60}s"
    if days:
        return f"{days}d{hours % 24}h{mins % 60}m{secs % 60}s"
    if hours:
        return f"{hours}h{mins % 60}m{secs % 60}s"
    if mins:
        return f"{mins}m{secs % 60}s"
    return f"{secs}s"
