"""Schedule headers: patterns and times, nats-server's checks in its order, and the message a
due schedule produces. (tests/e2e/test_message_schedules.py checks the same against nats-server.)"""

from __future__ import annotations

import zoneinfo

import pytest

from infinistream.jetstream import errors
from infinistream.jetstream.api import StreamConfig
from infinistream.protocol import encode_headers, parse_headers
from infinistream.stream.schedules import (
    At,
    CronSchedule,
    Every,
    check_publish,
    parse_schedule,
    produce,
    stored_headers,
)

S = 1_000_000_000
T0 = 1_893_456_000 * S  # 2030-01-01T00:00:00Z
CFG = StreamConfig(name="S", subjects=["sched.>", "out.>"], allow_msg_schedules=True)


def hdr(**fields: str) -> bytes:
    return encode_headers({k.replace("_", "-"): v for k, v in fields.items()})


def fields(block: bytes) -> list[tuple[str, str]]:
    return parse_headers(block).items()


def test_patterns() -> None:
    assert parse_schedule(hdr(Nats_Schedule="@at 2030-01-01T00:00:00Z")) == At(T0)
    assert parse_schedule(hdr(Nats_Schedule="@every 1m30s")) == Every(90 * S)
    hourly = parse_schedule(hdr(Nats_Schedule="@hourly"))
    assert isinstance(hourly, CronSchedule) and hourly.zone is None
    assert parse_schedule(hdr(Nats_Schedule="")) is None
    assert parse_schedule(hdr(X="1")) is None
    zoned = parse_schedule(hdr(Nats_Schedule="0 0 9 * * *", Nats_Schedule_Time_Zone="Asia/Tokyo"))
    assert isinstance(zoned, CronSchedule) and zoned.zone == zoneinfo.ZoneInfo("Asia/Tokyo")


def test_at_takes_a_time_as_go_parses_it() -> None:
    # time.Parse(time.RFC3339): a one-digit hour and an offset too; a date alone is no time.
    assert parse_schedule(hdr(Nats_Schedule="@at 2030-01-01T1:00:00+01:00")) == At(T0)
    for text in ("2030-01-01", "2030-01-01T00:00:00", "2030-02-30T00:00:00Z"):
        with pytest.raises(errors.ApiError) as bad:
            parse_schedule(hdr(Nats_Schedule=f"@at {text}"))
        assert bad.value.err_code == 10189


