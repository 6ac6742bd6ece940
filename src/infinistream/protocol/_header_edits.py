"""Edits of a stored or delivered header block, byte for byte as nats-server makes them.

nats-server edits header blocks in place of parsing them (client.go `genHeader`,
`removeHeaderIfPresent`, `removeHeaderIfPrefixPresent`, `removeHeaderStatusIfPresent`), so
what it leaves alone comes back exactly as it was published: the order of the fields, repeated
names, the spaces around values, the case of names. The edits here follow the same rules, so
that a message read from InfiniStream carries the same bytes as one read from nats-server:

- A name matches only where a line starts with it, followed directly by ``:``, and case counts
  (``Nats-TTL`` is not ``nats-ttl``), as in ``getHeaderKeyIndex``.
- Removing a name removes every line that has it; a prefix, every line that starts with it.
- Adding a field puts it last, before the block's closing CRLF, whatever else the block holds:
  repeated names stay repeated, the status line stays.
- A block left with no field and no status is no block: the result is ``b""``.

The block is taken as it comes, without checks: nats-server stores what clients publish
unparsed too. Names are the server's own constants (nats-server drops a field whose name is not
an HTTP token; none of ours is one).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

__all__ = [
    "EMPTY_HEADERS",
    "append_header",
    "append_headers",
    "remove_header",
    "remove_header_prefix",
    "remove_status",
    "set_header",
]

# nats-server's hdrLine and emptyHdrLine.
_FIRST_LINE: Final = b"NATS/1.0\r\n"
EMPTY_HEADERS: Final = b"NATS/1.0\r\n\r\n"
_VERSION: Final = b"NATS/1.0"
_CRLF: Final = b"\r\n"


def _value(value: bytes) -> bytes:
    """A value as Go's http.Header.Write writes it: CR and LF as spaces, then blanks trimmed."""
    if 13 in value or 10 in value:  # CR, LF (a byte test: faster than a bytes one)
        value = value.replace(b"\r", b" ").replace(b"\n", b" ")
    return value.strip(b" \t")


def append_header(block: bytes | None, name: bytes, value: bytes) -> bytes:
    """`block` with `name: value` added last (nats-server's genHeader); a new block if there
    is none."""
    head = block[:-2] if block is not None and len(block) > 2 else _FIRST_LINE
    return b"%b%b: %b\r\n\r\n" % (head, name, _value(value))


def append_headers(block: bytes | None, fields: Iterable[tuple[bytes, bytes]]) -> bytes:
    """`block` with every field added last, in order: genHeader once a field, in one copy."""
    parts = [block[:-2] if block is not None and len(block) > 2 else _FIRST_LINE]
    for name, value in fields:
        parts += (name, b": ", _value(value), _CRLF)
    parts.append(_CRLF)
    return b"".join(parts)


def remove_header(block: bytes, name: bytes) -> bytes:
    """`block` without any `name` line (nats-server's removeHeaderIfPresent)."""
    key = b"\r\n" + name + b":"
    while True:
        found = block.find(key)
        if found < 0:
            return block
        start = found + 2
        end = block.find(_CRLF, start)
        if end < 0:
            return block
        block = block[:start] + block[end + 2 :]
        if len(block) <= len(EMPTY_HEADERS):
            return b""


def remove_header_prefix(block: bytes, prefix: bytes) -> bytes:
    """`block` without the lines whose name starts with `prefix` (nats-server's
    removeHeaderIfPrefixPresent: `Nats-Expected-` goes with every `Nats-Expected-*`)."""
    index = 0
    while True:
        index = block.find(prefix, index)
        if index < 0:
            return block
        if index < 1 or block[index - 1] != 0x0A:  # not at the start of a line
            index += len(prefix)
            continue
        end = block.find(_CRLF, index + len(prefix))
        if end < 0:
            return block
        block = block[:index] + block[end + 2 :]
        if len(block) <= len(EMPTY_HEADERS):
            return b""


def set_header(block: bytes | None, name: bytes, value: bytes) -> bytes:
    """`block` with `name: value` as the only `name` line, last (what nats-server's client
    setHeader does, and its removeHeaderIfPresent then genHeader)."""
    return append_header(remove_header(block, name) if block else None, name, value)


def remove_status(block: bytes) -> bytes:
    """`block` without the status and description of its first line (nats-server's
    removeHeaderStatusIfPresent, which it applies to what a stream stores)."""
    line_end = block.find(b"\r")
    if not block.startswith(_VERSION) or line_end <= len(_VERSION):
        return block
    block = _VERSION + block[line_end:]
    return b"" if len(block) == len(EMPTY_HEADERS) else block
