"""JSON from clients, read as Go's encoding/json reads it, however deeply it nests.

msgspec decodes recursively and gives up past Python's recursion limit (about 1,000 levels
less the caller's frames); Go's decoder takes up to 10,000 levels and refuses a deeper
document with "exceeded max depth". A document too deep for msgspec is cut down first: every
array or object nested deeper than `CUT_DEPTH` becomes an empty one of the same kind. Nothing
a server reads lies that deep, so the result is the one Go gives: the same fields, the same
type errors, the same unknown fields skipped or refused.
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec

__all__ = ["GO_MAX_DEPTH", "JsonTooDeep", "decode_json"]

# encoding/json's maxNestingDepth.
GO_MAX_DEPTH: Final = 10_000
CUT_DEPTH: Final = 100

# A string (whose brackets are text), or one bracket; linear, whatever the input.
_TOKENS: Final = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_OPENING: Final = frozenset(b"[{")
_QUOTE: Final = ord('"')


class JsonTooDeep(msgspec.DecodeError):
    """Nested deeper than Go takes: its error, and the offset nats-server's strict decoder
    names (the byte after the bracket one level too deep)."""

    reason = "exceeded max depth"

    def __init__(self, offset: int) -> None:
        super().__init__(f"{self.reason} at offset {offset}")
        self.offset = offset


def decode_json(data: bytes, type: Any = Any) -> Any:
    """`msgspec.json.decode(data, type=type)`, for any depth Go takes; JsonTooDeep (a
    msgspec.DecodeError) for a deeper document."""
    try:
        return msgspec.json.decode(data, type=type)
    except RecursionError:
        pass
    return msgspec.json.decode(cut_deep(data), type=type)


def cut_deep(data: bytes) -> bytes:
    """`data` with every array and object deeper than CUT_DEPTH emptied; JsonTooDeep if it
    nests deeper than GO_MAX_DEPTH. One pass, no recursion."""
    depth = 0
    kept: list[bytes] = []
    keep_from = 0
    for token in _TOKENS.finditer(data):
        at = token.start()
        char = data[at]
        if char == _QUOTE:
            continue
        if char in _OPENING:
            depth += 1
            if depth > GO_MAX_DEPTH:
                raise JsonTooDeep(at + 1)
            if depth == CUT_DEPTH + 1:
                kept.append(data[keep_from : at + 1])
        else:
            if depth == CUT_DEPTH + 1:
                keep_from = at  # the closing bracket stays: an empty array or object
            depth -= 1
    if depth > CUT_DEPTH:
        return b"".join(kept)  # unterminated: msgspec says what is wrong with what is left
    kept.append(data[keep_from:])
    return b"".join(kept)