def test_every_goes_on_from_its_last_time_or_skips_ahead() -> None:
    every = Every(10 * S)
    # From the timestamp to the second (halfway rounds up), one interval on.
    assert every.due(T0 + S // 2, T0) == T0 + 11 * S
    assert every.due(T0 + S // 2 - 1, T0) == T0 + 10 * S
    # Fallen behind (an outage): once, then on from now.
    assert every.due(T0, T0 + 100 * S + 1) == T0 + 110 * S


def test_a_cron_that_fell_behind_fires_from_now() -> None:
    hourly = parse_schedule(hdr(Nats_Schedule="@hourly"))
    assert hourly is not None
    assert hourly.due(T0, T0 + S) == T0 + 3600 * S
    assert hourly.due(T0, T0 + 7200 * S + 1) == T0 + 3 * 3600 * S


def test_checks_come_in_nats_servers_order() -> None:
    # An invalid pattern before a missing target; a bad time zone before either.
    with pytest.raises(errors.ApiError) as bad:
        check_publish(CFG, "sched.a", hdr(Nats_Schedule="@every 1ms"))
    assert bad.value.err_code == 10189
    with pytest.raises(errors.ApiError) as bad:
        check_publish(
            CFG, "sched.a", hdr(Nats_Schedule="nonsense", Nats_Schedule_Time_Zone="Nowhere/X")
        )
    assert bad.value.err_code == 10223
    # The TTL's value before the rollup, the rollup before TTLs being allowed at all.
    both = hdr(
        Nats_Schedule="@every 1s",
        Nats_Schedule_Target="out.a",
        Nats_Schedule_TTL="1ms",
        Nats_Schedule_Rollup="all",
    )
    with pytest.raises(errors.ApiError) as bad:
        check_publish(CFG, "sched.a", both)
    assert bad.value.err_code == 10191


def test_a_valid_schedule_and_a_cancel() -> None:
    checked = check_publish(
        CFG, "sched.a", hdr(Nats_Schedule="@every 1s", Nats_Schedule_Target="out.a")
    )
    assert checked is not None and checked.schedule == Every(S) and not checked.purges
    cancel = check_publish(
        CFG, "sched.done", hdr(Nats_Schedule_Next="purge", Nats_Scheduler="sched.a")
    )
    assert cancel is not None and cancel.schedule is None and cancel.purges == "sched.a"
    assert check_publish(CFG, "out.a", hdr(X="1")) is None


def test_a_schedule_is_stored_as_a_rollup() -> None:
    block = hdr(Nats_Schedule="@every 1s", Nats_Schedule_Target="out.a")
    assert fields(stored_headers(CFG, block))[-1] == ("Nats-Rollup", "sub")
    with_rollup = hdr(Nats_Schedule="@every 1s", Nats_Rollup="sub")
    assert stored_headers(CFG, with_rollup) == with_rollup
    plain = StreamConfig(name="P", subjects=["p.>"])
    assert stored_headers(plain, block) == block


def test_what_a_schedule_produces() -> None:
    schedule = hdr(
        Nats_Schedule="@every 10s",
        Nats_Schedule_Target="out.a",
        Nats_Schedule_TTL="5m",
        Nats_Schedule_Rollup="sub",
        Nats_Msg_Id="1",
        Nats_Expected_Last_Sequence="3",
        Nats_TTL="1h",
        Nats_Rollup="sub",
        X_Kept="yes",
    )
    produced = produce("sched.a", schedule, b"data", T0, now=T0)
    assert produced is not None
    assert (produced.target, produced.data) == ("out.a", b"data")
    assert fields(produced.headers) == [
        ("X-Kept", "yes"),
        ("Nats-Scheduler", "sched.a"),
        ("Nats-Schedule-Next", "2030-01-01T00:00:10Z"),
        ("Nats-TTL", "5m"),
        ("Nats-Rollup", "sub"),
    ]
    # From a source's last message: its headers and data, the schedule's own additions.
    source = (hdr(Unit="C"), b"21")
    at = hdr(Nats_Schedule="@at 2030-01-01T00:00:00Z", Nats_Schedule_Target="out.b")
    produced = produce("sched.b", at, b"own", T0, source, now=T0)
    assert produced is not None and produced.data == b"21"
    assert fields(produced.headers) == [
        ("Unit", "C"),
        ("Nats-Scheduler", "sched.b"),
        ("Nats-Schedule-Next", "purge"),
    ]
    produced = produce("sched.b", at, b"own", T0, (b"", b"bare"), now=T0)
    assert produced is not None and fields(produced.headers)[0] == ("Nats-Scheduler", "sched.b")
    # What no longer holds a valid schedule produces nothing.
    assert produce("sched.c", hdr(X="1"), b"", T0, now=T0) is None
    assert produce("sched.c", hdr(Nats_Schedule="@every 1s"), b"", T0, now=T0) is None


def test_produced_headers_keep_the_rest_byte_for_byte() -> None:
    # nats-server edits the block in place (removeHeaderIfPrefixPresent, removeHeaderIfPresent,
    # genHeader): what it does not remove keeps its spaces, repeats, order and case.
    schedule = (
        b"NATS/1.0\r\nA:  one  \r\nNats-Schedule: @at 2030-01-01T00:00:00Z\r\nA: two\r\n"
        b"Nats-Schedule-Target: out.a\r\nnats-msg-id: lower\r\nNats-Msg-Id: m\r\n"
        b"Nats-Expected-Stream: S\r\nNats-Expected-Last-Sequence: 3\r\n\r\n"
    )
    produced = produce("sched.a", schedule, b"", T0, now=T0)
    assert produced is not None
    assert produced.headers == (
        b"NATS/1.0\r\nA:  one  \r\nA: two\r\nnats-msg-id: lower\r\n"
        b"Nats-Scheduler: sched.a\r\nNats-Schedule-Next: purge\r\n\r\n"
    )
