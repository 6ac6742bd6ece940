"""Incremental, sans-IO parser for what a NATS client sends to a server.

Behaviour follows nats-server's ``server/parser.go`` and ``server/client.go``
(client connections only): operation names are case-insensitive, arguments
are separated by runs of spaces or tabs, a control line ends at ``\\n`` with an
optional ``\\r`` before it, and a payload must be followed by exactly ``\\r\\n``.
"""

from __future__ import annotations

import functools
import re
from collections import deque
from typing import Final

import msgspec

from ._errors import (
    MAX_CONTROL_LINE_EXCEEDED,
    MAXIMUM_PAYLOAD_VIOLATION,
    UNKNOWN_PROTOCOL_OPERATION,
    ProtocolError,
)
from ._events import PING_EVENT, PONG_EVENT, Acks, Connect, Event, HPub, Pub, Pubs, Sub, Unsub
from ._json import decode_json

__all__ = ["Parser"]

# Subjects are opaque bytes to nats-server; surrogateescape keeps any byte
# sequence round-trippable through str (the writers encode the same way).
_ENC: Final = "utf-8"
_ERRS: Final = "surrogateescape"

_PUB, _HPUB, _SUB, _UNSUB, _PING, _PONG, _CONNECT, _INFO, _OK, _ERR = range(10)

# (upper-case name, kind, whether a space or tab must follow the name).
# PING, PONG and +OK ignore whatever follows them up to the newline.
_OPS: Final = (
    (b"PUB", _PUB, True),
    (b"HPUB", _HPUB, True),
    (b"SUB", _SUB, True),
    (b"UNSUB", _UNSUB, True),
    (b"PING", _PING, False),
    (b"PONG", _PONG, False),
    (b"CONNECT", _CONNECT, False),
    (b"INFO", _INFO, False),
    (b"+OK", _OK, False),
    (b"-ERR", _ERR, True),
)
_BLANKS: Final = b" \t"
_MAX_SIZE_DIGITS: Final = 9  # nats-server parseSize: at most 9 digits (999M)

# A run of plain JetStream acks, each frame exactly as clients write it: no reply subject, and
# an empty body (nats.py, which writes its empty reply as a second blank before the size) or
# "+ACK" (nats.go, nats.js). The subject class is what bytes.split() does not split on, so each
# frame reads as the general path would read it. Anything else ends the run and takes the
# general path.
_ACK_SUBJECT_MAX: Final = 1024
_ACK_RUN: Final = re.compile(
    rb"(?:PUB \$JS\.ACK\.[^ \t\n\r\x0b\x0c]{1,%d}  ?(?:0\r\n|4\r\n\+ACK)\r\n)+" % _ACK_SUBJECT_MAX
)
_ACK_SUBJECT: Final = re.compile(r"PUB ([^ ]+) ")


# A run of PUB frames of one shape: one subject, one payload size, each with a reply subject
# or none without. A publisher with many publishes in flight sends thousands of these back to
# back; once two frames in a row have one shape, the frames of that shape after them are taken
# apart by one regex call (findall), not a loop turn each. The pattern admits exactly what the
# frame-by-frame loop admits (single blanks, CRLF, a reply of the bytes bytes.split() does not
# split on, the control line within its limit), so anything else ends the shaped run and
# takes that loop. Its other branch takes the rest of the buffer from the first byte that is
# no such frame: findall never skips ahead, so the frames it finds are the run's, in a row.
_TOKEN: Final = rb"[^ \t\n\r\x0b\x0c]"
_SHAPES_MAX: Final = 256
# Shapes one connection may have runs of: a pattern costs a compile (tens of microseconds), so
# a client that changes shape every two frames gets the frame-by-frame loop past these,
# never a compile per pair of frames.
SHAPES_PER_CONNECTION: Final = 32
# Payloads of this many bytes or more are handed over as views of the read buffer: copying
# each (an allocation of a page or more, fresh pages faulted in) cost more than the rest of
# its frame.
VIEW_PAYLOADS: Final = 1024


