"""Message schedules (`allow_msg_schedules`, ADR-51), as nats-server 2.14+ reads and writes them.

A schedule is a message on a subject of its own whose `Nats-Schedule` header says when
(`@at <RFC3339>`, `@every <duration>`, a six-field cron pattern or `@hourly` and the like) and
whose `Nats-Schedule-Target` says where: when it is due, a copy of it (or of the last message
of `Nats-Schedule-Source`) is published to the target, with `Nats-Scheduler` naming the
schedule's subject and `Nats-Schedule-Next` the next time it fires, or `purge` for a schedule
that fires once, whose message the produced one then purges. A schedule is stored with
`Nats-Rollup: sub`, so a new one on its subject replaces it; a schedule that is deleted,
purged or followed by a plain message on its subject fires no more.

This module holds the rules: reading and checking the headers (with nats-server's errors, in
its order) and building the message a schedule produces. When each schedule is due is kept in
metadata (`s/` keys, stream.records) and acted on by stream.scheduler.
"""

from __future__ import annotations

import time
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Final

from infinistream.jetstream import errors
from infinistream.jetstream.api import StreamConfig
from infinistream.jetstream.durations import SECOND_NS, parse_go_duration
from infinistream.jetstream.subjects import collide, is_valid_subject
from infinistream.jetstream.times import go_time, parse_go_time
from infinistream.protocol import (
    append_header,
    append_headers,
    header_value,
    remove_header,
    remove_header_prefix,
)
from infinistream.stream.cron import Cron, InvalidCron
from infinistream.stream.publish_headers import MSG_ID, ROLLUP
from infinistream.stream.ttl import TTL_HEADER, InvalidTTL, parse_ttl

PATTERN: Final = b"Nats-Schedule"
TIME_ZONE: Final = b"Nats-Schedule-Time-Zone"
SCHEDULE_TTL: Final = b"Nats-Schedule-TTL"
SCHEDULE_ROLLUP: Final = b"Nats-Schedule-Rollup"
TARGET: Final = b"Nats-Schedule-Target"
SOURCE: Final = b"Nats-Schedule-Source"
SCHEDULER: Final = b"Nats-Scheduler"
NEXT: Final = b"Nats-Schedule-Next"
PURGE: Final = b"purge"
# Every schedule header, Nats-Scheduler included, starts with this: a quick test for headers
# that need a closer look, and what a produced message loses (nats-server's prefix).
PREFIX: Final = b"Nats-Schedule"
# A message that holds a schedule (the pattern header, as its own line).
HOLDS_SCHEDULE: Final = b"\r\n" + PATTERN + b":"

# Later than any schedule can be due (the year 2286).
NEVER_DUE: Final = 10**19 - 1
_PREDEFINED: Final = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}


@dataclass(frozen=True, slots=True)
class At:
    """`@at <time>`: fires once."""

    when: int
    repeats = False

    def due(self, ts: int, now: int) -> int:
        return self.when


@dataclass(frozen=True, slots=True)
class Every:
    """`@every <duration>`: from the schedule's timestamp (to the second), every interval; a
    schedule that fell behind (an outage) fires once and goes on from now."""

    interval: int
    repeats = True

    def due(self, ts: int, now: int) -> int:
        due = round_second(ts) + self.interval
        return due if due >= now else round_second(now) + self.interval


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A cron pattern, in UTC or the schedule's time zone; fires once for missed times too."""

    cron: Cron
    zone: tzinfo | None
    repeats = True

    def due(self, ts: int, now: int) -> int:
        try:
            due = self.cron.next_after(ts, self.zone)
            if due < now:
                due = self.cron.next_after(round_second(now), self.zone)
        except InvalidCron:
            # Checked when it was published; should its next time ever be out of reach,
            # it waits rather than fail the commit it is part of.
            return NEVER_DUE
        return due


Schedule = At | Every | CronSchedule


