"""Tests for the sans-IO client protocol parser, checked against nats-server's rules."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infinistream.protocol import (
    MAX_CONTROL_LINE_EXCEEDED,
    MAXIMUM_PAYLOAD_VIOLATION,
    PING_EVENT,
    PONG_EVENT,
    UNKNOWN_PROTOCOL_OPERATION,
    Acks,
    Connect,
    Event,
    HPub,
    Parser,
    Ping,
    Pong,
    ProtocolError,
    Pub,
    Pubs,
    Sub,
    Unsub,
)
from infinistream.protocol._parser import SHAPES_PER_CONNECTION, VIEW_PAYLOADS

# --------------------------------------------------------------------------- helpers


def parse(data: bytes, **kwargs: Any) -> list[Event]:
    """The events of `data`, a run of PUBs as the Pub of each frame (`expand`)."""
    parser = Parser(**kwargs)
    parser.receive_data(data)
    return expand(parser.events())


def expand(events: list[Event]) -> list[Event]:
    out: list[Event] = []
    for event in events:
        out += event.pubs() if isinstance(event, Pubs) else [event]
    return out


def parse_error(data: bytes, **kwargs: Any) -> ProtocolError:
    parser = Parser(**kwargs)
    parser.receive_data(data)
    with pytest.raises(ProtocolError) as info:
        parser.events()
    return info.value


def run(chunks: Sequence[bytes], **kwargs: Any) -> tuple[list[Event], str | None]:
    """Feed chunks one read at a time, as the server does; stop at the first error.

    A run of acks comes back as the PUBs it stands for, since how reads split it changes how
    it is grouped; the acks these tests split have empty bodies, which makes that exact.
    """
    parser = Parser(**kwargs)
    out: list[Event] = []
    for chunk in chunks:
        try:
            parser.receive_data(chunk)
            out.extend(as_pubs(parser.events()))
        except ProtocolError as exc:
            out.extend(as_pubs(exc.events))
            return out, exc.message
    return out, None


def as_pubs(events: list[Event]) -> list[Event]:
    out: list[Event] = []
    for event in expand(events):
        if isinstance(event, Acks):
            assert event.payload_bytes == 0
            out += [Pub(subject, None, b"") for subject in event.subjects]
        else:
            out.append(event)
    return out


def split_at(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    points = sorted({min(max(cut, 0), len(data)) for cut in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


HEADER_BLOCK = b"NATS/1.0\r\nNats-Msg-Id: 1\r\n\r\n"
CONNECT_FRAME = b'CONNECT {"verbose":false,"headers":true,"name":"x"}\r\n'

# Every operation and argument form, with the events each frame yields.
FRAMES: list[tuple[bytes, list[Event]]] = [
    (CONNECT_FRAME, [Connect({"verbose": False, "headers": True, "name": "x"})]),
    (b"PING\r\n", [PING_EVENT]),
    (b"SUB foo 1\r\n", [Sub("foo", None, "1")]),
    (b"SUB foo.* workers 2\r\n", [Sub("foo.*", "workers", "2")]),
    (b"PUB foo 5\r\nhello\r\n", [Pub("foo", None, b"hello")]),
    (b"PUB foo.bar INBOX.22 11\r\nhello world\r\n", [Pub("foo.bar", "INBOX.22", b"hello world")]),
    (b"PUB empty 0\r\n\r\n", [Pub("empty", None, b"")]),
    (b"PUB crlf 4\r\n\r\n\r\n\r\n", [Pub("crlf", None, b"\r\n\r\n")]),
    (
        b"HPUB foo %d %d\r\n%bhi\r\n" % (len(HEADER_BLOCK), len(HEADER_BLOCK) + 2, HEADER_BLOCK),
        [HPub("foo", None, HEADER_BLOCK, b"hi")],
    ),
    (b"HPUB foo reply 0 2\r\nok\r\n", [HPub("foo", "reply", b"", b"ok")]),
    (b"UNSUB 1\r\n", [Unsub("1", None)]),
    (b"UNSUB 2 10\r\n", [Unsub("2", 10)]),
    (b"+OK\r\n", []),
    (b'INFO {"server_id":"x"}\r\n', []),
    (b"pub lower 1\r\nx\r\n", [Pub("lower", None, b"x")]),
    (b"PONG\r\n", [PONG_EVENT]),
    (b"PUB $JS.ACK.S.C.1.2.3.4.5 0\r\n\r\n", [Pub("$JS.ACK.S.C.1.2.3.4.5", None, b"")]),
    (b"PUB $JS.ACK.S.C.1.3.4.4.5 0\r\n\r\n", [Pub("$JS.ACK.S.C.1.3.4.4.5", None, b"")]),
]
STREAM = b"".join(frame for frame, _ in FRAMES)
STREAM_EVENTS = [event for _, events in FRAMES for event in events]


# --------------------------------------------------------------------------- operations


def test_stream_of_every_operation() -> None:
    assert as_pubs(parse(STREAM)) == STREAM_EVENTS


def test_connect() -> None:
    assert parse(b'CONNECT {"verbose":true,"pedantic":false}\r\n') == [
        Connect({"verbose": True, "pedantic": False})
    ]


@pytest.mark.parametrize(
    "data",
    [b"CONNECT{}\r\n", b"CONNECT {}\r\n", b"CONNECT \t {}\r\n", b"CONNECT {}\n", b"connect {}\r\n"],
)
def test_connect_forms(data: bytes) -> None:
    assert parse(data) == [Connect({})]


@pytest.mark.parametrize(
    "data", [b"CONNECT\r\n", b"CONNECT {\r\n", b"CONNECT []\r\n", b"CONNECT {} x\r\n"]
)
def test_connect_bad_json_closes_without_err(data: bytes) -> None:
    error = parse_error(data)
    assert error.close
    assert not error.send_err
    assert error.message.startswith("CONNECT")


def test_pub() -> None:
    assert parse(b"PUB foo 5\r\nhello\r\n") == [Pub("foo", None, b"hello")]
    assert parse(b"PUB foo bar 5\r\nhello\r\n") == [Pub("foo", "bar", b"hello")]


def test_pub_payload_may_hold_anything() -> None:
    payload = bytes(range(256)) + b"\r\nPUB x 1\r\n"
    data = b"PUB foo %d\r\n%b\r\n" % (len(payload), payload)
    assert parse(data) == [Pub("foo", None, payload)]


def test_hpub() -> None:
    assert parse(b"HPUB foo 12 17\r\nname:derek\r\nHELLO\r\n") == [
        HPub("foo", None, b"name:derek\r\n", b"HELLO")
    ]
    assert parse(b"HPUB foo INBOX.22 12 17\r\nname:derek\r\nHELLO\r\n") == [
        HPub("foo", "INBOX.22", b"name:derek\r\n", b"HELLO")
    ]
    assert parse(b"HPUB foo INBOX.22 0 5\r\nHELLO\r\n") == [HPub("foo", "INBOX.22", b"", b"HELLO")]


def test_hpub_headers_only() -> None:
    block = b"NATS/1.0\r\n\r\n"
    assert parse(b"HPUB foo 12 12\r\n" + block + b"\r\n") == [HPub("foo", None, block, b"")]


def test_sub() -> None:
    assert parse(b"SUB foo 1\r\n") == [Sub("foo", None, "1")]
    assert parse(b"SUB foo bar 1\r\n") == [Sub("foo", "bar", "1")]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"UNSUB 1\r\n", Unsub("1", None)),
        (b"UNSUB 1 5\r\n", Unsub("1", 5)),
        # nats-server unsubscribes at once for a zero or unparsable maximum.
        (b"UNSUB 1 0\r\n", Unsub("1", None)),
        (b"UNSUB 1 abc\r\n", Unsub("1", None)),
        (b"UNSUB 1 -3\r\n", Unsub("1", None)),
        (b"UNSUB 1 1234567890\r\n", Unsub("1", None)),
    ],
)
def test_unsub(data: bytes, expected: Unsub) -> None:
    assert parse(data) == [expected]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"PING\r\n", PING_EVENT),
        (b"PONG\r\n", PONG_EVENT),
        (b"PING\n", PING_EVENT),
        (b"ping\r\n", PING_EVENT),
        (b"pOnG\r\n", PONG_EVENT),
        # nats-server ignores anything between PING/PONG and the newline.
        (b"PING  \r  \n", PING_EVENT),
        (b"PONG  \r  \n", PONG_EVENT),
        (b"PINGxyz\r\n", PING_EVENT),
    ],
)
def test_ping_pong(data: bytes, expected: Event) -> None:
    assert parse(data) == [expected]


@pytest.mark.parametrize(
    "data", [b"+OK\r\n", b"+ok\r\n", b"+OK junk\r\n", b'INFO {"a":1}\r\n', b"info{}\n"]
)
def test_ok_and_info_produce_nothing(data: bytes) -> None:
    assert parse(data + b"PING\r\n") == [PING_EVENT]


def test_info_with_bad_json_closes() -> None:
    error = parse_error(b"INFO nope\r\n")
    assert error.close
    assert not error.send_err


def test_err_from_client_closes_silently() -> None:
    # client.go processErr: a CLIENT's -ERR is logged and the connection closed.
    error = parse_error(b"-ERR 'oops'\r\n")
    assert error.message == "Client Error 'oops'"
    assert error.close
    assert not error.send_err


@pytest.mark.parametrize(
    ("name", "template"),
    [
        ("PUB", b"%s foo 5\r\nhello\r\n"),
        ("HPUB", b"%s foo 12 17\r\nname:derek\r\nHELLO\r\n"),
        ("SUB", b"%s foo 1\r\n"),
        ("UNSUB", b"%s 1\r\n"),
        ("PING", b"%s\r\n"),
        ("PONG", b"%s\r\n"),
        ("CONNECT", b"%s {}\r\n"),
        ("INFO", b"%s {}\r\nPING\r\n"),
        ("+OK", b"%s\r\nPING\r\n"),
    ],
)
@pytest.mark.parametrize(
    "case", [str.lower, str.title, str.swapcase, lambda s: s[:-1] + s[-1:].lower()]
)
def test_operation_names_are_case_insensitive(
    name: str, template: bytes, case: Callable[[str], str]
) -> None:
    upper = parse(template % name.encode())
    assert upper
    assert parse(template % case(name).encode()) == upper


@pytest.mark.parametrize("blank", [b"\t", b"  ", b" \t ", b"\t\t"])
def test_blanks_between_arguments(blank: bytes) -> None:
    frames = [
        (b"PUB%bfoo%bbar%b5\r\nhello\r\n", Pub("foo", "bar", b"hello")),
        (b"HPUB%bfoo%b0%b2\r\nhi\r\n", HPub("foo", None, b"", b"hi")),
        (b"SUB%bfoo%bq%b1\r\n", Sub("foo", "q", "1")),
        (b"UNSUB%b1%b5%b\r\n", Unsub("1", 5)),
    ]
    for template, expected in frames:
        assert parse(template % (blank, blank, blank)) == [expected]


def test_trailing_blanks_are_ignored() -> None:
    assert parse(b"PUB foo 2 \t\r\nhi\r\n") == [Pub("foo", None, b"hi")]
    assert parse(b"SUB foo 1  \r\n") == [Sub("foo", None, "1")]


def test_newline_only_control_lines() -> None:
    # parser.go drops an optional '\r' before '\n'; payloads still need CRLF.
    assert parse(b"PUB foo 2\nhi\r\nSUB a 1\nPING\n") == [
        Pub("foo", None, b"hi"),
        Sub("a", None, "1"),
        PING_EVENT,
    ]


def test_many_frames_in_one_chunk() -> None:
    frame = b"PUB foo.bar 3\r\nabc\r\n"
    assert parse(frame * 5000) == [Pub("foo.bar", None, b"abc")] * 5000


@pytest.mark.parametrize(
    ("data", "partial"),
    [
        (b"PUB a 3\r\nabc\r\n", False),
        (b"PUB a 3\r\nabc\r\nPUB a 3\r\nab", True),  # inside a payload
        (b"PUB a 3\r\nabc\r\nPU", True),  # inside a control line
        (b"PUB a 3\r\nabc", True),  # the frame's CRLF not read yet
        (b"PING\r\n", False),
    ],
)
def test_partial_says_whether_a_frame_is_left_unfinished(data: bytes, partial: bool) -> None:
    parser = Parser()
    assert not parser.partial
    parser.receive_data(data)
    parser.events()
    assert parser.partial is partial


def test_partial_counts_a_read_waiting_for_the_rest_of_a_large_frame() -> None:
    parser = Parser()
    parser.receive_data(b"PUB a 10000\r\n" + b"x" * 5000)
    assert parser.events() == []
    parser.receive_data(b"x" * 1000)  # still short: buffered, not parsed
    assert parser.events() == []
    assert parser.partial
    parser.receive_data(b"x" * 4000 + b"\r\n")
    assert len(expand(parser.events())) == 1
    assert not parser.partial


def test_non_utf8_subject_round_trips() -> None:
    [event] = parse(b"PUB \xff\xfe 1\r\nx\r\n")
    assert isinstance(event, Pub)
    assert event.subject.encode("utf-8", "surrogateescape") == b"\xff\xfe"


def test_utf8_subject() -> None:
    assert parse("PUB größe 1\r\nx\r\n".encode()) == [Pub("größe", None, b"x")]


def ack_frame(seq: int, body: bytes = b"", reply: bytes = b"") -> bytes:
    subject = b"$JS.ACK.ORDERS.worker.1.%d.%d.1732170000000000000.0" % (seq, seq)
    head = b" ".join([b"PUB", subject, *([reply] if reply else []), b"%d" % len(body)])
    return head + b"\r\n" + body + b"\r\n"


def ack_subject(seq: int) -> str:
    return f"$JS.ACK.ORDERS.worker.1.{seq}.{seq}.1732170000000000000.0"


def test_plain_acks_arrive_as_one_run() -> None:
    # nats.py sends an empty body, nats.go and nats.js "+ACK".
    data = ack_frame(1) + ack_frame(2, b"+ACK") + ack_frame(3)
    assert parse(data) == [Acks([ack_subject(1), ack_subject(2), ack_subject(3)], 4)]


def test_acks_as_nats_py_writes_them_arrive_as_one_run() -> None:
    # nats.py writes the empty reply of `msg.ack()` as a second blank before the size.
    data = b"".join(ack_frame(seq).replace(b" 0\r\n", b"  0\r\n") for seq in (1, 2, 3))
    assert parse(data) == [Acks([ack_subject(1), ack_subject(2), ack_subject(3)], 0)]


def test_ack_run_ends_at_any_other_frame() -> None:
    data = b"".join(
        [
            ack_frame(1),
            ack_frame(2, reply=b"_INBOX.x"),  # ack_sync waits for an answer
            ack_frame(3, b"-NAK"),
            ack_frame(4, b"+WPI"),  # four bytes, but not +ACK
            ack_frame(5),
            ack_frame(6),
            b"PING\r\n",
            ack_frame(7).lower(),
            ack_frame(8).replace(b" ", b"  ", 1),
            ack_frame(9),
        ]
    )
    assert parse(data) == [
        Acks([ack_subject(1)], 0),
        Pub(ack_subject(2), "_INBOX.x", b""),
        Pub(ack_subject(3), None, b"-NAK"),
        Pub(ack_subject(4), None, b"+WPI"),
        Acks([ack_subject(5), ack_subject(6)], 0),
        PING_EVENT,
        Pub(ack_subject(7).lower(), None, b""),
        Pub(ack_subject(8), None, b""),
        Acks([ack_subject(9)], 0),
    ]


def test_ack_run_reads_subjects_as_the_general_path_does() -> None:
    # A vertical tab separates arguments like a blank: this is a subject and a reply.
    assert parse(b"PUB $JS.ACK.a\x0bb 0\r\n\r\n") == [Pub("$JS.ACK.a", "b", b"")]
    # Bytes that are not UTF-8 survive, as in any subject.
    assert parse(b"PUB $JS.ACK.\xff 0\r\n\r\n") == [Acks(["$JS.ACK.\udcff"], 0)]


def test_ack_run_stops_at_an_incomplete_frame() -> None:
    data = ack_frame(1) + ack_frame(2)
    parser = Parser()
    parser.receive_data(data[:-3])
    assert parser.events() == [Acks([ack_subject(1)], 0)]
    parser.receive_data(data[-3:])
    assert parser.events() == [Acks([ack_subject(2)], 0)]


def test_long_ack_subjects_keep_the_control_line_limit() -> None:
    subject = b"$JS.ACK." + b"s" * 2000
    frame = b"PUB " + subject + b" 0\r\n\r\n"
    assert parse(frame, max_control_line=4096) == [Pub(subject.decode(), None, b"")]
    assert parse_error(frame, max_control_line=1024).message == MAX_CONTROL_LINE_EXCEEDED
    # Under a low limit no frame takes the run path, whose lines may be longer.
    assert parse(ack_frame(1), max_control_line=100) == [Pub(ack_subject(1), None, b"")]


# --------------------------------------------------------------------------- headers negotiation


def test_hpub_rejected_after_connect_without_headers() -> None:
    # client_test.go: CONNECT {} then HPUB -> ErrMsgHeadersNotSupported.
    error = parse_error(b"CONNECT {}\r\nHPUB foo 0 2\r\nok\r\n")
    assert error.message == "message headers not supported"
    assert error.close
    assert not error.send_err
    assert error.events == [Connect({})]


def test_hpub_accepted_after_connect_with_headers() -> None:
    assert parse(b'CONNECT {"headers":true}\r\nHPUB foo 0 2\r\nok\r\n') == [
        Connect({"headers": True}),
        HPub("foo", None, b"", b"ok"),
    ]


def test_server_without_header_support_rejects_hpub() -> None:
    data = b'CONNECT {"headers":true}\r\nHPUB foo 0 2\r\nok\r\n'
    assert parse_error(data, headers=False).message == "message headers not supported"
    assert parse_error(b"HPUB foo 0 2\r\nok\r\n", headers=False).events == []


def test_headers_attribute_can_be_toggled() -> None:
    parser = Parser(headers=False)
    parser.headers = True
    parser.receive_data(b"HPUB foo 0 2\r\nok\r\n")
    assert parser.events() == [HPub("foo", None, b"", b"ok")]
    parser.headers = False
    parser.receive_data(b"hpub foo 0 2\r\nok\r\n")
    with pytest.raises(ProtocolError):
        parser.events()


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "data",
    [
        b"FOO\r\n",
        b"PUBX foo 1\r\nx\r\n",
        b"PUB\r\n",
        b"PUB\n",
        b"SUB\r\n",
        b"UNSUB\r\n",
        b"HPUB\r\n",
        b"\r\n",
        b"\n",
        b" PUB foo 1\r\nx\r\n",
        b"-ERR\r\n",
        b"+O\r\n",
        b"PIN\r\n",
        # Operations nats-server accepts only from routes, gateways or leafnodes.
        b"MSG foo 1 1\r\nx\r\n",
        b"HMSG foo 1 0 1\r\nx\r\n",
        b"RS+ $G foo\r\n",
        b"LS+ $G foo\r\n",
        b"A+ foo\r\n",
        b"RMSG $G foo 1\r\nx\r\n",
    ],
)
def test_unknown_protocol_operation(data: bytes) -> None:
    error = parse_error(data)
    assert error.message == UNKNOWN_PROTOCOL_OPERATION
    assert error.close
    assert error.send_err


@pytest.mark.parametrize("data", [b"X", b"PUX", b"PINX", b"CONNEC\r", b"\r", b"-E\t"])
def test_unknown_operation_detected_before_the_newline(data: bytes) -> None:
    # nats-server's state machine fails on the first impossible byte.
    assert parse_error(data).message == UNKNOWN_PROTOCOL_OPERATION


@pytest.mark.parametrize(
    "data",
    [
        b"PUB foo 2\r\nokX\r\n",
        b"PUB foo 2\r\nok\rX",
        b"PUB foo 2\r\nok\n\r",
        b"PUB foo.bar 11\r\nhello world hello world\r\n",
        b"PUB foo 1\r\nhi\r\n",
        b"HPUB foo 0 2\r\nokk\r\n",
    ],
)
def test_payload_must_be_followed_by_crlf(data: bytes) -> None:
    assert parse_error(data).message == UNKNOWN_PROTOCOL_OPERATION


def test_bad_payload_end_detected_before_frame_completes() -> None:
    assert parse_error(b"PUB foo 2\r\nokX").message == UNKNOWN_PROTOCOL_OPERATION
    assert parse(b"PUB foo 2\r\nok\r") == []


@pytest.mark.parametrize(
    ("data", "prefix"),
    [
        (b"PUB foo\r\n", "processPub Parse Error"),
        (b"PUB a b c 1\r\nx\r\n", "processPub Parse Error"),
        (b"PUB foo x\r\n", "processPub Bad or Missing Size"),
        (b"PUB foo -1\r\n", "processPub Bad or Missing Size"),
        (b"PUB foo 1.0\r\n", "processPub Bad or Missing Size"),
        (b"PUB foo 3333333333333333333333\r\n", "processPub Bad or Missing Size"),
        (b"PUB foo 1234567890\r\n", "processPub Bad or Missing Size"),
        (b"HPUB foo 1\r\n", "processHeaderPub Parse Error"),
        (b"HPUB a b c 1 2\r\n", "processHeaderPub Parse Error"),
        (b"HPUB foo x 2\r\n", "processHeaderPub Bad or Missing Header Size"),
        (b"HPUB foo -1 2\r\n", "processHeaderPub Bad or Missing Header Size"),
        (b"HPUB foo 2 x\r\n", "processHeaderPub Bad or Missing Total Size"),
        (b"HPUB foo 10 8\r\n", "processHeaderPub Header Size larger then TotalSize"),
        (b"SUB foo\r\n", "processSub Parse Error"),
        (b"SUB a b c d\r\n", "processSub Parse Error"),
        (b"SUB \r\n", "processSub Parse Error"),
        (b"UNSUB 1 2 3\r\n", "processUnsub Parse Error"),
        (b"UNSUB \r\n", "processUnsub Parse Error"),
    ],
)
def test_argument_errors_close_without_err(data: bytes, prefix: str) -> None:
    # readLoop: these errors close the connection (ProtocolViolation) and
    # nothing is sent to the client.
    error = parse_error(data)
    assert error.message.startswith(prefix)
    assert error.close
    assert not error.send_err


def test_max_payload() -> None:
    assert parse(b"PUB foo 4\r\nabcd\r\n", max_payload=4) == [Pub("foo", None, b"abcd")]
    error = parse_error(b"PUB foo 5\r\n", max_payload=4)
    assert error.message == MAXIMUM_PAYLOAD_VIOLATION
    assert error.close
    assert error.send_err


def test_max_payload_counts_headers_too() -> None:
    assert parse(b"HPUB foo 2 4\r\nabcd\r\n", max_payload=4) == [HPub("foo", None, b"ab", b"cd")]
    error = parse_error(b"HPUB foo 2 5\r\n", max_payload=4)
    assert error.message == MAXIMUM_PAYLOAD_VIOLATION


def test_max_payload_is_checked_before_the_payload_arrives() -> None:
    assert parse_error(b"PUB foo 1000\r\nab", max_payload=10).message == MAXIMUM_PAYLOAD_VIOLATION


def test_max_payload_can_change_between_reads() -> None:
    parser = Parser(max_payload=1)
    parser.max_payload = 3
    parser.receive_data(b"PUB foo 3\r\nabc\r\n")
    assert expand(parser.events()) == [Pub("foo", None, b"abc")]


@pytest.mark.parametrize(
    ("data", "fails"),
    [
        (b"PUB foo.bar.baz 2\r\nok\r\n", True),
        (b"PUB foo.bar 2\r\nok\r\n", True),
        (b"PUB foo 2\r\nok\r\n", False),
    ],
)
def test_max_control_line_like_nats_server(data: bytes, fails: bool) -> None:
    # parser_test.go TestMaxControlLine: mcl 8, whole and split after 14 bytes.
    for chunks in ([data], [data[:14], data[14:]]):
        error = run(chunks, max_control_line=8)[1]
        assert error == (MAX_CONTROL_LINE_EXCEEDED if fails else None)


@pytest.mark.parametrize("op", [b"PUB", b"SUB", b"UNSUB", b"CONNECT", b"INFO", b"HPUB", b"PING"])
def test_max_control_line_counts_the_argument(op: bytes) -> None:
    mcl = 64
    fits = op + b" \t" + b"x" * mcl + b"\r\n"
    too_long = op + b" " + b"x" * (mcl + 1) + b"\r\n"
    # At the limit: whatever goes wrong, it is not the control line.
    assert run([fits], max_control_line=mcl)[1] != MAX_CONTROL_LINE_EXCEEDED
    for chunks in ([too_long], [too_long[:-2]], [too_long[:-1]], split_at(too_long, [5, 40])):
        error = run(chunks, max_control_line=mcl)[1]
        assert error == MAX_CONTROL_LINE_EXCEEDED, chunks


def test_max_control_line_error_is_sent_and_closes() -> None:
    error = parse_error(b"SUB " + b"x" * 5000, max_control_line=4096)
    assert error.message == MAX_CONTROL_LINE_EXCEEDED
    assert error.close
    assert error.send_err


def test_line_padded_with_blanks_is_bounded() -> None:
    # nats-server skips unbounded blanks after an operation name; this parser
    # rejects a line more than twice the limit long so it never buffers more.
    assert run([b"PUB" + b" " * 200], max_control_line=64)[1] == MAX_CONTROL_LINE_EXCEEDED
    assert run([b"PUB" + b" " * 100 + b"a 0\r\n\r\n"], max_control_line=64) == (
        [Pub("a", None, b"")],
        None,
    )


def test_error_carries_preceding_events() -> None:
    error = parse_error(b"PING\r\nSUB foo 1\r\nBOGUS\r\nPONG\r\n")
    assert error.events == [PING_EVENT, Sub("foo", None, "1")]


def test_parser_refuses_input_after_an_error() -> None:
    parser = Parser()
    parser.receive_data(b"PING\r\nBOGUS\r\n")
    with pytest.raises(ProtocolError) as first:
        parser.events()
    assert first.value.events == [PING_EVENT]
    for call in (lambda: parser.receive_data(b"PING\r\n"), parser.events, parser.next_event):
        with pytest.raises(ProtocolError) as again:
            call()
        assert again.value.message == UNKNOWN_PROTOCOL_OPERATION
        assert again.value.events == []


# --------------------------------------------------------------------------- next_event


def test_next_event() -> None:
    parser = Parser()
    assert parser.next_event() is None
    parser.receive_data(b"PING\r\nPUB foo 3\r\nab")
    assert parser.next_event() == PING_EVENT
    assert parser.next_event() is None
    parser.receive_data(b"c\r\nPONG\r\n")
    assert parser.next_event() == Pub("foo", None, b"abc")
    assert parser.next_event() == PONG_EVENT
    assert parser.next_event() is None


def test_next_event_hands_out_events_before_an_error() -> None:
    parser = Parser()
    parser.receive_data(b"PING\r\nPONG\r\nBOGUS\r\n")
    assert parser.next_event() == PING_EVENT
    assert parser.next_event() == PONG_EVENT
    with pytest.raises(ProtocolError):
        parser.next_event()


def test_receive_data_accepts_bytes_like() -> None:
    parser = Parser()
    parser.receive_data(bytearray(b"PUB foo 1\r\n"))
    parser.receive_data(memoryview(b"x\r\n"))
    parser.receive_data(b"")
    assert expand(parser.events()) == [Pub("foo", None, b"x")]


# --------------------------------------------------------------------------- splitting


def test_stream_split_at_every_byte_boundary() -> None:
    for cut in range(len(STREAM) + 1):
        assert run([STREAM[:cut], STREAM[cut:]]) == (STREAM_EVENTS, None), cut


@pytest.mark.parametrize(("frame", "events"), FRAMES)
def test_every_frame_split_at_every_pair_of_boundaries(frame: bytes, events: list[Event]) -> None:
    connected = run([CONNECT_FRAME])[0]  # enables headers for HPUB
    for i in range(len(frame) + 1):
        for j in range(i, len(frame) + 1):
            chunks = [CONNECT_FRAME, frame[:i], frame[i:j], frame[j:]]
            assert run(chunks) == ([*connected, *events], None), (i, j)


def test_stream_fed_one_byte_at_a_time() -> None:
    assert run([STREAM[i : i + 1] for i in range(len(STREAM))]) == (STREAM_EVENTS, None)


@pytest.mark.parametrize(
    "data",
    [
        b"PING\r\nBOGUS\r\n",
        b"PUB foo 2\r\nokX\r\n",
        b"PUB foo 5\r\n",
        b"SUB " + b"x" * 100,
        b"PUB foo 1\r\nx\r\nHPUB foo 3 2\r\n",
    ],
)
def test_errors_do_not_depend_on_splitting(data: bytes) -> None:
    whole = run([data], max_control_line=64, max_payload=4)
    for cut in range(len(data) + 1):
        assert run(split_at(data, [cut]), max_control_line=64, max_payload=4) == whole


def test_large_payload_in_small_reads_is_not_quadratic() -> None:
    size = 16 * 1024 * 1024
    parser = Parser(max_payload=size)
    data = b"PUB big %d\r\n" % size + b"x" * size + b"\r\n"
    started = time.perf_counter()
    for i in range(0, len(data), 1024):
        parser.receive_data(data[i : i + 1024])
        events = parser.events()
    elapsed = time.perf_counter() - started
    assert expand(events) == [Pub("big", None, b"x" * size)]
    # Re-joining the buffer on every read would copy ~128 GiB here.
    assert elapsed < 10


# --------------------------------------------------------------------------- properties

_SPACE = b" \t\n\r\x0b\x0c"
tokens = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zs", "Zl", "Zp")),
    min_size=1,
    max_size=12,
).filter(lambda s: not any(c in _SPACE for c in s.encode()))
sizes = st.integers(min_value=1, max_value=999_999_999)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
events_st: st.SearchStrategy[Event] = st.one_of(
    st.builds(Pub, tokens, st.none() | tokens, st.binary(max_size=200)),
    st.builds(HPub, tokens, st.none() | tokens, st.binary(max_size=60), st.binary(max_size=100)),
    st.builds(Sub, tokens, st.none() | tokens, tokens),
    st.builds(Unsub, tokens, st.none() | sizes),
    st.just(PING_EVENT),
    st.just(PONG_EVENT),
    # Plain acks, which the parser hands over in runs.
    st.builds(lambda subject: Pub("$JS.ACK." + subject, None, b""), tokens),
    st.builds(
        lambda extra: Connect({**extra, "headers": True}),
        st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    ),
)


class Style(NamedTuple):
    """How a client might spell operation names and separate arguments."""

    case: Callable[[bytes], bytes]
    blank: bytes
    trail: bytes
    eol: bytes

    def line(self, name: bytes, *args: bytes) -> bytes:
        return self.blank.join([self.case(name), *args]) + (self.trail if args else b"") + self.eol


styles = st.builds(
    Style,
    st.sampled_from([bytes.upper, bytes.lower, bytes.title, bytes.swapcase]),
    st.sampled_from([b" ", b"\t", b"  ", b" \t"]),
    st.sampled_from([b"", b" ", b"\t"]),
    st.sampled_from([b"\r\n", b"\n"]),
)


def encode(event: Event, style: Style) -> bytes:
    """A client's bytes for ``event``, built independently of the parser."""

    def tok(text: str | None) -> list[bytes]:
        return [] if text is None else [text.encode()]

    line = style.line
    if isinstance(event, Connect):
        # JSON strings may hold blanks, so no trailing blank games here.
        return style.case(b"CONNECT") + style.blank + msgspec.json.encode(event.options) + style.eol
    if isinstance(event, Ping):
        return line(b"PING")
    if isinstance(event, Pong):
        return line(b"PONG")
    if isinstance(event, Pub):
        size = b"%d" % len(event.payload)
        return line(b"PUB", *tok(event.subject), *tok(event.reply), size) + event.payload + b"\r\n"
    if isinstance(event, HPub):
        hdr = b"%d" % len(event.headers)
        total = b"%d" % (len(event.headers) + len(event.payload))
        head = line(b"HPUB", *tok(event.subject), *tok(event.reply), hdr, total)
        return head + event.headers + event.payload + b"\r\n"
    if isinstance(event, Sub):
        return line(b"SUB", *tok(event.subject), *tok(event.queue), *tok(event.sid))
    max_msgs = [] if event.max_msgs is None else [b"%d" % event.max_msgs]
    return line(b"UNSUB", *tok(event.sid), *max_msgs)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(events_st, styles), max_size=12),
    st.lists(st.integers(min_value=0, max_value=4000), max_size=8),
)
def test_valid_frames_round_trip_under_any_split(
    frames: list[tuple[Event, Style]], cuts: list[int]
) -> None:
    data = b"".join(encode(event, style) for event, style in frames)
    expected = [event for event, _ in frames]
    assert run([data]) == (expected, None)
    assert run(split_at(data, cuts)) == (expected, None)


