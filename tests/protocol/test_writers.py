"""Server-to-client frames must be byte-identical to what nats-server writes."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from infinistream.protocol import (
    OK,
    PING,
    PONG,
    Outgoing,
    Parser,
    Pubs,
    err,
    hmsg,
    info,
    msg,
    msg_run,
    msgs,
)


def test_constants() -> None:
    # client.go: pingProto, pongProto, okProto.
    assert PING == b"PING\r\n"
    assert PONG == b"PONG\r\n"
    assert OK == b"+OK\r\n"


def test_err_quotes_like_nats_server() -> None:
    # client.go: errProto = "-ERR '%s'" + _CRLF_
    assert err("Unknown Protocol Operation") == b"-ERR 'Unknown Protocol Operation'\r\n"
    assert err("Maximum Payload Violation") == b"-ERR 'Maximum Payload Violation'\r\n"
    assert err('Permissions Violation for Publish to "a"') == (
        b"-ERR 'Permissions Violation for Publish to \"a\"'\r\n"
    )


def test_info_matches_generate_info_json() -> None:
    # util.go generateInfoJSON joins "INFO", the JSON and CRLF with spaces.
    fields = {"server_id": "X", "version": "2.11.0", "headers": True, "max_payload": 1048576}
    frame = info(fields)
    assert frame.startswith(b"INFO {")
    assert frame.endswith(b"} \r\n")
    assert msgspec.json.decode(frame[len(b"INFO ") : -len(b" \r\n")]) == fields
    assert b"\n" not in frame[:-1]


def test_msg() -> None:
    # client.go msgHeader: "MSG " subject " " sid " " [reply " "] size CRLF.
    assert msg("foo", "1", None, b"hello") == b"MSG foo 1 5\r\nhello\r\n"
    assert msg("foo.bar", "22", "INBOX.1", b"hi") == b"MSG foo.bar 22 INBOX.1 2\r\nhi\r\n"
    assert msg("foo", "1", None, b"") == b"MSG foo 1 0\r\n\r\n"
    assert msg("foo", "1", "", b"x") == b"MSG foo 1 1\r\nx\r\n"
    assert msg("foo", "1", None, b"a\r\nb") == b"MSG foo 1 4\r\na\r\nb\r\n"


def test_hmsg() -> None:
    block = b"NATS/1.0\r\nA: 1\r\n\r\n"
    assert hmsg("foo", "1", None, block, b"hi") == b"HMSG foo 1 18 20\r\n" + block + b"hi\r\n"
    assert hmsg("foo", "1", "r", block, b"") == b"HMSG foo 1 r 18 18\r\n" + block + b"\r\n"


def test_hmsg_no_responders_like_nats_server() -> None:
    # client.go, no responders:
    # "HMSG %s %s %d %d\r\nNATS/1.0 503\r\nNats-Subject: %s\r\n\r\n\r\n"
    block = b"NATS/1.0 503\r\nNats-Subject: svc.echo\r\n\r\n"
    expected = b"HMSG _INBOX.x 7 %d %d\r\n%b\r\n" % (len(block), len(block), block)
    assert hmsg("_INBOX.x", "7", None, block, b"") == expected


def test_non_utf8_subject_written_back_unchanged() -> None:
    parser = Parser()
    parser.receive_data(b"PUB \xff.x \xfe 1\r\nz\r\n")
    [run] = parser.events()
    assert isinstance(run, Pubs)
    [event] = run.pubs()
    assert event.reply is not None
    assert msg(event.subject, "1", event.reply, event.payload) == b"MSG \xff.x 1 \xfe 1\r\nz\r\n"


def test_utf8_subject() -> None:
    assert msg("größe", "1", None, b"") == "MSG größe 1 0\r\n\r\n".encode()


tokens = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zs", "Zl", "Zp")),
    min_size=1,
    max_size=16,
).filter(lambda s: not any(c in b" \t\r\n\x0b\x0c" for c in s.encode()))


def _split_frame(frame: bytes) -> tuple[list[bytes], bytes]:
    head, _, body = frame.partition(b"\r\n")
    assert body.endswith(b"\r\n")
    return head.split(b" "), body[:-2]


@given(tokens, tokens, st.none() | tokens, st.binary(max_size=300))
def test_msg_fields_round_trip(subject: str, sid: str, reply: str | None, payload: bytes) -> None:
    args, body = _split_frame(msg(subject, sid, reply, payload))
    expected = ["MSG", subject, sid, *([reply] if reply else []), str(len(payload))]
    assert [arg.decode() for arg in args] == expected
    assert body == payload


@given(tokens, tokens, st.none() | tokens, st.binary(max_size=100), st.binary(max_size=300))
def test_hmsg_fields_round_trip(
    subject: str, sid: str, reply: str | None, headers: bytes, payload: bytes
) -> None:
    args, body = _split_frame(hmsg(subject, sid, reply, headers, payload))
    sizes = [str(len(headers)), str(len(headers) + len(payload))]
    assert [arg.decode() for arg in args] == [
        "HMSG",
        subject,
        sid,
        *([reply] if reply else []),
        *sizes,
    ]
    assert body == headers + payload


# Subjects and replies as str, or as the bytes that go on the wire (a pull batch's).
wire_tokens = tokens | tokens.map(str.encode)
outgoing = st.tuples(
    wire_tokens,
    st.none() | st.just("") | st.just(b"") | wire_tokens,
    st.none() | st.binary(max_size=60),
    st.binary(max_size=80),
)
# A pull batch: every message with a reply and no headers.
pulled = st.tuples(wire_tokens, wire_tokens, st.none(), st.binary(max_size=80))


@given(tokens, st.lists(outgoing, max_size=6) | st.lists(pulled, max_size=6), st.booleans())
def test_msgs_is_msg_and_hmsg_one_by_one(sid: str, messages: list[Outgoing], headers: bool) -> None:
    # One message alone is written as `msg` and `hmsg` write theirs (the tests above).
    one_by_one = b"".join(msgs(sid, [m], headers) for m in messages)
    assert msgs(sid, messages, headers) == one_by_one


@given(
    tokens | st.just("1%d"),
    st.lists(st.tuples(tokens.map(str.encode), st.binary(max_size=80)), max_size=6),
)
def test_msg_run_is_msg_one_by_one(sid: str, frames: list[tuple[bytes, bytes]]) -> None:
    # A run of PubAcks is the frames `msg` writes one by one, a `%` in the sid kept as is.
    subjects = [subject for subject, _ in frames]
    payloads = [payload for _, payload in frames]
    one_by_one = b"".join(msg(s.decode(), sid, None, p) for s, p in frames)
    assert msg_run(sid, subjects, payloads) == one_by_one


def test_msg_run_refuses_unpaired_subjects() -> None:
    with pytest.raises(ValueError):
        msg_run("1", [b"a", b"b"], [b""])
