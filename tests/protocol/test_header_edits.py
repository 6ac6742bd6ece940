"""Header block edits, byte for byte as nats-server's client.go makes them (genHeader,
removeHeaderIfPresent, removeHeaderIfPrefixPresent, removeHeaderStatusIfPresent); the cases of
its client_test.go among them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from infinistream.protocol import (
    EMPTY_HEADERS,
    append_header,
    append_headers,
    encode_headers,
    remove_header,
    remove_header_prefix,
    remove_status,
    set_header,
)

# --------------------------------------------------------------------------- append (genHeader)


def test_append_to_no_headers_makes_a_block() -> None:
    for none in (None, b"", b"\r\n"):
        assert append_header(none, b"Nats-Msg-Size", b"12") == (
            b"NATS/1.0\r\nNats-Msg-Size: 12\r\n\r\n"
        )
    assert append_header(EMPTY_HEADERS, b"a", b"1") == b"NATS/1.0\r\na: 1\r\n\r\n"


def test_append_goes_last_and_keeps_the_rest_as_it_is() -> None:
    block = b"NATS/1.0\r\nB:  spaced  \r\nb: lower\r\nB: again\r\n\r\n"
    assert append_header(block, b"B", b"new") == (
        b"NATS/1.0\r\nB:  spaced  \r\nb: lower\r\nB: again\r\nB: new\r\n\r\n"
    )


def test_append_keeps_the_status_line() -> None:
    assert append_header(b"NATS/1.0 503\r\n\r\n", b"a", b"1") == (b"NATS/1.0 503\r\na: 1\r\n\r\n")
    assert append_header(b"NATS/1.0 408 Request Timeout\r\nX: 1\r\n\r\n", b"a", b"1") == (
        b"NATS/1.0 408 Request Timeout\r\nX: 1\r\na: 1\r\n\r\n"
    )


def test_append_writes_values_as_go_http_header_writes_them() -> None:
    # Line breaks become spaces, then blanks at either end go (Header.Write).
    assert append_header(None, b"a", b" x\r\ny\n\t") == b"NATS/1.0\r\na: x  y\r\n\r\n"
    assert append_header(None, b"a", b"") == b"NATS/1.0\r\na: \r\n\r\n"


def test_append_many_is_append_one_by_one() -> None:
    fields = [(b"Nats-Stream", b"S"), (b"Nats-Sequence", b"7"), (b"Nats-Stream", b"T")]
    for block in (None, b"", b"NATS/1.0 100\r\nX: 1\r\n\r\n"):
        one_by_one = block
        for name, value in fields:
            one_by_one = append_header(one_by_one, name, value)
        assert append_headers(block, fields) == one_by_one
    assert append_headers(None, []) == EMPTY_HEADERS


# --------------------------------------------------------------------------- remove


def test_remove_takes_every_line_of_the_name() -> None:
    # TestRemoveHeaderIfPresentDuplicates.
    block = append_headers(None, [(b"a", b"1"), (b"a", b"2"), (b"c", b"3"), (b"a", b"4")])
    assert remove_header(block, b"a") == b"NATS/1.0\r\nc: 3\r\n\r\n"


def test_remove_of_an_absent_name_changes_nothing() -> None:
    block = b"NATS/1.0\r\nA:  b  \r\n\r\n"
    assert remove_header(block, b"C") is block
    assert remove_header(b"", b"C") == b""


def test_remove_matches_case_and_the_whole_name() -> None:
    block = b"NATS/1.0\r\nnats-ttl: 1\r\nNats-TTL: 2\r\nNats-TTL-X: 3\r\nNats-TTL : 4\r\n\r\n"
    assert remove_header(block, b"Nats-TTL") == (
        b"NATS/1.0\r\nnats-ttl: 1\r\nNats-TTL-X: 3\r\nNats-TTL : 4\r\n\r\n"
    )


def test_remove_skips_names_inside_values_and_other_names() -> None:
    # TestRemoveHeaderIfPresentSkipsValueMatches, ...OrderingPrefix, ...OrderingSuffix.
    block = append_headers(None, [(b"X-Note", b"Nats-Msg-Id is set below"), (b"Nats-Msg-Id", b"r")])
    assert remove_header(block, b"Nats-Msg-Id") == (
        b"NATS/1.0\r\nX-Note: Nats-Msg-Id is set below\r\n\r\n"
    )
    subj, seq = (
        b"Nats-Expected-Last-Subject-Sequence-Subject",
        b"Nats-Expected-Last-Subject-Sequence",
    )
    block = append_headers(None, [(subj, b"foo"), (seq, b"24")])
    assert remove_header(block, seq) == append_header(None, subj, b"foo")
    block = append_headers(None, [(b"Previous-Nats-Msg-Id", b"u"), (b"Nats-Msg-Id", b"c")])
    assert remove_header(block, b"Nats-Msg-Id") == append_header(
        None, b"Previous-Nats-Msg-Id", b"u"
    )


def test_remove_of_the_last_field_leaves_no_block_unless_a_status() -> None:
    assert remove_header(b"NATS/1.0\r\na: 1\r\n\r\n", b"a") == b""
    assert remove_header(b"NATS/1.0 503\r\na: 1\r\n\r\n", b"a") == b"NATS/1.0 503\r\n\r\n"


def test_remove_leaves_a_block_cut_short_as_it_is() -> None:
    assert remove_header(b"NATS/1.0\r\na: 1", b"a") == b"NATS/1.0\r\na: 1"


def test_remove_prefix_takes_every_line_starting_with_it() -> None:
    # TestRemoveHeaderIfPrefixPresent.
    block = append_headers(
        EMPTY_HEADERS,
        [
            (b"a", b"1"),
            (b"Nats-Expected-Stream", b"my-stream"),
            (b"Nats-Expected-Last-Sequence", b"22"),
            (b"b", b"2"),
            (b"Nats-Expected-Last-Subject-Sequence", b"24"),
            (b"Nats-Expected-Last-Msg-Id", b"1"),
            (b"c", b"3"),
        ],
    )
    assert remove_header_prefix(block, b"Nats-Expected-") == (
        b"NATS/1.0\r\na: 1\r\nb: 2\r\nc: 3\r\n\r\n"
    )


def test_remove_prefix_skips_values_case_and_the_first_line() -> None:
    # TestRemoveHeaderIfPrefixPresentSkipsValueMatches.
    block = append_headers(
        None,
        [
            (b"X-Note", b"see Nats-Expected-Stream below"),
            (b"Nats-Expected-Stream", b"my-stream"),
            (b"nats-expected-stream", b"kept"),
            (b"c", b"3"),
        ],
    )
    assert remove_header_prefix(block, b"Nats-Expected-") == (
        b"NATS/1.0\r\nX-Note: see Nats-Expected-Stream below\r\nnats-expected-stream: kept\r\n"
        b"c: 3\r\n\r\n"
    )
    assert remove_header_prefix(b"NATS/1.0 503\r\n\r\n", b"NATS") == b"NATS/1.0 503\r\n\r\n"


def test_remove_prefix_of_every_field_leaves_no_block() -> None:
    block = b"NATS/1.0\r\nNats-Schedule: @every 1s\r\nNats-Scheduler: s\r\n\r\n"
    assert remove_header_prefix(block, b"Nats-Schedule") == b""


# --------------------------------------------------------------------------- set


def test_set_replaces_every_line_of_the_name_with_one_last() -> None:
    block = b"NATS/1.0\r\nNats-TTL: 1\r\nX: a\r\nNats-TTL: 2\r\nY: b\r\n\r\n"
    assert set_header(block, b"Nats-TTL", b"60") == (
        b"NATS/1.0\r\nX: a\r\nY: b\r\nNats-TTL: 60\r\n\r\n"
    )


def test_set_on_no_headers_or_only_that_name() -> None:
    assert set_header(None, b"a", b"1") == b"NATS/1.0\r\na: 1\r\n\r\n"
    assert set_header(b"", b"a", b"1") == b"NATS/1.0\r\na: 1\r\n\r\n"
    assert set_header(b"NATS/1.0\r\na: 0\r\n\r\n", b"a", b"1") == b"NATS/1.0\r\na: 1\r\n\r\n"


# --------------------------------------------------------------------------- status


def test_remove_status_keeps_the_fields() -> None:
    assert remove_status(b"NATS/1.0 503 No Responders\r\nA: b\r\n\r\n") == (
        b"NATS/1.0\r\nA: b\r\n\r\n"
    )
    assert remove_status(b"NATS/1.0 503\r\n\r\n") == b""


def test_remove_status_leaves_blocks_without_one() -> None:
    for block in (b"NATS/1.0\r\nA: b\r\n\r\n", EMPTY_HEADERS, b"", b"HTTP/1.1 200\r\n\r\n"):
        assert remove_status(block) is block


# --------------------------------------------------------------------------- properties

_names = st.sampled_from(["A", "a", "Nats-TTL", "Nats-TTL-X", "X-Nats-TTL", "B"])
_values = st.text(alphabet="xyz: -", max_size=6).map(str.strip)
_fields = st.lists(st.tuples(_names, _values), max_size=6)


@given(_fields, _names)
def test_remove_is_the_block_without_those_fields(fields: list[tuple[str, str]], name: str) -> None:
    kept = [(n, v) for n, v in fields if n != name]
    removed = remove_header(encode_headers(fields), name.encode())
    # A block that loses its last field is gone; one that loses nothing stays as it was.
    assert removed == (encode_headers(kept) if kept or kept == fields else b"")


@given(_fields, _names, _values)
def test_append_is_the_block_with_one_field_more(
    fields: list[tuple[str, str]], name: str, value: str
) -> None:
    appended = append_header(encode_headers(fields), name.encode(), value.encode())
    assert appended == encode_headers([*fields, (name, value)])