garbage_alphabet = st.sampled_from(
    [
        b"PUB ",
        b"HPUB ",
        b"SUB ",
        b"UNSUB ",
        b"PING",
        b"PONG",
        b"CONNECT ",
        b"INFO ",
        b"+OK",
        b"-ERR ",
        b"\r\n",
        b"\r",
        b"\n",
        b" ",
        b"\t",
        b"0",
        b"1",
        b"2",
        b"12",
        b"foo",
        b"{}",
        b"x",
        b"NATS/1.0",
        b"\x00",
        b"\xff",
        b"pub ",
        b"99999999999",
    ]
)
garbage = st.one_of(
    st.binary(max_size=300),
    st.lists(garbage_alphabet, max_size=60).map(b"".join),
)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(garbage, st.lists(st.integers(min_value=0, max_value=400), max_size=6))
def test_garbage_only_raises_protocol_error_and_ignores_splitting(
    data: bytes, cuts: list[int]
) -> None:
    # run() lets anything but ProtocolError escape, and hypothesis' deadline
    # catches hangs; the result must not depend on how reads split the input.
    kwargs = {"max_control_line": 16, "max_payload": 8}
    assert run(split_at(data, cuts), **kwargs) == run([data], **kwargs)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(events_st, styles), min_size=1, max_size=6),
    st.data(),
)
def test_corrupted_valid_streams(frames: list[tuple[Event, Style]], data: st.DataObject) -> None:
    stream = bytearray(b"".join(encode(event, style) for event, style in frames))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(stream) - 1))
        stream[at] = data.draw(st.integers(0, 255))
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=5))
    assert run(split_at(bytes(stream), cuts)) == run([bytes(stream)])