@functools.lru_cache(maxsize=_SHAPES_MAX)
def _shape(subject: bytes, szb: bytes, reply_max: int) -> re.Pattern[bytes]:
    """The pattern of a frame of one shape, whose groups are its reply (when `reply_max`, the
    longest the control line allows; 0: no reply), below VIEW_PAYLOADS its payload, and then
    the first byte of what follows the run (the pattern's other branch)."""
    size = int(szb)
    frame = b"PUB " + re.escape(subject)
    frame += b" (%s{1,%d})" % (_TOKEN, reply_max) if reply_max else b""
    frame += b" " + szb + b"\r\n"
    frame += b"(.{%d})" % size if size < VIEW_PAYLOADS else b".{%d}" % size
    return re.compile(frame + b"\r\n|(.).*", re.DOTALL)


def _same_shape(
    buf: bytes, pos: int, subject: bytes, szb: bytes, replied: bool, mcl: int
) -> tuple[int, list[bytes | None], list[bytes | memoryview]] | None:
    """The frames at `pos` of the shape of the one before it (`subject`, `szb`, whether it
    had a reply): where they end, their replies and their payloads; None if none follows."""
    reply_max = 0
    if replied:
        # The control line, "PUB S R N\r", within max_control_line as the loop checks it.
        reply_max = mcl - 7 - len(subject) - len(szb)
        if reply_max < 1:
            return None
    found = _shape(subject, szb, reply_max).findall(buf, pos)
    # Each frame's groups (its lone group, bytes, for a large payload and no reply), the
    # last one empty; then, unless the run ends the buffer, the rest of the buffer's.
    if found and (found[-1] if type(found[-1]) is bytes else found[-1][-1]):
        found.pop()
    if not found:
        return None
    size = int(szb)
    # "PUB S N\r\n", the payload and its CRLF; and the reply and a blank before it.
    length = len(found) * (9 + len(subject) + len(szb) + size)
    if size < VIEW_PAYLOADS:
        if not replied:
            return pos + length, [None] * len(found), [p for p, _ in found]
        replies = [r for r, _, _ in found]
        return pos + length + len(found) + sum(map(len, replies)), replies, [p for _, p, _ in found]
    view = memoryview(buf)
    if not replied:
        head = 7 + len(subject) + len(szb)  # "PUB S N\r\n"
        starts = range(pos + head, pos + length, head + size + 2)
        return pos + length, [None] * len(starts), [view[at : at + size] for at in starts]
    payloads: list[bytes | memoryview] = []
    add = payloads.append
    head = 8 + len(subject) + len(szb)  # "PUB S R N\r\n" but R
    at = pos
    replies = [r for r, _ in found]
    for reply in replies:
        at += head + len(reply)
        add(view[at : at + size])
        at += size + 2
    return at, list[bytes | None](replies), payloads


def _match_op(head: bytes) -> tuple[int, int] | None:
    """Return ``(kind, len(name))`` for the operation ``head`` starts with.

    Returns None when ``head`` is still a proper prefix of an operation, and
    raises when it can no longer become one, so garbage is rejected as soon
    as it arrives, as nats-server's byte-at-a-time state machine does.
    """
    upper = head[:8].upper()
    have = len(upper)
    for name, kind, needs_blank in _OPS:
        size = len(name)
        if have >= size + needs_blank:
            if upper.startswith(name):
                if needs_blank and upper[size] not in _BLANKS:
                    break
                return kind, size
        elif name.startswith(upper[:size]):
            return None
    raise ProtocolError(UNKNOWN_PROTOCOL_OPERATION)


def _size(digits: bytes) -> int:
    """nats-server's parseSize: 1 to 9 ASCII digits, else -1."""
    if 0 < len(digits) <= _MAX_SIZE_DIGITS and digits.isdigit():
        return int(digits)
    return -1


def _quote(arg: bytes) -> str:
    return '"' + arg.decode(_ENC, "backslashreplace").replace('"', '\\"') + '"'


