"""stream.ttl: reading `Nats-TTL` as nats-server does, and the headers it writes."""

from __future__ import annotations

import pytest

from infinistream.jetstream.api import StreamConfig
from infinistream.protocol import encode_headers, header_value
from infinistream.stream.config import normalize
from infinistream.stream.ttl import (
    NEVER,
    InvalidTTL,
    asks_ttl,
    is_delete_marker,
    marker_headers,
    message_ttl,
    parse_ttl,
    stored_headers,
)

S = 1_000_000_000


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        (b"1s", 1),
        (b"1.9s", 1),  # whole seconds, truncated
        (b"90s", 90),
        (b"1m30s", 90),
        (b"2h", 7200),
        (b"1500ms", 1),
        (b"60", 60),
        (b"1", 1),
        (b"never", NEVER),
        (b"Never", NEVER),
    ],
)
def test_ttls_nats_server_reads(raw: bytes, seconds: int) -> None:
    assert parse_ttl(raw) == seconds


@pytest.mark.parametrize(
    "raw", [b"0", b"0s", b"999ms", b"-1", b"-2s", b"abc", b"1.5", b"1x", b"+", b" 5"]
)
def test_ttls_nats_server_refuses(raw: bytes) -> None:
    with pytest.raises(InvalidTTL):
        parse_ttl(raw)


def test_headers_without_a_ttl_ask_for_none() -> None:
    assert message_ttl(None) == 0
    assert message_ttl(encode_headers({"k": "v"})) == 0
    assert message_ttl(encode_headers({"Nats-TTL": "5s"})) == 5
    assert asks_ttl(encode_headers({"Nats-TTL": "never"}))
    # Malformed: no TTL asked for (so a stream without TTLs reports it as invalid later).
    assert not asks_ttl(encode_headers({"Nats-TTL": "5ms"}))


def test_a_short_ttl_is_stored_as_the_marker_ttl() -> None:
    cfg = normalize(StreamConfig(name="S", subject_delete_marker_ttl=10 * S))
    headers = encode_headers({"a": "1", "Nats-TTL": "2s", "b": "2"})
    stored = stored_headers(cfg, headers)
    assert stored == b"NATS/1.0\r\na: 1\r\nb: 2\r\nNats-TTL: 10\r\n\r\n"
    # Long enough already, malformed, or never: as it came.
    for ttl in ("10s", "1h", "never", "1ms"):
        same = encode_headers({"Nats-TTL": ttl})
        assert stored_headers(cfg, same) is same
    # One message per subject: no older marker can hide behind it.
    single = normalize(
        StreamConfig(name="S", subject_delete_marker_ttl=10 * S, max_msgs_per_subject=1)
    )
    assert stored_headers(single, headers) is headers


def test_marker_headers_and_what_counts_as_a_marker() -> None:
    cfg = normalize(StreamConfig(name="S", subject_delete_marker_ttl=90 * S))
    headers = marker_headers(cfg)
    assert headers == (
        b"NATS/1.0\r\nNats-Marker-Reason: MaxAge\r\nNats-TTL: 1m30s\r\nNats-Rollup: sub\r\n\r\n"
    )
    assert header_value(headers, b"Nats-TTL") == b"1m30s"
    assert is_delete_marker(headers)
    assert is_delete_marker(encode_headers({"KV-Operation": "PURGE"}))
    assert not is_delete_marker(encode_headers({"KV-Operation": "DEL"}))
    assert not is_delete_marker(None)