def round_second(ns: int) -> int:
    """Go's Time.Round(time.Second): halfway rounds up."""
    return (ns + SECOND_NS // 2) // SECOND_NS * SECOND_NS


def _at(text: str) -> int | None:
    """When an `@at` schedule fires (time.Parse with time.RFC3339), or None if it names no time."""
    try:
        return parse_go_time(text)
    except ValueError:
        return None


def _zone(hdr: bytes) -> tzinfo | None:
    """The schedule's time zone (None: none asked for); ApiError if it names none."""
    raw = header_value(hdr, TIME_ZONE)
    if raw is None:
        return None
    name = raw.decode(errors="replace")
    if name == "UTC":
        return UTC
    if name == "Local":
        return datetime.now().astimezone().tzinfo
    try:
        return zoneinfo.ZoneInfo(name)
    except (ValueError, OSError, zoneinfo.ZoneInfoNotFoundError):
        # OSError: a name that is a directory of the zone database ("America"), or too long.
        raise errors.message_schedules_time_zone_invalid() from None


def parse_schedule(hdr: bytes) -> Schedule | None:
    """The schedule a message holds (None if it holds none); ApiError for a bad time zone
    or pattern (nats-server's nextMessageSchedule)."""
    zone = _zone(hdr)
    raw = header_value(hdr, PATTERN)
    if not raw:
        return None
    pattern = raw.decode(errors="replace")
    invalid = errors.message_schedules_pattern_invalid
    if pattern.startswith("@at "):
        when = _at(pattern[4:])
        if zone is not None or when is None:
            raise invalid()
        return At(when)
    if pattern.startswith("@every "):
        interval = parse_go_duration(pattern[7:])
        if zone is not None or interval is None or interval < SECOND_NS:
            raise invalid()
        return Every(interval)
    try:
        cron = Cron.parse(_PREDEFINED.get(pattern, pattern))
        # One that never comes within five years (the 30th of February) is refused too.
        cron.next_after(time.time_ns(), zone)
    except InvalidCron:
        raise invalid() from None
    return CronSchedule(cron, zone)


def holds_schedule(hdr: bytes) -> bool:
    """Whether a message holds a schedule that parses."""
    try:
        return parse_schedule(hdr) is not None
    except errors.ApiError:
        return False


@dataclass(frozen=True, slots=True)
class Checked:
    """What a publish's schedule headers ask for, once checked: the schedule it holds, and the
    schedule subject whose messages it purges (`Nats-Schedule-Next: purge`); None if it
    asks for neither."""

    schedule: Schedule | None = None
    purges: str = ""


def check_publish(cfg: StreamConfig, subject: str, hdr: bytes) -> Checked | None:
    """nats-server's checks of a client's publish (processJetStreamMsg, "Message scheduling"),
    in its order; ApiError if one fails. (The check that a subject to purge holds a schedule
    needs the message stored there, which a commit does not read: see docs/protocol.md.)"""
    if PREFIX not in hdr:
        return None
    allowed = cfg.allow_msg_schedules
    try:
        schedule = parse_schedule(hdr)
    except errors.ApiError:
        if not allowed:
            raise errors.message_schedules_disabled() from None
        raise
    if schedule is not None:
        if not allowed:
            raise errors.message_schedules_disabled()
        _check_schedule(cfg, subject, hdr)
    purges = ""
    nxt = header_value(hdr, NEXT)
    if nxt:
        # Clients may only use Nats-Schedule-Next to stop a schedule.
        scheduler = (header_value(hdr, SCHEDULER) or b"").decode(errors="replace")
        if nxt != PURGE or not scheduler or scheduler == subject or not _literal(scheduler):
            raise errors.message_schedules_scheduler_invalid()
        if not allowed:
            raise errors.message_schedules_disabled()
        purges = scheduler
    elif header_value(hdr, SCHEDULER):
        raise errors.message_schedules_scheduler_invalid()
    return Checked(schedule, purges) if schedule is not None or purges else None


def _check_schedule(cfg: StreamConfig, subject: str, hdr: bytes) -> None:
    ttl = header_value(hdr, SCHEDULE_TTL)
    if ttl:
        try:
            parse_ttl(ttl)
        except InvalidTTL:
            raise errors.message_schedules_ttl_invalid() from None
    rollup = header_value(hdr, SCHEDULE_ROLLUP)
    if rollup and rollup != b"sub":
        raise errors.message_schedules_rollup_invalid()
    if ttl and not cfg.allow_msg_ttl:
        raise errors.message_ttl_disabled()
    target = (header_value(hdr, TARGET) or b"").decode(errors="replace")
    if not target or not _literal(target) or target == subject:
        raise errors.message_schedules_target_invalid()
    source = (header_value(hdr, SOURCE) or b"").decode(errors="replace")
    if source and (source in (target, subject) or not _literal(source)):
        raise errors.message_schedules_source_invalid()
    if not any(collide(s, target) for s in cfg.subjects):
        raise errors.message_schedules_target_invalid()
    if source and not any(collide(s, source) for s in cfg.subjects):
        raise errors.message_schedules_source_invalid()
    # A schedule replaces the one before it on its subject: its rollup can only be "sub".
    own_rollup = header_value(hdr, ROLLUP)
    if own_rollup and own_rollup != b"sub":
        raise errors.message_schedules_rollup_invalid()


def _literal(subject: str) -> bool:
    return is_valid_subject(subject, allow_wildcards=False)


def stored_headers(cfg: StreamConfig, hdr: bytes) -> bytes:
    """The headers a schedule is stored with: `Nats-Rollup: sub` added if it has no rollup
    (what makes a new schedule on its subject replace the old one)."""
    if not cfg.allow_msg_schedules or header_value(hdr, ROLLUP) is not None:
        return hdr
    if not holds_schedule(hdr):
        return hdr
    return append_header(hdr, ROLLUP, b"sub")


def source_of(hdr: bytes) -> str:
    """The subject whose last message a schedule publishes ("" if it publishes itself)."""
    return (header_value(hdr, SOURCE) or b"").decode(errors="replace")


def scheduler_of(hdr: bytes) -> str:
    """The schedule subject a message names in `Nats-Scheduler` ("" if none)."""
    return (header_value(hdr, SCHEDULER) or b"").decode(errors="replace")


def next_of(hdr: bytes) -> int | None:
    """The time a produced message says its schedule fires next (None: `purge`, or none)."""
    raw = header_value(hdr, NEXT)
    if not raw or raw == PURGE:
        return None
    return _at(raw.decode(errors="replace"))


@dataclass(frozen=True, slots=True)
class Produced:
    """The message a due schedule publishes."""

    target: str
    headers: bytes
    data: bytes


def produce(
    subject: str,
    hdr: bytes,
    data: bytes,
    due: int,
    source: tuple[bytes, bytes] | None = None,
    now: int | None = None,
) -> Produced | None:
    """What the schedule stored on `subject` publishes when it is due at `due`; `source` is
    the (headers, data) of its source subject's last message, if it has one. None if the
    message no longer holds a valid schedule (nats-server's getScheduledMessages)."""
    try:
        schedule = parse_schedule(hdr)
    except errors.ApiError:
        return None
    target = (header_value(hdr, TARGET) or b"").decode(errors="replace")
    ttl = header_value(hdr, SCHEDULE_TTL)
    if schedule is None or not target:
        return None
    if ttl:
        try:
            parse_ttl(ttl)
        except InvalidTTL:
            return None
    rollup = header_value(hdr, SCHEDULE_ROLLUP)
    base_hdr, body = source if source is not None else (hdr, data)
    if schedule.repeats:
        zone = schedule.zone if isinstance(schedule, CronSchedule) else None
        when = schedule.due(due, time.time_ns() if now is None else now)
        nxt = go_time(when, zone).encode()
    else:
        nxt = PURGE
    added = [(SCHEDULER, subject.encode()), (NEXT, nxt)]
    if ttl:
        added.append((TTL_HEADER, ttl))
    if rollup:
        added.append((ROLLUP, rollup))
    return Produced(target, append_headers(_copyable(base_hdr), added), body)


def _copyable(hdr: bytes) -> bytes:
    """`hdr` without what would keep a copy from being stored, or schedule it again
    (nats-server's getScheduledMessages: the schedule's own headers, Nats-Scheduler too,
    expectations, the message id, TTL and rollup)."""
    for prefix in (PREFIX, b"Nats-Expected-"):
        hdr = remove_header_prefix(hdr, prefix)
    for name in (MSG_ID, TTL_HEADER, ROLLUP):
        hdr = remove_header(hdr, name)
    return hdr
