"""The NATS client protocol, server side, without I/O.

Feed bytes read from a client to :class:`Parser` and act on the events it
returns; build replies with the writer functions; edit header blocks with the
header functions, as nats-server edits them. Nothing here touches a socket, a
clock or an event loop.
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
from ._header_edits import (
    EMPTY_HEADERS,
    append_header,
    append_headers,
    remove_header,
    remove_header_prefix,
    remove_status,
    set_header,
)
from ._headers import ParsedHeaders, encode_headers, header_int, header_value, parse_headers
from ._json import GO_MAX_DEPTH, JsonTooDeep, decode_json
from ._parser import Parser
from ._writers import OK, PING, PONG, Outgoing, err, hmsg, info, msg, msg_run, msgs

__all__ = [
    "EMPTY_HEADERS",
    "GO_MAX_DEPTH",
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
    "JsonTooDeep",
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
    "append_header",
    "append_headers",
    "decode_json",
    "encode_headers",
    "err",
    "header_int",
    "header_value",
    "hmsg",
    "info",
    "msg",
    "msg_run",
    "msgs",
    "parse_headers",
    "remove_header",
    "remove_header_prefix",
    "remove_status",
    "set_header",
]
