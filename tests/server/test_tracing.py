"""The pieces of `-V` tracing that are pure: Go's quoting of payloads, the frame splitter over
bytes that arrive in any pieces, the redaction of secrets in a traced CONNECT. (The trace
lines themselves are checked on real servers in tests/logs/test_flags.py.)"""

from __future__ import annotations

from infinistream.server.tracing import Frames, client_label, go_quote, redact


def test_go_quote_matches_go() -> None:
    # Expected values are Go's fmt.Sprintf("%q", ...) without the quotes.
    assert go_quote(b'say "hi"\r\n') == 'say \\"hi\\"\\r\\n'
    assert go_quote(b"tab\tnul\x00del\x7f") == "tab\\tnul\\x00del\\x7f"
    assert go_quote("héllo ✓".encode()) == "héllo ✓"
    assert go_quote(b"\xff\xfe bad") == "\\xff\\xfe bad"
    assert go_quote(b"back\\slash") == "back\\\\slash"


def test_frames_split_across_reads() -> None:
    data = (
        b'CONNECT {"verbose":false}\r\nPUB a.b r 5\r\nhello\r\n'
        b"HPUB c 12 14\r\nNATS/1.0\r\n\r\nhi\r\nPING\r\n"
    )
    whole = Frames().feed(data)
    assert whole == [
        ("CONNECT", b'{"verbose":false}', None),
        ("PUB", b"a.b r 5", b"hello"),
        ("HPUB", b"c 12 14", b"NATS/1.0\r\n\r\nhi"),
        ("PING", b"", None),
    ]
    frames = Frames()
    pieces = [frames.feed(data[i : i + 3]) for i in range(0, len(data), 3)]
    assert [f for piece in pieces for f in piece] == whole


def test_sub_argument_kept_as_sent() -> None:
    assert Frames().feed(b"sub _INBOX.x.*  1\r\n") == [("SUB", b"_INBOX.x.*  1", None)]


def test_connect_secrets_redacted() -> None:
    connect = b'{"user":"u","pass":"secret","auth_token":"tok","sig":"abc","name":"n"}'
    assert redact(connect) == (
        b'{"user":"u","pass":"[REDACTED]","auth_token":"[REDACTED]","sig":"[REDACTED]","name":"n"}'
    )


def test_client_label() -> None:
    assert (
        client_label({"version": "2.16.0", "lang": "python3", "name": "a"}) == "v2.16.0:python3:a"
    )
    assert client_label({"name": "a"}) == "a"
    assert client_label({}) == ""


def test_split_says_where_each_frame_ends_in_the_new_bytes() -> None:
    frames = Frames()
    assert frames.split(b"PING\r\nPUB a 5\r\nhel") == [(("PING", b"", None), 6)]
    # The PUB started in the earlier read ends 4 bytes into this one.
    assert frames.split(b"lo\r\nPONG\r\n") == [
        (("PUB", b"a 5", b"hello"), 4),
        (("PONG", b"", None), 10),
    ]
