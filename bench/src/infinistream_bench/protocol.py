"""The NATS client protocol as the load generator needs it: frames to send, a parser for replies.

No client library: frames are built once and written as bytes, and what the server sends is
parsed incrementally, so a token or a payload split across two reads is reassembled.
"""

from __future__ import annotations

import json

CRLF = b"\r\n"

CONNECT = (
    b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,'
    b'"lang":"python","version":"infinistream-bench","protocol":1}\r\n'
)
PING = b"PING\r\n"
PONG = b"PONG\r\n"

# (subject, sid, reply or None, headers or None, payload), all as the server sent them.
Message = tuple[bytes, bytes, bytes | None, bytes | None, bytes]


class ProtocolError(Exception):
    """The server sent something this parser does not understand, or -ERR."""


def pub(subject: str, reply: str | None, payload: bytes) -> bytes:
    """One PUB frame."""
    head = f"PUB {subject} {reply} {len(payload)}" if reply else f"PUB {subject} {len(payload)}"
    return head.encode() + CRLF + payload + CRLF


# The reply subjects real clients give JetStream publishes: nats-py, nats.go and nats.js subscribe
# once to `_INBOX.<22-character id>.*` and reply each publish to `_INBOX.<id>.<token>`, the
# token a 22-character NUID plus a few characters (nats-py: 4 hex digits).
INBOX_ID_CHARS = 22
REPLY_TOKEN_CHARS = 26


def inbox_id(seed: str) -> str:
    """A 22-character inbox id, as long as a NUID, unique per `seed`."""
    return seed.ljust(INBOX_ID_CHARS, "0")[-INBOX_ID_CHARS:]


def pub_cycle(subject: str, inbox: str, payload: bytes, count: int) -> bytes:
    """`count` PUB frames of one length, frame i replying to `<inbox>.<token i>`: sent in turn
    and over again, no two of any `count` consecutive publishes share a reply subject."""
    head = f"PUB {subject} {inbox}.".encode()
    tail = b" %d\r\n%b\r\n" % (len(payload), payload)
    return b"".join(head + b"%0*d" % (REPLY_TOKEN_CHARS, i) + tail for i in range(count))


def sub(subject: str, sid: int) -> bytes:
    return f"SUB {subject} {sid}".encode() + CRLF


def status_code(headers: bytes | None) -> int:
    """The status of a header block such as `NATS/1.0 408 Request Timeout`; 0 when none."""
    if not headers or not headers.startswith(b"NATS/1.0 "):
        return 0
    code = headers[9:12]
    return int(code) if code.isdigit() else 0


class Parser:
    """Incremental, sans-IO parser of what a NATS server sends to a client.

    `feed` returns the complete messages in `data` plus whatever was left over from the last
    call; an incomplete control line or payload stays buffered until the rest arrives.
    PING, PONG and INFO are counted or kept for the caller; -ERR raises.
    """

    def __init__(self) -> None:
        self._buf = b""
        self.pings = 0
        self.pongs = 0
        self.info: dict[str, object] | None = None

    def feed(self, data: bytes) -> list[Message]:
        buf = self._buf + data if self._buf else data
        out: list[Message] = []
        pos = 0
        end = len(buf)
        find = buf.find
        startswith = buf.startswith
        while pos < end:
            eol = find(CRLF, pos)
            if eol < 0:
                break
            if startswith(b"MSG ", pos):
                args = buf[pos + 4 : eol].split()
                start = eol + 2
                stop = start + int(args[-1])
                if stop + 2 > end:
                    break
                reply = args[2] if len(args) == 4 else None
                out.append((args[0], args[1], reply, None, buf[start:stop]))
                pos = stop + 2
            elif startswith(b"HMSG ", pos):
                args = buf[pos + 5 : eol].split()
                start = eol + 2
                split = start + int(args[-2])
                stop = start + int(args[-1])
                if stop + 2 > end:
                    break
                reply = args[2] if len(args) == 5 else None
                out.append((args[0], args[1], reply, buf[start:split], buf[split:stop]))
                pos = stop + 2
            else:
                self._control(buf[pos:eol])
                pos = eol + 2
        self._buf = buf[pos:]
        return out

    def _control(self, line: bytes) -> None:
        op = line[:4].upper()
        if op == b"PING":
            self.pings += 1
        elif op == b"PONG":
            self.pongs += 1
        elif op == b"+OK":
            pass
        elif op == b"INFO":
            self.info = json.loads(line[5:])
        elif op == b"-ERR":
            raise ProtocolError(line.decode(errors="replace"))
        else:
            raise ProtocolError(f"unexpected from server: {line[:80]!r}")
