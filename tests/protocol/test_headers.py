"""NATS header blocks: encoding, parsing and nats-server's fast single-header lookup."""

from __future__ import annotations

import contextlib
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infinistream.protocol import (
    ParsedHeaders,
    encode_headers,
    header_int,
    header_value,
    parse_headers,
)

# --------------------------------------------------------------------------- encode


def test_encode_empty() -> None:
    # client.go emptyHdrLine.
    assert encode_headers() == b"NATS/1.0\r\n\r\n"
    assert encode_headers({}) == b"NATS/1.0\r\n\r\n"


def test_encode_fields() -> None:
    assert encode_headers({"Nats-Msg-Id": "abc", "X": "1"}) == (
        b"NATS/1.0\r\nNats-Msg-Id: abc\r\nX: 1\r\n\r\n"
    )


def test_encode_repeated_fields_from_pairs() -> None:
    assert encode_headers([("A", "1"), ("A", "2")]) == b"NATS/1.0\r\nA: 1\r\nA: 2\r\n\r\n"


def test_encode_status_lines_like_nats_server() -> None:
    assert encode_headers(status=503) == b"NATS/1.0 503\r\n\r\n"
    assert encode_headers(status=404, description="No Messages") == (
        b"NATS/1.0 404 No Messages\r\n\r\n"
    )
    # consumer.go: "NATS/1.0 408 Request Timeout\r\n%s: %d\r\n%s: %d\r\n\r\n"
    pending = {"Nats-Pending-Messages": "3", "Nats-Pending-Bytes": "120"}
    assert encode_headers(pending, status=408, description="Request Timeout") == (
        b"NATS/1.0 408 Request Timeout\r\n"
        b"Nats-Pending-Messages: 3\r\n"
        b"Nats-Pending-Bytes: 120\r\n"
        b"\r\n"
    )
    assert encode_headers(status=100, description="Idle Heartbeat") == (
        b"NATS/1.0 100 Idle Heartbeat\r\n\r\n"
    )
    assert encode_headers(status=503, description="") == b"NATS/1.0 503\r\n\r\n"


@pytest.mark.parametrize(
    ("headers", "status", "description"),
    [
        ({"": "x"}, None, None),
        ({"A B": "x"}, None, None),
        ({"A:B": "x"}, None, None),
        ({"A\r\nB": "x"}, None, None),
        ({"A\t": "x"}, None, None),
        ({"A": "x\r\nB: y"}, None, None),
        ({"A": "x\ny"}, None, None),
        (None, 99, None),
        (None, 1000, None),
        (None, None, "Timeout"),
        (None, 408, "Request\r\nTimeout"),
    ],
)
def test_encode_rejects_what_would_not_survive(
    headers: dict[str, str] | None, status: int | None, description: str | None
) -> None:
    with pytest.raises(ValueError):
        encode_headers(headers, status=status, description=description)


# --------------------------------------------------------------------------- parse


@pytest.mark.parametrize(
    ("block", "status", "description"),
    [
        (b"NATS/1.0\r\n\r\n", None, None),
        (b"NATS/1.0 503\r\n\r\n", 503, None),
        (b"NATS/1.0 408 Request Timeout\r\n\r\n", 408, "Request Timeout"),
        (b"NATS/1.0 100 Idle Heartbeat\r\n\r\n", 100, "Idle Heartbeat"),
        (b"NATS/1.0 409 Consumer Deleted\r\n\r\n", 409, "Consumer Deleted"),
        (b"NATS/1.0  404   No Messages \r\n\r\n", 404, "No Messages"),
        (b"NATS/1.0 \r\n\r\n", None, None),
    ],
)
def test_parse_status_line(block: bytes, status: int | None, description: str | None) -> None:
    parsed = parse_headers(block)
    assert (parsed.status, parsed.description) == (status, description)
    assert len(parsed) == 0