@given(st.integers(min_value=0, max_value=2000), st.integers(min_value=0, max_value=2000))
def test_max_payload_property(size: int, limit: int) -> None:
    data = b"PUB foo %d\r\n" % size + b"x" * size + b"\r\n"
    events, error = run([data], max_payload=limit)
    if size > limit:
        assert (events, error) == ([], MAXIMUM_PAYLOAD_VIOLATION)
    else:
        assert (events, error) == ([Pub("foo", None, b"x" * size)], None)


@given(st.integers(min_value=1, max_value=300), st.integers(min_value=8, max_value=300), st.data())
def test_max_control_line_property(subject_len: int, limit: int, data: st.DataObject) -> None:
    frame = b"PUB " + b"s" * subject_len + b" 0\r\n\r\n"
    arg_len = subject_len + 2
    cuts = data.draw(st.lists(st.integers(0, len(frame)), max_size=3))
    events, error = run(split_at(frame, cuts), max_control_line=limit)
    if arg_len > limit:
        assert (events, error) == ([], MAX_CONTROL_LINE_EXCEEDED)
    else:
        assert (events, error) == ([Pub("s" * subject_len, None, b"")], None)


# --------------------------------------------------------------------------- runs of PUBs


def test_a_run_of_pubs_is_one_event_with_the_clients_bytes() -> None:
    parser = Parser()
    parser.receive_data(
        b"PUB a.1 _INBOX.x.1 3\r\nabc\r\nPUB a.1 2\r\nde\r\nPUB \xff.b _INBOX.x.2 4\r\n\r\n\r\n\r\n"
    )
    [run] = parser.events()
    assert run == Pubs(
        subjects=[b"a.1", b"a.1", b"\xff.b"],
        replies=[b"_INBOX.x.1", None, b"_INBOX.x.2"],
        payloads=[b"abc", b"de", b"\r\n\r\n"],
        payload_bytes=9,
    )
    # What the frames are, one by one.
    assert run.pubs() == [
        Pub("a.1", "_INBOX.x.1", b"abc"),
        Pub("a.1", None, b"de"),
        Pub("\udcff.b", "_INBOX.x.2", b"\r\n\r\n"),
    ]


