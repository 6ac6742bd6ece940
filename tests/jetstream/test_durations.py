"""Go's time.Duration text, both ways."""

from __future__ import annotations

import pytest

from infinistream.jetstream.durations import go_duration, parse_go_duration

MS = 1_000_000
S = 1_000 * MS


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("0", 0),
        ("1s", S),
        ("-1s", -S),
        ("+2m", 120 * S),
        ("1.5s", 1500 * MS),
        ("1m30s", 90 * S),
        ("1h2m3s4ms", 3723 * S + 4 * MS),
        ("250ms", 250 * MS),
        ("3us", 3_000),
        ("3\u00b5s", 3_000),
        ("3\u03bcs", 3_000),
        ("7ns", 7),
        (".5s", 500 * MS),
        ("1.s", S),
    ],
)
def test_parse(text: str, ns: int) -> None:
    assert parse_go_duration(text) == ns


@pytest.mark.parametrize("text", ["", "1", "s", ".s", "1d", "1 s", "-", "1s2", "--1s"])
def test_not_durations(text: str) -> None:
    assert parse_go_duration(text) is None


@pytest.mark.parametrize("ns", [0, 7, 3_000, 250 * MS, S, 90 * S, 3723 * S, -S])
def test_what_go_writes_reads_back(ns: int) -> None:
    assert parse_go_duration(go_duration(ns)) == ns
