"""The NATS client protocol, server side, without I/O.

Feed bytes read from a client to :class:`Parser` and act on the events it
returns; build replies with the writer functions. Nothing here touches a
socket, a clock or an event loop.
"""

from ._errors import (
    MAX_CONTROL_LINE_EXCEEDED,
    MAXIMUM_PAYLOAD_VIOLATION,
    UNKNOWN_PROTOCOL_OPERATION,
    ProtocolError,
)
from ._events import (
    PING_EVENT,
    PONG_EVENT,
    Acks,
    Connect,
    Event,
    HPub,
    Ping,
    Pong,
    Pub,
    Pubs,
    Sub,
    Unsub,
)
from ._headers import ParsedHeaders, encode_headers, header_value, parse_headers
from ._parser import Parser
from ._writers import OK, PING, PONG, Outgoing, err, hmsg, info, msg, msg_run, msgs

__all__ = [
    "MAXIMUM_PAYLOAD_VIOLATION",
    "MAX_CONTROL_LINE_EXCEEDED",
    "OK",
    "PING",
    "PING_EVENT",
    "PONG",
    "PONG_EVENT",
    "UNKNOWN_PROTOCOL_OPERATION",
    "Acks",
    "Connect",
    "Event",
    "HPub",
    "Outgoing",
    "ParsedHeaders",
    "Parser",
    "Ping",
    "Pong",
    "ProtocolError",
    "Pub",
    "Pubs",
    "Sub",
    "Unsub",
    "encode_headers",
    "err",
    "header_value",
    "hmsg",
    "info",
    "msg",
    "msg_run",
    "msgs",
    "parse_headers",
]