def test_a_run_ends_at_any_other_frame_and_resumes_after_it() -> None:
    parser = Parser()
    ack = b"PUB $JS.ACK.S.C.1.1.1.1.0 0\r\n\r\n"
    parser.receive_data(
        b"PUB a 1\r\nx\r\nPING\r\nPUB b 1\r\ny\r\n" + ack + b"PUB c 1\r\nz\r\nPUB\td 1\r\nw\r\n"
    )
    events = parser.events()
    assert [type(e).__name__ for e in events] == ["Pubs", "Ping", "Pubs", "Acks", "Pubs", "Pub"]
    assert [e.subjects for e in events if isinstance(e, Pubs)] == [[b"a"], [b"b"], [b"c"]]
    assert events[-1] == Pub("d", None, b"w")  # a tab: nats-server's rules, frame by frame


def test_a_run_stops_before_a_frame_not_yet_whole() -> None:
    parser = Parser()
    parser.receive_data(b"PUB a 1\r\nx\r\nPUB a 5\r\nhel")
    assert parser.events() == [Pubs([b"a"], [None], [b"x"], 1)]
    parser.receive_data(b"lo\r\nPUB a 1\r\ny\r\n")
    assert expand(parser.events()) == [Pub("a", None, b"hello"), Pub("a", None, b"y")]


