"""JSON text to values, with the syntax errors of the Go that nats-server 2.15 is built with.

A value is read whole before anything is decoded from it, as Go's decoders do, so a syntax
error anywhere in a value is what is reported, never a type error before it. Each value keeps
where it lies in the input (`start`, `end`): nats-server's enums decode their own raw JSON.

Go's texts, as nats-server answers them: `invalid character 'x' looking for beginning of value`
(and `... of object key string`, `after object key`, `after object key:value pair`, `after array
element`, `in string`, `in numeric literal`, `in literal true (expecting 'r')`), ``invalid escape
sequence `\\q` in string``, and the end of the input inside a value. The offset is that of the
byte after the offending character. Strings are read as Go reads them: invalid UTF-8 and lone
surrogate escapes become U+FFFD, a byte at a time.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from typing import Any, Final

from infinistream.jetstream.gojson._quote import go_quote

__all__ = ["MAX_DEPTH", "JSONSyntaxError", "Node", "Reader", "go_char"]

# Go's limit on nesting: deeper input is refused, not recursed into.
MAX_DEPTH: Final = 10_000

OBJECT: Final = "object"
ARRAY: Final = "array"
STRING: Final = "string"
NUMBER: Final = "number"
BOOL: Final = "bool"
NULL: Final = "null"

_WHITESPACE: Final = b" \t\n\r"
_PLAIN: Final = re.compile(rb'[^"\\\x00-\x1f]*')
_NUMBER: Final = re.compile(rb"-?(?:0|[1-9][0-9]*)(?P<frac>\.[0-9]+)?(?P<exp>[eE][+-]?[0-9]+)?")
_ESCAPES: Final = {
    ord('"'): '"',
    ord("\\"): "\\",
    ord("/"): "/",
    ord("b"): "\b",
    ord("f"): "\f",
    ord("n"): "\n",
    ord("r"): "\r",
    ord("t"): "\t",
}
_HEX: Final = frozenset(b"0123456789abcdefABCDEF")
_LITERALS: Final = {
    ord("t"): (b"true", True),
    ord("f"): (b"false", False),
    ord("n"): (b"null", None),
}


def _replace_per_byte(exc: UnicodeError) -> tuple[str, int]:
    # Go's decoder replaces each byte that is not part of valid UTF-8 with U+FFFD.
    assert isinstance(exc, UnicodeDecodeError)
    return "\ufffd", exc.start + 1


codecs.register_error("infinistream-go-utf8", _replace_per_byte)


class JSONSyntaxError(ValueError):
    """Input that is not JSON: Go's words, and the offset nats-server's strict decoder names
    (None at the end of the input, which Go words as the caller's decoder does)."""

    def __init__(self, message: str, offset: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset


@dataclass(slots=True)
class Node:
    """A JSON value: `value` is a list of (key, Node) for an object (keys in order, repeats
    kept), a list of Nodes for an array, the text of a string, the literal text of a number,
    True/False, or None; `data[start:end]` is its raw text."""

    kind: str
    value: Any
    start: int
    end: int


def go_char(data: bytes, pos: int) -> tuple[str, int]:
    """The character at `pos` as Go quotes it in syntax errors ('x', '\\x01', '\\''), and the
    offset just after it (a whole UTF-8 sequence, or one byte of invalid UTF-8)."""
    for width in (1, 2, 3, 4):
        try:
            char = data[pos : pos + width].decode()
        except UnicodeDecodeError:
            continue
        if char == "'":
            return "'\\''", pos + 1
        if char == '"':
            return "'\"'", pos + 1
        return "'" + go_quote(char)[1:-1] + "'", pos + width
    return "'" + go_quote(data[pos : pos + 1].decode("utf-8", "surrogateescape"))[
        1:-1
    ] + "'", pos + 1


class Reader:
    """Reads JSON values from `data`, one after another (`next_value`), as Go's decoders do."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    # -- whitespace and errors ---------------------------------------------------------------

    def skip_whitespace(self) -> None:
        data, pos, size = self.data, self.pos, len(self.data)
        while pos < size and data[pos] in _WHITESPACE:
            pos += 1
        self.pos = pos

    def at_end(self) -> bool:
        self.skip_whitespace()
        return self.pos >= len(self.data)

    def _peek(self) -> int:
        if self.pos >= len(self.data):
            raise JSONSyntaxError("unexpected end of JSON input", None)
        return self.data[self.pos]

    def fail(self, context: str) -> JSONSyntaxError:
        """The error for the character at the current position, in `context`."""
        if self.pos >= len(self.data):
            return JSONSyntaxError("unexpected end of JSON input", None)
        char, after = go_char(self.data, self.pos)
        return JSONSyntaxError(f"invalid character {char} {context}", after)

    # -- values --------------------------------------------------------------------------------

    def next_value(self) -> Node:
        """The value at the current position (after whitespace), read whole."""
        self.skip_whitespace()
        stack: list[Node] = []
        while True:
            node = self._open_or_scalar(stack)
            if node is None:
                continue  # a container was opened: read its first member
            node = self._close(stack, node)
            if node is not None:
                return node

    def _open_or_scalar(self, stack: list[Node]) -> Node | None:
        """Start the value at the current position: a scalar, whole; or a container, which
        is pushed (None is returned) unless it is empty."""
        char = self._peek()
        start = self.pos
        if char == 0x7B or char == 0x5B:  # { [
            if len(stack) >= MAX_DEPTH:
                raise JSONSyntaxError("exceeded max depth", self.pos + 1)
            self.pos += 1
            self.skip_whitespace()
            is_object = char == 0x7B
            node = Node(OBJECT if is_object else ARRAY, [], start, start)
            if self._peek() == (0x7D if is_object else 0x5D):  # } ]
                self.pos += 1
                node.end = self.pos
                return node
            stack.append(node)
            if is_object:
                self._member_key(node)
            return None
        if char == 0x22:  # "
            text = self._string()
            return Node(STRING, text, start, self.pos)
        if char == 0x2D or 0x30 <= char <= 0x39:  # - 0-9
            return Node(NUMBER, self._number(), start, self.pos)
        literal = _LITERALS.get(char)
        if literal is None:
            raise self.fail("looking for beginning of value")
        word, value = literal
        for i in range(1, len(word)):
            self.pos = start + i
            if self._peek() != word[i]:
                expected = chr(word[i])
                raise self.fail(f"in literal {word.decode()} (expecting '{expected}')")
        self.pos = start + len(word)
        return Node(NULL if value is None else BOOL, value, start, self.pos)

    def _member_key(self, obj: Node) -> None:
        """An object member's key and colon; the value is read next."""
        if self._peek() != 0x22:
            raise self.fail("looking for beginning of object key string")
        key = self._string()
        self.skip_whitespace()
        if self._peek() != 0x3A:  # :
            raise self.fail("after object key")
        self.pos += 1
        self.skip_whitespace()
        members = obj.value
        assert isinstance(members, list)
        members.append((key, None))

    def _close(self, stack: list[Node], node: Node) -> Node | None:
        """Put a finished value in its container and read on to the next member, closing
        containers as they end; the finished top-level value, or None once a member is next."""
        while stack:
            parent = stack[-1]
            members = parent.value
            assert isinstance(members, list)
            if parent.kind == OBJECT:
                members[-1] = (members[-1][0], node)
            else:
                members.append(node)
            self.skip_whitespace()
            char = self._peek()
            closing = 0x7D if parent.kind == OBJECT else 0x5D
            if char == 0x2C:  # ,
                self.pos += 1
                self.skip_whitespace()
                if parent.kind == OBJECT:
                    self._member_key(parent)
                return None
            if char != closing:
                context = "object key:value pair" if parent.kind == OBJECT else "array element"
                raise self.fail(f"after {context}")
            self.pos += 1
            parent.end = self.pos
            node = stack.pop()
        return node

    def _number(self) -> str:
        """The number at the current position. Where the grammar stops short (`-x`, `1.}`,
        `1e+}`), the character that does not fit is the error."""
        found = _NUMBER.match(self.data, self.pos)
        if found is None:  # a minus sign without a digit
            self.pos += 1
            raise self.fail("in numeric literal")
        end = found.end()
        after = self.data[end : end + 1] if found.group("exp") is None else b""
        if after == b"." and found.group("frac") is None:
            self.pos = end + 1
            raise self.fail("in numeric literal")
        if after in (b"e", b"E"):
            self.pos = end + 2 if self.data[end + 1 : end + 2] in (b"+", b"-") else end + 1
            raise self.fail("in numeric literal")
        self.pos = end
        return self.data[found.start() : end].decode()

    def _string(self) -> str:
        """The string starting at the current quote; leaves the position after its end."""
        data = self.data
        pos = self.pos + 1
        parts: list[str] = []
        while True:
            plain = _PLAIN.match(data, pos)
            assert plain is not None
            if plain.end() > pos:
                parts.append(data[pos : plain.end()].decode("utf-8", "infinistream-go-utf8"))
                pos = plain.end()
            if pos >= len(data):
                raise JSONSyntaxError("unexpected end of JSON input", None)
            char = data[pos]
            if char == 0x22:
                self.pos = pos + 1
                return "".join(parts)
            if char != 0x5C:  # a control character
                self.pos = pos
                raise self.fail("in string")
            pos = self._escape(pos, parts)

    def _escape(self, pos: int, parts: list[str]) -> int:
        """The escape at `pos` (its backslash) into `parts`; the position after it."""
        data = self.data
        if pos + 1 >= len(data):
            raise JSONSyntaxError("unexpected end of JSON input", None)
        kind = data[pos + 1]
        simple = _ESCAPES.get(kind)
        if simple is not None:
            parts.append(simple)
            return pos + 2
        if kind != 0x75:  # u
            _, after = go_char(data, pos + 1)
            raise self._bad_escape(pos, after)
        code = self._hex4(pos)
        if 0xD800 <= code < 0xDC00 and data[pos + 6 : pos + 8] == b"\\u":
            low = self._hex4(pos + 6)
            if 0xDC00 <= low < 0xE000:
                parts.append(chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)))
                return pos + 12
        parts.append("\ufffd" if 0xD800 <= code < 0xE000 else chr(code))
        return pos + 6

    def _hex4(self, pos: int) -> int:
        digits = self.data[pos + 2 : pos + 6]
        if len(digits) < 4:
            raise JSONSyntaxError("unexpected end of JSON input", None)
        if not _HEX.issuperset(digits):
            raise self._bad_escape(pos, pos + 6)
        return int(digits, 16)

    def _bad_escape(self, pos: int, after: int) -> JSONSyntaxError:
        sequence = self.data[pos:after].decode("utf-8", "surrogateescape")
        return JSONSyntaxError(f"invalid escape sequence `{sequence}` in string", after)