def test_parse_fields() -> None:
    block = (
        b"NATS/1.0 100 Idle Heartbeat\r\n"
        b"Nats-Last-Consumer: 4\r\n"
        b"Nats-Last-Stream: 9\r\n"
        b"Multi: a\r\n"
        b"Multi:b\r\n"
        b"Multi:   c  \r\n"
        b"\r\n"
    )
    parsed = parse_headers(block)
    assert parsed.status == 100
    assert parsed.description == "Idle Heartbeat"
    assert parsed.get("Nats-Last-Consumer") == "4"
    assert parsed.get("Multi") == "a"
    assert parsed.get_all("Multi") == ["a", "b", "c"]
    assert parsed.get_all("Missing") == []
    assert parsed.get("Missing") is None
    assert parsed.get("Missing", "d") == "d"
    assert parsed.items() == [
        ("Nats-Last-Consumer", "4"),
        ("Nats-Last-Stream", "9"),
        ("Multi", "a"),
        ("Multi", "b"),
        ("Multi", "c"),
    ]
    assert list(parsed) == parsed.items()
    assert "Multi" in parsed
    assert "multi" not in parsed
    assert len(parsed) == 5


def test_names_are_case_sensitive() -> None:
    parsed = parse_headers(b"NATS/1.0\r\nnats-msg-id: a\r\nNats-Msg-Id: b\r\n\r\n")
    assert parsed.get("Nats-Msg-Id") == "b"
    assert parsed.get("nats-msg-id") == "a"
    assert parsed.get("NATS-MSG-ID") is None


def test_empty_value_and_colons_in_value() -> None:
    parsed = parse_headers(b"NATS/1.0\r\nA:\r\nB: x:y: z\r\n\r\n")
    assert parsed.items() == [("A", ""), ("B", "x:y: z")]


def test_continuation_lines_are_folded() -> None:
    parsed = parse_headers(b"NATS/1.0\r\nA: one\r\n  two\r\n\tthree\r\nB: 2\r\n\r\n")
    assert parsed.items() == [("A", "one two three"), ("B", "2")]


def test_utf8_values() -> None:
    parsed = parse_headers("NATS/1.0\r\nName: größe\r\n\r\n".encode())
    assert parsed.get("Name") == "größe"


@pytest.mark.parametrize(
    "block",
    [
        b"",
        b"NATS/1.0",
        b"NATS/1.0\r\n",
        b"NATS/1.1\r\n\r\n",
        b"HTTP/1.0\r\n\r\n",
        b"NATS/1.0X\r\n\r\n",
        b"NATS/1.0 5x3\r\n\r\n",
        b"NATS/1.0 50\r\n\r\n",
        b"NATS/1.0 5031\r\n\r\n",
        b"NATS/1.0\r\nNoColon\r\n\r\n",
        b"NATS/1.0\r\n: empty name\r\n\r\n",
        b"NATS/1.0\r\nSpace Name: x\r\n\r\n",
        b"NATS/1.0\r\nA: 1\r\n\r\nB: 2\r\n\r\n",
        b"NATS/1.0\r\nA: 1\nB: 2\r\n\r\n",
        b"NATS/1.0\r\nA: 1\rB: 2\r\n\r\n",
        b"NATS/1.0\r\n continuation first\r\n\r\n",
        b"NATS/1.0\r\nA: \xff\r\n\r\n",
    ],
)
def test_parse_rejects_malformed_blocks(block: bytes) -> None:
    with pytest.raises(ValueError):
        parse_headers(block)


def test_parsed_headers_equality_and_repr() -> None:
    a = parse_headers(b"NATS/1.0 503\r\nA: 1\r\n\r\n")
    assert a == ParsedHeaders([("A", "1")], 503)
    assert a != ParsedHeaders([("A", "1")])
    assert "503" in repr(a)


# --------------------------------------------------------------------------- header_value