def test_a_run_keeps_the_limits_of_a_lone_pub() -> None:
    parser = Parser(max_payload=4)
    parser.receive_data(b"PUB a 1\r\nx\r\nPUB a 5\r\nhello\r\n")
    with pytest.raises(ProtocolError) as info:
        parser.events()
    assert info.value.message == MAXIMUM_PAYLOAD_VIOLATION
    assert info.value.events == [Pubs([b"a"], [None], [b"x"], 1)]


# --------------------------------------------------------------------------- runs of one shape

# Frames of a few shapes (subject, payload size, a reply or none), so that runs of one shape
# form, with payloads on both sides of the size handed over as views.
_replies = st.binary(min_size=1, max_size=40).map(lambda r: b"_I." + r.hex().encode())
_shaped_frames = st.lists(
    st.tuples(
        st.sampled_from([b"a", b"orders.new"]),
        st.sampled_from([0, 3, VIEW_PAYLOADS - 1, VIEW_PAYLOADS + 500]),
        st.one_of(
            st.none(), st.binary(min_size=1, max_size=40).map(lambda r: b"_I." + r.hex().encode())
        ),
        st.binary(min_size=1, max_size=1),
    ),
    max_size=30,
)


def _shaped(frames: list[tuple[bytes, int, bytes | None, bytes]]) -> bytes:
    out = b""
    for subject, size, reply, fill in frames:
        payload = (fill + b"\r\nPUB a 3\r\n") * size
        out += b"PUB %s%s %d\r\n%s\r\n" % (
            subject,
            b"" if reply is None else b" " + reply,
            size,
            payload[:size],
        )
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_shaped_frames, st.lists(st.integers(min_value=0, max_value=60_000), max_size=6))
def test_runs_of_one_shape_read_as_frame_by_frame(
    frames: list[tuple[bytes, int, bytes | None, bytes]], cuts: list[int]
) -> None:
    # Byte by byte, no two frames are ever in the buffer together: each is read on its own.
    data = _shaped(frames)
    alone = run([data[i : i + 1] for i in range(len(data))])
    assert run(split_at(data, cuts)) == alone
    assert run([data]) == alone
    assert len(alone[0]) == len(frames) and alone[1] is None


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_shaped_frames, st.integers(min_value=24, max_value=80), st.data())
def test_runs_of_one_shape_keep_the_control_line_limit(
    frames: list[tuple[bytes, int, bytes | None, bytes]], limit: int, data: st.DataObject
) -> None:
    stream = _shaped(frames)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=4))
    alone = run([stream[i : i + 1] for i in range(len(stream))], max_control_line=limit)
    assert run(split_at(stream, cuts), max_control_line=limit) == alone
    assert run([stream], max_control_line=limit) == alone


