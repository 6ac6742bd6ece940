"""A client connection that logs as nats-server does under `-D` and `-V`.

Used instead of `ClientConnection` only when debug or trace logging is on (wiring.py), so the
default path pays nothing. With `-D` it logs each connection's creation and closing; with `-V`
every protocol line in and out, in nats-server's form:

    [TRC] 127.0.0.1:52114 - cid:5 - "v2.16.0:python3:app" - <<- [PUB orders.new _INBOX.x 5]
    [TRC] 127.0.0.1:52114 - cid:5 - "v2.16.0:python3:app" - <<- MSG_PAYLOAD: ["hello"]
    [TRC] 127.0.0.1:52114 - cid:5 - "v2.16.0:python3:app" - ->> [MSG _INBOX.x 1 22]

Lines are traced from the bytes as they were sent and received (a frame splitter of their
own), not from the parser's events, which fold runs of acks into one: the arguments appear
exactly as the client wrote them, as nats-server prints them.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from infinistream.jetstream import api
from infinistream.logs import TRACE
from infinistream.logs.setup import TRACE_LOGGER
from infinistream.server.connection import ClientConnection

log = logging.getLogger("infinistream.server.connection")
trace = logging.getLogger(TRACE_LOGGER)

# Operations whose last argument is the size of a payload that follows the line.
_WITH_PAYLOAD = {"PUB", "HPUB", "MSG", "HMSG"}
# A line longer than this without its end is not the protocol: stop buffering it (the
# parser closes such a connection anyway).
_MAX_LINE = 64 * 1024
# nats-server's redaction of secrets in a traced CONNECT (client.go removeSecretsFromTrace).
_PREFIX_AUTH = re.compile(rb'"?\s*(?:auth_token\S*?|pass\S*?)"?\s*[:=]\s*"?([^",\r\n}]*)')
_EXACT_AUTH = re.compile(
    rb'(?:^|[^A-Za-z0-9_])"?\s*(?:proxy_sig|nkey|sig)"?\s*[:=]\s*"?([^",\r\n}]*)'
)
# (operation, argument, payload or None)
Frame = tuple[str, bytes, bytes | None]


class Frames:
    """Splits a byte stream into protocol frames: (operation, argument, payload or None)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[str, bytes, bytes | None]]:
        return [frame for frame, _ in self.split(data)]

    def split(self, data: bytes) -> list[tuple[Frame, int]]:
        """The frames `data` completes, each with where it ends in `data`."""
        buf = self._buf
        held = len(buf)
        buf += data
        frames: list[tuple[Frame, int]] = []
        pos = 0
        while True:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                if len(buf) - pos > _MAX_LINE:
                    pos = len(buf)
                break
            line = bytes(buf[pos:nl]).rstrip(b"\r")
            op, _, arg = line.partition(b" ")
            name = op.upper().decode("ascii", "replace")
            arg = arg.lstrip(b" \t")
            payload: bytes | None = None
            end = nl + 1
            if name in _WITH_PAYLOAD:
                size = arg.split()[-1] if arg.split() else b""
                if size.isdigit():
                    end = nl + 1 + int(size) + 2
                    if len(buf) < end:
                        break
                    payload = bytes(buf[nl + 1 : end - 2])
            frames.append(((name, arg, payload), max(end - held, 0)))
            pos = end
        del buf[:pos]
        return frames


def go_quote(data: bytes) -> str:
    """Go's %q of bytes (strconv.Quote), without the quotes: how nats-server prints payloads."""
    return api.go_quote(data.decode("utf-8", "surrogateescape"))[1:-1]


def redact(connect: bytes) -> bytes:
    for pattern in (_PREFIX_AUTH, _EXACT_AUTH):
        for m in reversed(list(pattern.finditer(connect))):
            connect = connect[: m.start(1)] + b"[REDACTED]" + connect[m.end(1) :]
    return connect


def client_label(options: dict[str, Any]) -> str:
    """nats-server's `"v2.16.0:python3:name"` for a client's CONNECT, or ""."""
    parts = []
    if options.get("version"):
        parts.append(f"v{options['version']}")
    if options.get("lang"):
        parts.append(str(options["lang"]))
    if options.get("name"):
        parts.append(str(options["name"]))
    return ":".join(parts)