BLOCK = (
    b"NATS/1.0\r\n"
    b"Nats-Msg-Id:   abc \r\n"
    b"X-Nats-Expected-Stream: wrong\r\n"
    b"Nats-Expected-Stream: orders\r\n"
    b"Nats-Expected-Stream: second\r\n"
    b"Nats-TTL:\t5s\r\n"
    b"Nats-Rollup : sub\r\n"
    b"Empty:\r\n"
    b"\r\n"
)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        # Leading spaces are skipped, trailing ones kept (client.go sliceHeader).
        (b"Nats-Msg-Id", b"abc "),
        # The name must start a line: X-Nats-Expected-Stream does not match.
        (b"Nats-Expected-Stream", b"orders"),
        # Only spaces are skipped.
        (b"Nats-TTL", b"\t5s"),
        # The colon must follow the name directly.
        (b"Nats-Rollup", None),
        (b"Empty", b""),
        (b"nats-msg-id", None),
        (b"Missing", None),
        (b"NATS/1.0", None),
    ],
)
def test_header_value(name: bytes, value: bytes | None) -> None:
    assert header_value(BLOCK, name) == value


def test_header_value_without_trailing_crlf() -> None:
    assert header_value(b"NATS/1.0\r\nA: 1", b"A") == b"1"
    assert header_value(b"", b"A") is None


def test_header_value_on_status_blocks() -> None:
    block = b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 3\r\n\r\n"
    assert header_value(block, b"Nats-Pending-Messages") == b"3"


# --------------------------------------------------------------------------- properties

names = st.text(
    st.characters(codec="ascii", min_codepoint=33, max_codepoint=126, exclude_characters=":"),
    min_size=1,
    max_size=20,
)
values = st.text(
    st.characters(codec="utf-8", exclude_characters="\r\n"),
    max_size=30,
).map(lambda s: s.strip(" \t"))
fields = st.lists(st.tuples(names, values), max_size=8)
statuses = st.none() | st.integers(min_value=100, max_value=999)
descriptions = st.none() | values.filter(bool)


@given(fields, statuses, descriptions)
def test_encode_parse_round_trip(
    pairs: list[tuple[str, str]], status: int | None, description: str | None
) -> None:
    if status is None:
        description = None
    parsed = parse_headers(encode_headers(pairs, status=status, description=description))
    assert parsed.items() == pairs
    assert parsed.status == status
    assert parsed.description == description


@given(fields, st.one_of(names, st.sampled_from(["Nats-Msg-Id", "A"])))
def test_header_value_agrees_with_parse(pairs: list[tuple[str, str]], name: str) -> None:
    block = encode_headers(pairs)
    found = header_value(block, name.encode())
    expected = parse_headers(block).get(name)
    assert found == (None if expected is None else expected.encode())


@given(st.binary(max_size=200))
def test_parse_garbage_raises_only_value_error(block: bytes) -> None:
    with contextlib.suppress(ValueError):
        parse_headers(b"NATS/1.0" + block)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"0", 0),
        (b"42", 42),
        (b"9223372036854775807", 2**63 - 1),
        # Go's int64 arithmetic wraps around, as nats-server's parseInt64 does.
        (b"9223372036854775808", -(2**63)),
        (b"18446744073709551617", 1),
        (b"", -1),
        (b"-1", -1),
        (b"+1", -1),
        (b"1a", -1),
        ("٣".encode(), -1),
    ],
)
def test_header_int_reads_as_nats_server(value: bytes, expected: int) -> None:
    assert header_int(value) == expected


def test_header_int_takes_any_length() -> None:
    """Python's int() refuses more than 4,300 digits; a header may have many more."""
    for digits in (b"9" * 5000, b"1234567" * 15_000):
        limit = sys.get_int_max_str_digits()
        sys.set_int_max_str_digits(0)
        try:
            wrapped = int(digits) % 2**64
        finally:
            sys.set_int_max_str_digits(limit)
        assert header_int(digits) == (wrapped - 2**64 if wrapped >= 2**63 else wrapped)
