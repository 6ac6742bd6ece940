"""Go's strconv.Quote, the %q of the error texts nats-server builds."""

from __future__ import annotations

from typing import Final

__all__ = ["go_quote"]

_GO_ESCAPES: Final[dict[str, str]] = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def go_quote(text: str) -> str:
    """Go's strconv.Quote (the %q verb), used in the error texts nats-server builds.

    Text decoded with "surrogateescape" shows each byte that was not UTF-8 as a `\\xNN` escape, as
    Go quotes such bytes.
    """
    parts = []
    for ch in text:
        code = ord(ch)
        if ch in _GO_ESCAPES:
            parts.append(_GO_ESCAPES[ch])
        elif 0xDC80 <= code <= 0xDCFF:
            parts.append(f"\\x{code - 0xDC00:02x}")
        elif ch.isprintable():
            parts.append(ch)
        elif code < 0x80:
            parts.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            parts.append(f"\\u{code:04x}")
        else:
            parts.append(f"\\U{code:08x}")
    return '"' + "".join(parts) + '"'
