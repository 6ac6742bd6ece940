"""NATS message header blocks.

A block is ``NATS/1.0[ <status>[ <description>]]\\r\\n``, then ``Key: Value\\r\\n``
lines, then ``\\r\\n``.

Names are case-sensitive and keep their case, as in nats-server's
``sliceHeader`` and the official clients.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Final, overload

__all__ = ["ParsedHeaders", "encode_headers", "header_int", "header_value", "parse_headers"]

_PREFIX: Final = b"NATS/1.0"
_CRLF: Final = b"\r\n"
_END: Final = b"\r\n\r\n"
_BLANKS: Final = " \t"
_STATUS_LEN: Final = 3
_BAD_NAME_CHARS: Final = frozenset(":\r\n \t")


def header_value(block: bytes, name: bytes) -> bytes | None:
    """Return the first value of ``name`` in ``block`` without parsing the block.

    Same result as nats-server's ``sliceHeader``: the name must start a line
    and be followed directly by ``:``; leading spaces (only spaces) are
    skipped and the value runs to the next CRLF, or the end of the block.
    """
    key = b"\r\n" + name + b":"
    index = block.find(key)
    if index < 0:
        return None
    start = index + len(key)
    stop = block.find(_CRLF, start)
    if stop < 0:
        stop = len(block)
    return block[start:stop].lstrip(b" ")


_U64: Final = 1 << 64
_I64_MAX: Final = (1 << 63) - 1
# Digits int() reads at once (its limit is 4,300): a longer number is read in parts.
_DIGITS_AT_ONCE: Final = 1000


def header_int(value: bytes) -> int:
    """nats-server's parseInt64 of a header value: -1 for anything but ASCII digits (an empty
    value too), and a number past 2^63 wrapped around as Go's int64 arithmetic wraps it.

    Linear in the length however long the value: a header of 5,000 digits is just a number
    no stream has.
    """
    if not value or not value.isdigit():
        return -1
    if len(value) <= 18:
        return int(value)
    n = 0
    for start in range(0, len(value), _DIGITS_AT_ONCE):
        part = value[start : start + _DIGITS_AT_ONCE]
        n = (n * 10 ** len(part) + int(part)) % _U64
    return n - _U64 if n > _I64_MAX else n


class ParsedHeaders:
    """A decoded header block: status line plus ordered, multi-valued fields."""

    __slots__ = ("_fields", "description", "status")

    def __init__(
        self,
        fields: list[tuple[str, str]],
        status: int | None = None,
        description: str | None = None,
    ) -> None:
        self._fields = fields
        self.status = status
        self.description = description

    @overload
    def get(self, name: str) -> str | None: ...
    @overload
    def get(self, name: str, default: str) -> str: ...
    def get(self, name: str, default: str | None = None) -> str | None:
        """The first value of ``name`` (case-sensitive), else ``default``."""
        for key, value in self._fields:
            if key == name:
                return value
        return default

    def get_all(self, name: str) -> list[str]:
        """Every value of ``name`` (case-sensitive), in block order."""
        return [value for key, value in self._fields if key == name]

    def items(self) -> list[tuple[str, str]]:
        """Every ``(name, value)`` pair, in block order."""
        return list(self._fields)

    def __contains__(self, name: object) -> bool:
        return any(key == name for key, _ in self._fields)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ParsedHeaders):
            return NotImplemented
        return (self.status, self.description, self._fields) == (
            other.status,
            other.description,
            other._fields,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"ParsedHeaders({self._fields!r}, status={self.status!r}, "
            f"description={self.description!r})"
        )


def encode_headers(
    headers: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
    *,
    status: int | None = None,
    description: str | None = None,
) -> bytes:
    """Build a header block; raises ValueError for names or values that
    would not survive the trip (CR/LF anywhere, blanks or ``:`` in names)."""
    if status is None:
        if description is not None:
            raise ValueError("a description needs a status")
        parts = ["NATS/1.0\r\n"]
    else:
        if not 100 <= status <= 999:
            raise ValueError(f"status must have three digits: {status!r}")
        if not description:
            parts = [f"NATS/1.0 {status}\r\n"]
        else:
            _check_text("description", description)
            parts = [f"NATS/1.0 {status} {description}\r\n"]
    if headers is not None:
        pairs = headers.items() if isinstance(headers, Mapping) else headers
        for name, value in pairs:
            if not name or not _BAD_NAME_CHARS.isdisjoint(name):
                raise ValueError(f"invalid header name: {name!r}")
            _check_text("header value", value)
            parts.append(f"{name}: {value}\r\n")
    parts.append("\r\n")
    return "".join(parts).encode()


def _check_text(what: str, text: str) -> None:
    if "\r" in text or "\n" in text:
        raise ValueError(f"{what} must not contain CR or LF: {text!r}")


def parse_headers(block: bytes) -> ParsedHeaders:
    """Decode a header block; raises ValueError if it is malformed.

    Values are stripped of surrounding blanks and folded continuation lines
    are joined with one space, as Go's textproto (used by nats-server's
    ``getHeader``) does.
    """
    if not block.startswith(_PREFIX) or not block.endswith(_END):
        raise ValueError("a header block starts with NATS/1.0 and ends with CRLF CRLF")
    lines = block[: -len(_END)].decode().split("\r\n")
    status, description = _parse_status_line(lines[0][len(_PREFIX) :])
    fields: list[tuple[str, str]] = []
    for line in lines[1:]:
        if "\r" in line or "\n" in line:
            raise ValueError(f"stray CR or LF in header line: {line!r}")
        if line[:1] in (" ", "\t"):
            if not fields or not line.strip(_BLANKS):
                raise ValueError(f"misplaced continuation line: {line!r}")
            name, value = fields[-1]
            fields[-1] = (name, f"{value} {line.strip(_BLANKS)}".lstrip(" "))
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or not _BAD_NAME_CHARS.isdisjoint(name):
            raise ValueError(f"malformed header line: {line!r}")
        fields.append((name, value.strip(_BLANKS)))
    return ParsedHeaders(fields, status, description)


def _parse_status_line(rest: str) -> tuple[int | None, str | None]:
    if not rest:
        return None, None
    if rest[0] not in _BLANKS or "\n" in rest or "\r" in rest:
        raise ValueError(f"malformed status line: NATS/1.0{rest!r}")
    rest = rest.strip(_BLANKS)
    if not rest:
        return None, None
    code = rest[:_STATUS_LEN]
    if len(code) != _STATUS_LEN or not code.isascii() or not code.isdigit():
        raise ValueError(f"malformed status: {rest!r}")
    if len(rest) > _STATUS_LEN and rest[_STATUS_LEN] not in _BLANKS:
        raise ValueError(f"malformed status: {rest!r}")
    description = rest[_STATUS_LEN:].strip(_BLANKS)
    return int(code), description or None
