"""Server-to-client frames, byte for byte as nats-server writes them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any, Final

import msgspec

__all__ = ["OK", "PING", "PONG", "Outgoing", "err", "hmsg", "info", "msg", "msg_run", "msgs"]

OK: Final = b"+OK\r\n"
PING: Final = b"PING\r\n"
PONG: Final = b"PONG\r\n"

# The parser decodes subjects with surrogateescape; encoding the same way
# lets any subject a client sent be written back unchanged.
_ENC: Final = "utf-8"
_ERRS: Final = "surrogateescape"

_json_encode = msgspec.json.Encoder().encode


def info(fields: dict[str, Any]) -> bytes:
    """``INFO {json} \\r\\n``.

    nats-server joins "INFO", the JSON and CRLF with spaces (util.go
    generateInfoJSON), hence the space before CRLF.
    """
    return b"INFO " + _json_encode(fields) + b" \r\n"


def msg(subject: str, sid: str, reply: str | None, payload: bytes) -> bytes:
    """``MSG <subject> <sid> [reply] <#bytes>\\r\\n<payload>\\r\\n``."""
    return msgs(sid, [(subject, reply, None, payload)])


def hmsg(subject: str, sid: str, reply: str | None, headers: bytes, payload: bytes) -> bytes:
    """``HMSG <subject> <sid> [reply] <#hdr> <#total>\\r\\n<headers><payload>\\r\\n``."""
    return msgs(sid, [(subject, reply, headers, payload)])


# A message for `msgs`: (subject, reply or None, headers or None, payload). Subject and reply
# may be given as the bytes that go on the wire (a stored subject, a built ack reply).
Outgoing = tuple[str | bytes, str | bytes | None, bytes | None, bytes]


def msgs(sid: str, messages: Iterable[Outgoing], headers: bool = True) -> bytes:
    """The MSG and HMSG frames of several messages to one subscription, joined: one write
    for a pull batch or a run of PubAcks, without a call per message.

    A message with headers goes out as HMSG if `headers` (the client negotiated them), else
    as MSG without them, as nats-server does.
    """
    if isinstance(messages, list) and len(messages) > 1:
        run = _replied_run(sid, messages, headers)
        if run is not None:
            return run
    sid_b = sid.encode(_ENC, _ERRS)
    out: list[bytes] = []
    append = out.append
    for subject, reply, hdrs, payload in messages:
        subj = subject.encode(_ENC, _ERRS) if isinstance(subject, str) else subject
        if hdrs is not None and headers:
            hlen = len(hdrs)
            total = hlen + len(payload)
            if reply:
                rep = reply.encode(_ENC, _ERRS) if isinstance(reply, str) else reply
                append(b"HMSG %b %b %b %d %d\r\n" % (subj, sid_b, rep, hlen, total))
            else:
                append(b"HMSG %b %b %d %d\r\n" % (subj, sid_b, hlen, total))
            append(hdrs)
        elif reply:
            rep = reply.encode(_ENC, _ERRS) if isinstance(reply, str) else reply
            append(b"MSG %b %b %b %d\r\n" % (subj, sid_b, rep, len(payload)))
        else:
            append(b"MSG %b %b %d\r\n" % (subj, sid_b, len(payload)))
        append(payload)
        append(b"\r\n")
    return b"".join(out)


_subject_of = itemgetter(0)
_reply_of = itemgetter(1)
_headers_of = itemgetter(2)
_payload_of = itemgetter(3)


def _replied_run(sid: str, messages: list[Outgoing], headers: bool) -> bytes | None:
    """`msgs` of a pull batch, in one format for all: messages sent as MSG (no headers, or
    the client takes none), each with a reply, subjects and replies given as bytes; None for
    any other run. A few passes over the run, none in Python per message, tell it apart."""
    n = len(messages)
    if headers and list(map(_headers_of, messages)).count(None) != n:
        return None
    replies = list(map(_reply_of, messages))
    if b"" in replies:
        return None
    payloads = list(map(_payload_of, messages))
    args: list[object] = [b""] * (4 * n)
    args[0::4] = map(_subject_of, messages)
    args[1::4] = replies
    args[2::4] = map(len, payloads)
    args[3::4] = payloads
    # The sid goes into the format itself (a `%` in it escaped).
    sid_b = sid.encode(_ENC, _ERRS).replace(b"%", b"%%")
    try:
        return (b"MSG %b " + sid_b + b" %b %d\r\n%b\r\n") * n % tuple(args)
    except TypeError:
        # A subject or reply given as text, or no reply (`%b` takes bytes only): the
        # general way encodes them, or leaves the reply out.
        return None


def msg_run(sid: str, subjects: Sequence[bytes], payloads: Sequence[bytes]) -> bytes:
    """The MSG frames of messages without reply or headers, each on its own subject, to one
    subscription: a run of PubAcks to their reply subjects, one format per message."""
    n = len(subjects)
    if n != len(payloads):
        raise ValueError(f"{n} subjects for {len(payloads)} payloads")
    # One format for the whole run, the sid in it (a `%` escaped): no Python call per
    # message, and the frames are built in one buffer rather than joined from pieces.
    args: list[object] = [b""] * (3 * n)
    args[0::3] = subjects
    args[1::3] = map(len, payloads)
    args[2::3] = payloads
    sid_b = sid.encode(_ENC, _ERRS).replace(b"%", b"%%")
    return (b"MSG %b " + sid_b + b" %d\r\n%b\r\n") * n % tuple(args)


def err(message: str) -> bytes:
    """``-ERR '<message>'\\r\\n`` (client.go errProto)."""
    return f"-ERR '{message}'\r\n".encode(_ENC, _ERRS)