def test_a_run_of_one_shape_is_one_event() -> None:
    big = b"x" * VIEW_PAYLOADS
    frames = b"".join(b"PUB s _I.%d %d\r\n%s\r\n" % (n, len(big), big) for n in range(50))
    frames += b"".join(b"PUB s 2\r\nhi\r\n" for _ in range(50))
    parser = Parser()
    parser.receive_data(frames)
    [event] = parser.events()
    assert isinstance(event, Pubs)
    assert event.subjects == [b"s"] * 100
    assert event.replies == [b"_I.%d" % n for n in range(50)] + [None] * 50
    assert event.payloads == [big] * 50 + [b"hi"] * 50
    assert event.payload_bytes == 50 * len(big) + 100
    # Large payloads are views of what was read; a Pub of the run has bytes.
    assert all(type(p) is memoryview for p in event.payloads[2:50])
    assert all(type(p.payload) is bytes for p in event.pubs())


def test_a_frame_across_reads_then_the_rest_of_the_read() -> None:
    parser = Parser()
    frame = b"PUB s 2000\r\n" + b"y" * 2000 + b"\r\n"
    parser.receive_data(frame + frame[:700])
    assert expand(parser.events()) == [Pub("s", None, b"y" * 2000)]
    parser.receive_data(frame[700:] + frame + b"PING\r\nPUB s 2000\r\nyy")
    assert expand(parser.events()) == [Pub("s", None, b"y" * 2000)] * 2 + [Ping()]
    parser.receive_data(b"y" * 1998 + b"\r\r")
    with pytest.raises(ProtocolError) as info:
        parser.events()
    assert info.value.message == UNKNOWN_PROTOCOL_OPERATION


def test_a_connection_has_runs_of_a_bounded_number_of_shapes() -> None:
    # Each new size a new shape: past the bound, frames are read one by one, all the same.
    sizes = range(SHAPES_PER_CONNECTION + 10)
    data = b"".join(b"PUB s %d\r\n%s\r\n" % (n, b"z" * n) * 3 for n in sizes)
    parser = Parser()
    parser.receive_data(data)
    assert expand(parser.events()) == [Pub("s", None, b"z" * n) for n in sizes for _ in range(3)]
    assert len(parser._shapes) == SHAPES_PER_CONNECTION
