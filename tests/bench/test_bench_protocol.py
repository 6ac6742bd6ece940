"""The load generator's parser: frames split anywhere across reads come out whole."""

from __future__ import annotations

import pytest

from infinistream.protocol import Parser as ServerParser
from infinistream.protocol import Pub, Pubs
from infinistream_bench.protocol import (
    Parser,
    ProtocolError,
    inbox_id,
    pub,
    pub_cycle,
    status_code,
)

STREAM = (
    b'INFO {"server_id":"x","max_payload":1048576}\r\n'
    b"PING\r\n"
    b'MSG _INBOX.a.1 1 27\r\n{"stream":"TP","seq":12345}\r\n'
    b"HMSG _INBOX.a.2 1 16 16\r\nNATS/1.0 503\r\n\r\n\r\n"
    b"MSG f.x 7 $JS.ACK.F.R.1.1.1.17.0 5\r\nhe\r\no\r\n"
    b"+OK\r\nPONG\r\n"
    b"HMSG _INBOX.q.1 9 32 34\r\nNATS/1.0 408 Request Timeout\r\n\r\nhi\r\n"
)
EXPECTED = [
    (b"_INBOX.a.1", b"1", None, None, b'{"stream":"TP","seq":12345}'),
    (b"_INBOX.a.2", b"1", None, b"NATS/1.0 503\r\n\r\n", b""),
    (b"f.x", b"7", b"$JS.ACK.F.R.1.1.1.17.0", None, b"he\r\no"),
    (b"_INBOX.q.1", b"9", None, b"NATS/1.0 408 Request Timeout\r\n\r\n", b"hi"),
]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, len(STREAM)])
def test_split_reads_give_whole_messages(size: int) -> None:
    parser = Parser()
    out = []
    for i in range(0, len(STREAM), size):
        out.extend(parser.feed(STREAM[i : i + size]))
    assert out == EXPECTED
    assert parser.info == {"server_id": "x", "max_payload": 1048576}
    assert (parser.pings, parser.pongs) == (1, 1)


def test_err_raises() -> None:
    with pytest.raises(ProtocolError, match="Authorization"):
        Parser().feed(b"-ERR 'Authorization Violation'\r\n")


def test_frames_and_status() -> None:
    assert pub("a.b", "_INBOX.1", b"xy") == b"PUB a.b _INBOX.1 2\r\nxy\r\n"
    assert pub("a.b", None, b"") == b"PUB a.b 0\r\n\r\n"
    assert status_code(b"NATS/1.0 404 No Messages\r\n\r\n") == 404
    assert status_code(None) == 0


def test_cycled_frames_reply_each_publish_to_its_own_subject() -> None:
    """The frames of a throughput run, read by the agent's own parser: as many publishes as
    asked, each replying to a distinct subject under the inbox, as long as nats-py's."""
    inbox = "_INBOX." + inbox_id("p123c4")
    frames = pub_cycle("tp.1.128", inbox, b"x" * 128, 300)
    parser = ServerParser()
    parser.receive_data(frames)
    # A run of PUB frames comes out as one `Pubs` event: one `Pub` per frame once unfolded.
    pubs: list[Pub] = []
    for event in parser.events():
        assert isinstance(event, Pub | Pubs)
        pubs += [event] if isinstance(event, Pub) else event.pubs()
    assert len(pubs) == 300
    assert {p.subject for p in pubs} == {"tp.1.128"} and {p.payload for p in pubs} == {b"x" * 128}
    replies = [p.reply or "" for p in pubs]
    assert len(set(replies)) == 300
    assert all(r.startswith(inbox + ".") for r in replies)
    # nats-py: _INBOX.<22-character NUID>.<22-character NUID + 4 hex digits>
    assert {len(r) for r in replies} == {len("_INBOX.") + 22 + 1 + 26}
    # One frame length: a slice of whole frames is a whole number of publishes.
    assert len(frames) % 300 == 0