def auth_label(options: dict[str, Any]) -> str:
    """How nats-server names a client's credentials in its log lines (getAuthUserLabel)."""
    if options.get("nkey"):
        return f"nkey:{options['nkey']}"
    if options.get("user"):
        return f"user:{options['user']}"
    if options.get("jwt"):
        return "jwt"
    if options.get("auth_token"):
        return "token"
    return ""


class LoggedConnection(ClientConnection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # ClientConnection's arguments, passed on as they are; the log options are its settings'.
        super().__init__(*args, **kwargs)
        self._traced = self.settings.log.trace
        self._max_traced = self.settings.log.max_traced_msg_len
        self._prefix = f"cid:{self.client_id}"
        self._frames_in = Frames()
        self._frames_out = Frames()
        self._named = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            host = f"[{peer[0]}]" if ":" in str(peer[0]) else str(peer[0])
            self._prefix = f"{host}:{peer[1]} - cid:{self.client_id}"
        log.debug("%s - Client connection created", self._prefix)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        log.debug("%s - Client connection closed", self._prefix)
        super().connection_lost(exc)

    def received(self, data: bytes) -> None:
        if not self._traced:
            super().received(data)
            return
        # Each frame is traced, then handled, before the next, as nats-server does: the lines
        # after a CONNECT name the client and its user, a -ERR follows what caused it.
        done = 0
        for (op, arg, payload), end in self._frames_in.split(data):
            self._trace_in(op, arg, payload)
            if end > done:
                super().received(data[done:end])
                done = end
            if op == "CONNECT":
                self._name_client()
            if self.closed:
                return
        if done < len(data):
            super().received(data[done:])

    def write(self, data: bytes) -> None:
        if self._traced and not self.closed:
            for op, arg, payload in self._frames_out.feed(data):
                self._trace_out(op, arg, payload)
        super().write(data)

    def _trace_in(self, op: str, arg: bytes, payload: bytes | None) -> None:
        if op == "CONNECT":
            self._line("<<- [CONNECT %s]", redact(arg))
        elif op in ("PING", "PONG"):
            self._line(f"<<- [{op}]")
        elif op in ("PUB", "HPUB", "SUB", "UNSUB"):
            self._line(f"<<- [{op} %s]", arg)
            if payload:
                self._payload("<<-", payload)

    def _name_client(self) -> None:
        """Once a CONNECT is accepted, nats-server's lines name the client, and the account
        and user it authenticated as: `- "v2.16.0:python3:app" - "$G/user:app"`."""
        if not self.connected or self._named:
            return
        self._named = True  # a second CONNECT changes nothing here, as on nats-server
        options = self.options
        label = client_label(options)
        if label:
            self._prefix += f' - "{label}"'
        if self.authenticator.required and self.identity is not None:
            user = auth_label(options)
            if user:
                self._prefix += f' - "{self.identity.account}/{user}"'

    def _trace_out(self, op: str, arg: bytes, payload: bytes | None) -> None:
        if op in ("PING", "PONG"):
            self._line(f"->> [{op}]")
        elif op == "+OK":
            self._line("->> [OK]")
        elif op == "-ERR":
            self._line("->> [-ERR %s]", arg.strip(b"'"))
        elif op in ("MSG", "HMSG"):
            self._line(f"->> [{op} %s]", arg)
            if payload:
                self._payload("->>", payload)

    def _line(self, text: str, arg: bytes | None = None) -> None:
        if arg is None:
            trace.log(TRACE, "%s - %s", self._prefix, text)
        else:
            trace.log(TRACE, "%s - " + text, self._prefix, arg.decode("utf-8", "replace"))

    def _payload(self, direction: str, payload: bytes) -> None:
        limit = self._max_traced
        if limit > 0 and len(payload) > limit:
            text = f'"{go_quote(payload[:limit])}..."'
        else:
            text = f'"{go_quote(payload)}"'
        trace.log(TRACE, "%s - %s MSG_PAYLOAD: [%s]", self._prefix, direction, text)
