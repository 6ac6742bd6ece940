"""The protocol error raised by :class:`Parser`, and nats-server's error texts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._events import Event

__all__ = [
    "MAXIMUM_PAYLOAD_VIOLATION",
    "MAX_CONTROL_LINE_EXCEEDED",
    "UNKNOWN_PROTOCOL_OPERATION",
    "ProtocolError",
]

# Texts nats-server puts after "-ERR " (client.go sendErr / parser.go).
UNKNOWN_PROTOCOL_OPERATION: Final = "Unknown Protocol Operation"
MAXIMUM_PAYLOAD_VIOLATION: Final = "Maximum Payload Violation"
# nats-server sends ErrMaxControlLine.Error(), which is lower case; the
# capitalised "Maximum Control Line Exceeded" is only its closed-reason label.
MAX_CONTROL_LINE_EXCEEDED: Final = "maximum control line exceeded"


class ProtocolError(Exception):
    """The client broke the protocol.

    ``message``: for ``send_err`` errors, the exact text nats-server sends as
    ``-ERR '<message>'``; otherwise a description for the log.
    ``close``: whether nats-server closes the connection (always true for
    parse errors; the parser refuses further input afterwards).
    ``send_err``: whether nats-server sends ``-ERR`` before closing. Several
    violations (bad PUB/SUB/UNSUB arguments, bad CONNECT JSON, HPUB without
    header support, ``-ERR`` from a client) make nats-server close silently.
    ``events``: the events parsed from the same buffer before the violation,
    which nats-server would already have processed; handle them first.
    """

    def __init__(self, message: str, *, close: bool = True, send_err: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.close = close
        self.send_err = send_err
        self.events: list[Event] = []

    def __repr__(self) -> str:
        return f"ProtocolError({self.message!r}, close={self.close!r}, send_err={self.send_err!r})"

    def copy(self) -> ProtocolError:
        """The same error without its events, for raising again."""
        return ProtocolError(self.message, close=self.close, send_err=self.send_err)
