"""Query options read as nats-server reads them (Go's strconv), with its error texts.

A malformed option is a `BadOption`: nats-server answers it 400 with the text as a plain body.
An option that is absent or empty takes its default; unknown options are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping

INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class BadOption(Exception):
    """A request nats-server refuses: over HTTP 400 with the message as a plain body."""


def _quote(text: str) -> str:
    # Go's strconv.Quote for the texts that reach it here (printable ASCII in practice).
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def text(query: Mapping[str, str], name: str) -> str:
    return query.get(name, "")


def boolean(query: Mapping[str, str], name: str) -> bool:
    value = query.get(name, "")
    if value == "":
        return False
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise BadOption(
        f"Error decoding boolean for '{name}': strconv.ParseBool: parsing {_quote(value)}: "
        "invalid syntax"
    )


def _digits(value: str, signed: bool) -> tuple[int | None, str]:
    body = value[1:] if signed and value[:1] in "+-" else value
    if not body or not body.isascii() or not body.isdigit():
        return None, "invalid syntax"
    # Any number of leading zeros, as strconv; past 20 digits no 64-bit value is left (and
    # int() would refuse a long enough one).
    significant = body.lstrip("0") or "0"
    if len(significant) > 20:
        return None, "value out of range"
    number = int(significant)
    return (-number if value[:1] == "-" else number), ""


def integer(query: Mapping[str, str], name: str) -> int:
    value = query.get(name, "")
    if value == "":
        return 0
    number, error = _digits(value, signed=True)
    if number is not None and not -INT64_MAX - 1 <= number <= INT64_MAX:
        error = "value out of range"
    if error:
        raise BadOption(
            f"Error decoding int for '{name}': strconv.Atoi: parsing {_quote(value)}: {error}"
        )
    assert number is not None
    return number


def unsigned(query: Mapping[str, str], name: str) -> int:
    value = query.get(name, "")
    if value == "":
        return 0
    number, error = _digits(value, signed=False)
    if number is not None and number > UINT64_MAX:
        error = "value out of range"
    if error:
        raise BadOption(
            f"Error decoding uint64 for '{name}': strconv.ParseUint: parsing {_quote(value)}: "
            f"{error}"
        )
    assert number is not None
    return number


def page(items_total: int, offset: int, limit: int) -> tuple[int, int]:
    """nats-server's sane bounds of a page: [start, end) of `items_total` items."""
    start = min(max(offset, 0), items_total)
    return start, start + min(limit, items_total - start)