def _silent(message: str) -> ProtocolError:
    # nats-server logs these, closes the connection and sends no -ERR.
    return ProtocolError(message, send_err=False)


def _decode_json_object(kind: str, arg: bytes) -> dict[str, object]:
    try:
        value = decode_json(arg)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise _silent(f"{kind}: {exc}") from None
    if not isinstance(value, dict):
        raise _silent(f"{kind}: JSON object expected")
    return value


class Parser:
    """Turns bytes from one client connection into :mod:`events <._events>`.

    ``max_payload`` and ``max_control_line`` may be changed between calls
    (e.g. once the account is known). ``headers`` says whether HPUB is
    accepted; every CONNECT sets it to ``headers and CONNECT.headers``, the
    way nats-server negotiates it, and the server may also set it directly.
    """

    __slots__ = (
        "_buf",
        "_chunks",
        "_chunks_len",
        "_error",
        "_frame_len",
        "_headers_supported",
        "_need",
        "_pos",
        "_queue",
        "_shapes",
        "headers",
        "max_control_line",
        "max_payload",
    )

    def __init__(
        self,
        *,
        max_payload: int = 1024 * 1024,
        max_control_line: int = 4096,
        headers: bool = True,
    ) -> None:
        self.max_payload = max_payload
        self.max_control_line = max_control_line
        self.headers = headers
        self._headers_supported = headers
        # Unparsed input is self._buf[self._pos:] followed by self._chunks.
        # New data waits in _chunks until at least _need bytes are buffered,
        # so a large payload arriving in many reads is joined only once.
        self._buf = b""
        self._pos = 0
        self._chunks: list[bytes] = []
        self._chunks_len = 0
        self._need = 0
        # The length of the frame at _pos when its control line is read and its payload is
        # not all here yet (0: not known).
        self._frame_len = 0
        self._error: ProtocolError | None = None
        self._queue: deque[Event] = deque()
        # The shapes of PUB frames this connection has had runs of (see _same_shape).
        self._shapes: set[tuple[bytes, bytes, bool]] = set()

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer bytes read from the connection."""
        if self._error is not None:
            raise self._error.copy()
        if data:
            if type(data) is not bytes:
                data = bytes(data)
            self._chunks.append(data)
            self._chunks_len += len(data)

    @property
    def partial(self) -> bool:
        """Whether the bytes of a frame not yet whole are buffered: its writer has more of it
        on the way (a read ended inside a frame), usually a moment behind."""
        return self._pos < len(self._buf) or bool(self._chunks)

    def next_event(self) -> Event | None:
        """Return the next complete event, or None if more data is needed; one frame at a
        time (a run of PUBs as the Pub of each)."""
        if not self._queue:
            try:
                events = self.events()
            except ProtocolError as exc:
                if not exc.events:
                    raise
                # Hand out the events before the violation first; the next
                # call after them raises, since the parser is now failed.
                events = exc.events
            for event in events:
                if type(event) is Pubs:
                    self._queue.extend(event.pubs())
                else:
                    self._queue.append(event)
        return self._queue.popleft() if self._queue else None

    def events(self) -> list[Event]:
        """Return every complete event buffered so far (the hot path).

        On a violation this raises :class:`ProtocolError` whose ``events``
        holds the events that preceded it in the buffer.
        """
        if self._error is not None:
            raise self._error.copy()
        out: list[Event] = []
        try:
            if self._chunks:
                if len(self._buf) - self._pos + self._chunks_len < self._need:
                    return out
                take = self._straddle()
                if take:
                    # The frame begun before this read, alone; then the read where it is.
                    self._parse(out)
                    self._rest_of_read(take)
                if self._chunks:
                    self._merge()
            self._parse(out)
        except ProtocolError as exc:
            self._fail(exc)
            exc.events = out
            raise
        return out

    def _parse(self, out: list[Event]) -> None:
        """Parse the buffer's whole frames into `out`; keep what is left of it."""
        buf = self._buf
        pos = self._pos
        end = len(buf)
        if pos >= end:
            return
        append = out.append
        find = buf.find
        startswith = buf.startswith
        mcl = self.max_control_line
        max_payload = self.max_payload
        # The ack run's control lines are within any limit this allows.
        ack_runs = mcl >= _ACK_SUBJECT_MAX + 16 and max_payload >= 4
        while pos < end:
            nl = find(b"\n", pos)
            if nl < 0:
                self._check_partial(buf, pos)
                self._need = end - pos + 1
                self._frame_len = 0
                break
            # Fast paths cover well-formed, upper-case frames whose whole
            # payload is buffered; anything else goes through _frame,
            # which handles every case (and every error) exactly.
            if startswith(b"PUB ", pos):
                if ack_runs and startswith(b"$JS.ACK.", pos + 4):
                    run = _ACK_RUN.match(buf, pos)
                    if run is not None:
                        text = buf[pos : run.end()].decode(_ENC, _ERRS)
                        append(Acks(_ACK_SUBJECT.findall(text), 4 * text.count(" 4\r\n")))
                        pos = run.end()
                        continue
                # A run of plain PUB frames, each whole in the buffer: one event.
                subjects: list[bytes] = []
                replies: list[bytes | None] = []
                payloads: list[bytes | memoryview] = []
                add_subject = subjects.append
                add_reply = replies.append
                add_payload = payloads.append
                run_bytes = 0
                shape: tuple[bytes, bytes, bool] | None = None
                while True:
                    args = buf[pos + 4 : nl].split()
                    nargs = len(args)
                    if nargs == 3:
                        subject, reply, szb = args
                    elif nargs == 2:
                        subject, szb = args
                        reply = None
                    else:
                        break
                    if nl - pos > mcl or len(szb) > _MAX_SIZE_DIGITS or not szb.isdigit():
                        break
                    size = int(szb)
                    start = nl + 1
                    stop = start + size
                    if size > max_payload or not startswith(b"\r\n", stop):
                        break
                    add_subject(subject)
                    add_reply(reply)
                    add_payload(
                        buf[start:stop] if size < VIEW_PAYLOADS else memoryview(buf)[start:stop]
                    )
                    run_bytes += size
                    pos = stop + 2
                    if (
                        shape == (subject, szb, reply is None)
                        and not startswith(b"$JS.ACK.", pos + 4)
                        and (shape in self._shapes or self._new_shape(shape))
                    ):
                        taken = _same_shape(buf, pos, subject, szb, reply is not None, mcl)
                        if taken is not None:
                            pos, more_replies, more_payloads = taken
                            subjects += [subject] * len(more_replies)
                            replies += more_replies
                            payloads += more_payloads
                            run_bytes += size * len(more_replies)
                    shape = (subject, szb, reply is None)
                    if not startswith(b"PUB ", pos) or (
                        ack_runs and startswith(b"$JS.ACK.", pos + 4)
                    ):
                        break
                    nl = find(b"\n", pos)
                    if nl < 0:
                        break
                if subjects:
                    append(Pubs(subjects, replies, payloads, run_bytes))
                    continue
            elif startswith(b"HPUB ", pos):
                args = buf[pos + 5 : nl].split()
                nargs = len(args)
                if (nargs == 3 or nargs == 4) and nl - pos <= mcl and self.headers:
                    hdb = args[-2]
                    szb = args[-1]
                    if (
                        hdb.isdigit()
                        and szb.isdigit()
                        and len(hdb) <= _MAX_SIZE_DIGITS
                        and len(szb) <= _MAX_SIZE_DIGITS
                    ):
                        hsize = int(hdb)
                        size = int(szb)
                        start = nl + 1
                        mid = start + hsize
                        stop = start + size
                        if hsize <= size <= max_payload and startswith(b"\r\n", stop):
                            append(
                                HPub(
                                    args[0].decode(_ENC, _ERRS),
                                    args[1].decode(_ENC, _ERRS) if nargs == 4 else None,
                                    buf[start:mid],
                                    buf[mid:stop],
                                )
                            )
                            pos = stop + 2
                            continue
            elif startswith(b"PING\r\n", pos):
                append(PING_EVENT)
                pos += 6
                continue
            elif startswith(b"PONG\r\n", pos):
                append(PONG_EVENT)
                pos += 6
                continue
            after = self._frame(buf, pos, nl, out)
            if after == pos:
                break  # payload incomplete; _frame set _need
            pos = after
        if pos >= end:
            self._buf = b""
            self._pos = 0
            self._need = 0
            self._frame_len = 0
        else:
            self._pos = pos

    def _straddle(self) -> int:
        """If the frame at the end of the buffer, whose length is known, ends in the first
        read waiting: the buffer becomes that frame alone (a copy of one frame), and the
        bytes of the read it took are returned (0: it does not), for `_rest_of_read`. Joining
        the rest of the buffer and the read instead copies the read whole, which for large
        payloads cost as much as copying each payload."""
        length = self._frame_len
        left = len(self._buf) - self._pos
        if not length or not left:
            return 0
        first = self._chunks[0]
        take = length - left
        if not 0 < take <= len(first):
            return 0
        self._buf = self._buf[self._pos :] + first[:take]
        self._pos = 0
        return take

    def _rest_of_read(self, take: int) -> None:
        """After the straddling frame: the buffer is the first read waiting, past the `take`
        bytes of it that frame had."""
        first = self._chunks.pop(0)
        self._chunks_len -= len(first)
        self._buf = first
        self._pos = take
        self._need = 0
        self._frame_len = 0

    def _new_shape(self, shape: tuple[bytes, bytes, bool]) -> bool:
        """Whether a run of a shape not seen before is taken in one call (SHAPES_PER_CONNECTION)."""
        if len(self._shapes) >= SHAPES_PER_CONNECTION:
            return False
        self._shapes.add(shape)
        return True

    def _merge(self) -> None:
        chunks = self._chunks
        if self._pos < len(self._buf):
            chunks.insert(0, self._buf[self._pos :])
        self._buf = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._pos = 0
        self._chunks = []
        self._chunks_len = 0

    def _fail(self, exc: ProtocolError) -> None:
        self._error = exc.copy()
        self._buf = b""
        self._pos = 0
        self._chunks = []
        self._chunks_len = 0

    def _check_control_line(self, line_len: int, arg: bytes) -> None:
        # nats-server measures only the argument after the operation name and
        # its blanks, and skips any number of those blanks. Also rejecting a
        # line over twice the limit keeps padding from growing the buffer
        # without bound.
        limit = self.max_control_line
        if len(arg) > limit or line_len > 2 * limit + 16:
            raise ProtocolError(MAX_CONTROL_LINE_EXCEEDED)

    def _check_partial(self, buf: bytes, pos: int) -> None:
        """Reject an incomplete trailing line as early as nats-server would."""
        match = _match_op(buf[pos : pos + 8])
        # A trailing CR may yet turn out to end the line; count it the way
        # the complete line would, so the outcome does not depend on where
        # reads happen to split the input.
        line_len = len(buf) - pos - (buf[-1] == 13)
        if match is not None and line_len > self.max_control_line:
            arg = buf[pos + match[1] : pos + line_len].lstrip(_BLANKS)
            self._check_control_line(line_len, arg)

    def _frame(self, buf: bytes, pos: int, nl: int, out: list[Event]) -> int:
        """Parse the frame whose control line is ``buf[pos:nl]``.

        Returns the offset after the frame, or ``pos`` if its payload is not
        fully buffered yet.
        """
        line = buf[pos : nl - 1 if nl > pos and buf[nl - 1] == 13 else nl]
        match = _match_op(line)
        if match is None:
            raise ProtocolError(UNKNOWN_PROTOCOL_OPERATION)
        kind, name_len = match
        arg = line[name_len:].lstrip(_BLANKS)
        self._check_control_line(len(line), arg)
        if kind in (_PUB, _HPUB):
            return self._pub(buf, pos, nl, arg, kind == _HPUB, out)
        if kind == _PING:
            out.append(PING_EVENT)
        elif kind == _PONG:
            out.append(PONG_EVENT)
        elif kind == _SUB:
            out.append(self._sub(arg))
        elif kind == _UNSUB:
            out.append(self._unsub(arg))
        elif kind == _CONNECT:
            options = _decode_json_object("CONNECT", arg)
            self.headers = self._headers_supported and options.get("headers") is True
            out.append(Connect(options))
        elif kind == _INFO:
            _decode_json_object("INFO", arg)  # nats-server ignores a client's INFO
        elif kind == _ERR:
            raise _silent("Client Error " + arg.decode(_ENC, "backslashreplace"))
        # +OK needs nothing.
        return nl + 1

    def _pub(
        self, buf: bytes, pos: int, nl: int, arg: bytes, has_headers: bool, out: list[Event]
    ) -> int:
        args = arg.split()
        reply: bytes | None = None
        hsize = 0
        if has_headers:
            if not self.headers:
                raise _silent("message headers not supported")
            if len(args) == 3:
                subject, hdb, szb = args
            elif len(args) == 4:
                subject, reply, hdb, szb = args
            else:
                raise _silent(f"processHeaderPub Parse Error: {_quote(arg)}")
            hsize = _size(hdb)
            size = _size(szb)
            if hsize < 0:
                raise _silent(f"processHeaderPub Bad or Missing Header Size: {_quote(arg)}")
            if size < 0:
                raise _silent(f"processHeaderPub Bad or Missing Total Size: {_quote(arg)}")
            if hsize > size:
                raise _silent(f"processHeaderPub Header Size larger then TotalSize: {_quote(arg)}")
        else:
            if len(args) == 2:
                subject, szb = args
            elif len(args) == 3:
                subject, reply, szb = args
            else:
                raise _silent(f"processPub Parse Error: {_quote(arg)}")
            size = _size(szb)
            if size < 0:
                raise _silent(f"processPub Bad or Missing Size: {_quote(arg)}")
        if size > self.max_payload:
            raise ProtocolError(MAXIMUM_PAYLOAD_VIOLATION)
        start = nl + 1
        stop = start + size
        if stop + 2 > len(buf):
            # Like nats-server, reject a wrong byte after the payload as soon
            # as it arrives rather than when the whole frame is in.
            if stop < len(buf):
                if buf[stop] != 13:
                    raise ProtocolError(UNKNOWN_PROTOCOL_OPERATION)
                self._need = stop + 2 - pos
            else:
                self._need = stop + 1 - pos
            self._frame_len = stop + 2 - pos
            return pos
        if not buf.startswith(b"\r\n", stop):
            raise ProtocolError(UNKNOWN_PROTOCOL_OPERATION)
        subject_str = subject.decode(_ENC, _ERRS)
        reply_str = None if reply is None else reply.decode(_ENC, _ERRS)
        if has_headers:
            mid = start + hsize
            out.append(HPub(subject_str, reply_str, buf[start:mid], buf[mid:stop]))
        else:
            out.append(Pub(subject_str, reply_str, buf[start:stop]))
        return stop + 2

    @staticmethod
    def _sub(arg: bytes) -> Sub:
        args = arg.split()
        if len(args) == 2:
            subject, sid = args
            queue = None
        elif len(args) == 3:
            subject, queue_b, sid = args
            queue = queue_b.decode(_ENC, _ERRS)
        else:
            raise _silent(f"processSub Parse Error: {_quote(arg)}")
        return Sub(subject.decode(_ENC, _ERRS), queue, sid.decode(_ENC, _ERRS))

    @staticmethod
    def _unsub(arg: bytes) -> Unsub:
        args = arg.split()
        if len(args) == 1:
            return Unsub(args[0].decode(_ENC, _ERRS), None)
        if len(args) == 2:
            max_msgs = _size(args[1])
            return Unsub(args[0].decode(_ENC, _ERRS), max_msgs if max_msgs > 0 else None)
        raise _silent(f"processUnsub Parse Error: {_quote(arg)}")
