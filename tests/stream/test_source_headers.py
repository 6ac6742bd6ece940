"""The `Nats-Stream-Source` header as sourced messages carry it (stream.sources)."""

from __future__ import annotations

from infinistream.jetstream.api import StreamSource, SubjectTransformConfig
from infinistream.protocol import header_value
from infinistream.stream.origins import source_identity
from infinistream.stream.sources import (
    STREAM_SOURCE,
    SourcedUpTo,
    parse_source_header,
    sourced_headers,
)


def test_a_sourced_copy_says_where_it_came_from_and_drops_the_origins_expectations() -> None:
    identity = source_identity(StreamSource(name="EU", filter_subject="eu.>"))
    origin = (
        b"NATS/1.0\r\nk: v\r\nNats-Expected-Last-Sequence: 4\r\n"
        b"Nats-Stream-Source: X 1 > > a\r\n\r\n"
    )
    headers = sourced_headers(origin, identity, 7, "eu.order")
    assert header_value(headers, b"k") == b"v"
    assert header_value(headers, b"Nats-Expected-Last-Sequence") is None
    assert header_value(headers, STREAM_SOURCE) == b"EU 7 eu.> > eu.order"
    assert parse_source_header(b"EU 7 eu.> > eu.order") == (identity, SourcedUpTo(7))


def test_a_source_with_transforms_is_named_by_them() -> None:
    src = StreamSource(
        name="RAW",
        subject_transforms=[SubjectTransformConfig(src="raw.*", dest="cooked.{{wildcard(1)}}")],
    )
    identity = source_identity(src)
    assert identity == "RAW raw.* cooked.{{wildcard(1)}}"
    value = header_value(sourced_headers(b"", identity, 3, "raw.3"), STREAM_SOURCE)
    assert value is not None and parse_source_header(value) == (identity, SourcedUpTo(3))


def test_headers_nats_server_would_not_read_are_no_resume_point() -> None:
    assert parse_source_header(b"EU") is None
    assert parse_source_header(b"EU x > > a") is None


def test_the_origins_identity_ends_the_header_and_tells_a_new_origin() -> None:
    identity = source_identity(StreamSource(name="EU"))
    value = header_value(sourced_headers(b"", identity, 4, "eu.a", "Abc12345"), STREAM_SOURCE)
    assert value == b"EU 4 > > eu.a Abc12345"
    parsed = parse_source_header(value)
    assert parsed == (identity, SourcedUpTo(4, "Abc12345"))
    point = parsed[1]
    assert point.of("Abc12345") == point
    # Made again: a new identity, and nothing of it copied yet.
    assert point.of("Zzz00000") is None
    # Where either side is not known (an upstream origin, a header of before), it stands.
    assert point.of("") == point
    assert SourcedUpTo(4).of("Abc12345") == SourcedUpTo(4)
