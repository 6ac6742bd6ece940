"""Go's time.Time as text: written as its JSON writes it, read as its JSON reads it (time.Parse
with time.RFC3339), Go's error texts included. tests/e2e/test_go_times.py checks the same
texts against nats-server."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infinistream.jetstream.times import ZERO_TIME, go_time, go_time_or_zero, parse_go_time

S = 1_000_000_000
T0 = 1_893_456_000 * S  # 2030-01-01T00:00:00Z
LAYOUT = "2006-01-02T15:04:05Z07:00"
# The zero time.Time, in nanoseconds from the epoch (outside int64, as Go's UnixNano warns).
ZERO_NS = -62_135_596_800 * S

# --------------------------------------------------------------------------- writing


def test_utc_with_the_fraction_trimmed() -> None:
    assert go_time(T0) == "2030-01-01T00:00:00Z"
    assert go_time(T0 + S // 2) == "2030-01-01T00:00:00.5Z"
    assert go_time(T0 + 1) == "2030-01-01T00:00:00.000000001Z"
    assert go_time(T0 + 120_000) == "2030-01-01T00:00:00.00012Z"
    assert go_time(0) == "1970-01-01T00:00:00Z"
    assert go_time(-1) == "1969-12-31T23:59:59.999999999Z"


def test_in_a_zone_with_its_offset_or_z() -> None:
    assert go_time(T0, zoneinfo.ZoneInfo("Asia/Tokyo")) == "2030-01-01T09:00:00+09:00"
    assert go_time(T0, zoneinfo.ZoneInfo("Asia/Kolkata")) == "2030-01-01T05:30:00+05:30"
    assert go_time(T0, zoneinfo.ZoneInfo("America/St_Johns")) == "2029-12-31T20:30:00-03:30"
    assert go_time(T0, zoneinfo.ZoneInfo("Europe/London")) == "2030-01-01T00:00:00Z"
    assert go_time(T0, UTC) == "2030-01-01T00:00:00Z"


def test_the_years_go_writes() -> None:
    assert go_time(ZERO_NS) == ZERO_TIME == "0001-01-01T00:00:00Z"
    assert go_time(253_402_300_799 * S + S - 1) == "9999-12-31T23:59:59.999999999Z"
    assert go_time(parse_go_time("0000-02-29T00:00:00Z")) == "0000-02-29T00:00:00Z"


def test_an_unset_time_is_the_zero_time() -> None:
    assert go_time_or_zero(0) == ZERO_TIME
    assert go_time_or_zero(T0) == go_time(T0)


@given(st.integers(min_value=ZERO_NS, max_value=253_402_300_799 * S))
def test_writing_agrees_with_datetime(ns: int) -> None:
    seconds, fraction = divmod(ns, S)
    moment = datetime(1, 1, 1) + timedelta(seconds=seconds - ZERO_NS // S)
    stamp = moment.isoformat(timespec="seconds")
    expected = stamp + ("." + f"{fraction:09d}".rstrip("0") if fraction else "") + "Z"
    assert go_time(ns) == expected
    assert parse_go_time(expected) == ns


# --------------------------------------------------------------------------- reading


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2030-01-01T00:00:00Z", T0),
        ("2030-01-01T01:00:00+01:00", T0),
        ("2029-12-31T19:00:00-05:00", T0),
        ("2030-01-01T00:00:00.5Z", T0 + S // 2),
        ("2030-01-01T00:00:00.000000001Z", T0 + 1),
        # What time.Parse takes beyond RFC 3339: a one-digit hour, a comma, more digits
        # than nanoseconds (cut), offsets up to 24:60.
        ("2030-01-01T1:00:00+01:00", T0),
        ("2030-01-01T00:00:00,5Z", T0 + S // 2),
        ("2030-01-01T00:00:00.1234567891234Z", T0 + 123_456_789),
        ("2030-01-01T00:00:00+00:60", T0 - 3600 * S),
        ("2030-01-02T00:00:00+24:00", T0),
        ("0001-01-01T00:00:00Z", ZERO_NS),
        ("2000-02-29T12:00:00Z", 951_825_600 * S),
    ],
)
def test_reads_what_go_reads(text: str, expected: int) -> None:
    assert parse_go_time(text) == expected


def _cannot(text: str, value: str, element: str) -> str:
    return f'parsing time "{text}" as "{LAYOUT}": cannot parse "{value}" as "{element}"'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tomorrow", _cannot("tomorrow", "tomorrow", "2006")),
        ("2030-01-01", _cannot("2030-01-01", "", "T")),
        ("2030-01-01 00:00:00Z", _cannot("2030-01-01 00:00:00Z", " 00:00:00Z", "T")),
        ("2030-01-01t00:00:00z", _cannot("2030-01-01t00:00:00z", "t00:00:00z", "T")),
        ("2030-01-01T00:00:00", _cannot("2030-01-01T00:00:00", "", "Z07:00")),
        ("2030-1-01T00:00:00Z", _cannot("2030-1-01T00:00:00Z", "1-01T00:00:00Z", "01")),
        ("2030-01-01T00:00:00.Z", _cannot("2030-01-01T00:00:00.Z", ".Z", "Z07:00")),
        ("2030-01-01T00:00:00+0100", _cannot("2030-01-01T00:00:00+0100", "+0100", "Z07:00")),
        ("2030-01-01T00:00:00*01:00", _cannot("2030-01-01T00:00:00*01:00", "*01:00", "Z07:00")),
        ("2030-01-01T00:00:00+2x:00", _cannot("2030-01-01T00:00:00+2x:00", "+2x:00", "Z07:00")),
        ("2030-13-01T00:00:00Z", 'parsing time "2030-13-01T00:00:00Z": month out of range'),
        ("2030-00-01T00:00:00Z", 'parsing time "2030-00-01T00:00:00Z": month out of range'),
        ("2030-02-30T00:00:00Z", 'parsing time "2030-02-30T00:00:00Z": day out of range'),
        ("1900-02-29T00:00:00Z", 'parsing time "1900-02-29T00:00:00Z": day out of range'),
        ("2030-01-00T00:00:00Z", 'parsing time "2030-01-00T00:00:00Z": day out of range'),
        ("2030-01-01T24:00:00Z", 'parsing time "2030-01-01T24:00:00Z": hour out of range'),
        ("2030-01-01T00:60:00Z", 'parsing time "2030-01-01T00:60:00Z": minute out of range'),
        ("2030-01-01T00:00:60Z", 'parsing time "2030-01-01T00:00:60Z": second out of range'),
        ("2030-01-01T00:00:00ZZ", 'parsing time "2030-01-01T00:00:00ZZ": extra text: "Z"'),
        (
            "2030-01-01T00:00:00+01:00x",
            'parsing time "2030-01-01T00:00:00+01:00x": extra text: "x"',
        ),
        (
            "2030-01-01T00:00:00+25:00",
            'parsing time "2030-01-01T00:00:00+25:00": time zone offset hour out of range',
        ),
        (
            "2030-01-01T00:00:00+25:61",
            'parsing time "2030-01-01T00:00:00+25:61": time zone offset minute out of range',
        ),
        # Go's quoting: `"` escaped, bytes of anything not printable ASCII in hex.
        (
            '2030-01-01T00:00:00"Z',
            _cannot('2030-01-01T00:00:00\\"Z', '\\"Z', "Z07:00"),
        ),
        (
            "é030-01-01T00:00:00Z",
            _cannot("\\xc3\\xa9030-01-01T00:00:00Z", "\\xc3\\xa9030-01-01T00:00:00Z", "2006"),
        ),
    ],
)
def test_refuses_with_gos_words(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_go_time(text)
    assert str(info.value) == message
