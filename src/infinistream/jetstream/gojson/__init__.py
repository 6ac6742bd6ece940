"""Go's encoding/json, as nats-server 2.15 reads JetStream API requests with it: one home for
its rules.

nats-server reads requests in two ways, and so does this package:

- `decode_request`: its strict request decoder (`unmarshalRequest`), a json.Decoder that refuses
  unknown fields and decodes value after value of the body into the same struct until the body
  ends (`{"seq":1} {"seq":2}` asks for 2). A syntax error names its offset
  (`... at offset 11`); a body cut short is `unexpected EOF`.
- `unmarshal`: json.Unmarshal, for pull requests and direct gets: exactly one value, unknown
  fields skipped, syntax errors without an offset.

What the two share is in `_syntax` (the text) and `_values` (the values into typed structs).
A request msgspec decodes by itself, with nothing Go would read otherwise, skips both: the
common, well-formed request costs one msgspec decode.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from infinistream.jetstream.gojson._quote import go_quote
from infinistream.jetstream.gojson._syntax import JSONSyntaxError, Reader
from infinistream.jetstream.gojson._values import (
    GoJSONError,
    GoType,
    decode_node,
    enum,
    fast_checks,
    schema_of,
)

__all__ = [
    "GoJSONError",
    "GoType",
    "decode_request",
    "enum",
    "go_quote",
    "is_empty_object",
    "unmarshal",
    "unmarshal_string",
]

T = TypeVar("T", bound=msgspec.Struct)


def decode_request(data: bytes, kind: type[T]) -> T:
    """`data` as nats-server's strict request decoder reads it into `kind`; GoJSONError with
    Go's text where it refuses it. A body of nothing (or only whitespace) is all defaults."""
    fast = _fast(data, kind)
    if fast is not None:
        return fast
    schema = schema_of(kind)
    reader = Reader(data)
    values: dict[str, Any] = {}
    while not reader.at_end():
        try:
            node = reader.next_value()
        except JSONSyntaxError as exc:
            if exc.offset is None:
                raise GoJSONError("unexpected EOF") from None
            raise GoJSONError(f"{exc.message} at offset {exc.offset}") from None
        decode_node(node, schema, values, data, strict=True, top=schema.go_name)
    return msgspec.convert(values, kind)


def unmarshal(data: bytes, kind: type[T], *, struct_name: str | None = None) -> T:
    """`data` as json.Unmarshal reads it into `kind`: one JSON value, unknown fields ignored.

    `struct_name` is the struct Go's errors name (nats-server decodes pull requests through a
    pointer to a pointer, and Go then names none: "Go struct field .batch").
    """
    fast = _fast(data, kind)
    if fast is not None:
        return fast
    schema = schema_of(kind)
    reader = Reader(data)
    try:
        node = reader.next_value()
        if not reader.at_end():
            raise reader.fail("after top-level value")
    except JSONSyntaxError as exc:
        raise GoJSONError(exc.message) from None
    values: dict[str, Any] = {}
    top = schema.go_name if struct_name is None else struct_name
    decode_node(node, schema, values, data, strict=False, top=top)
    return msgspec.convert(values, kind)


def _fast(data: bytes, kind: type[T]) -> T | None:
    """The request, where msgspec alone reads it as Go does; None where Go's rules must be
    applied one by one (an unknown or differently cased key, a null, a number that does not
    fit, two values, a \\u escape or -0 that Go reads its own way, anything malformed)."""
    schema = schema_of(kind)
    if not schema.fast or b"\\u" in data or b"-0" in data or not data.strip():
        return None
    try:
        request = msgspec.json.decode(data, type=kind)
    except (msgspec.DecodeError, ValueError):
        return None
    return request if fast_checks(schema, request) else None


def unmarshal_string(raw: bytes) -> str:
    """json.Unmarshal of a raw value into a Go string, as nats-server's own UnmarshalJSON
    methods do it (StoreCompression): null is "", anything but a string an error."""
    node = Reader(raw).next_value()
    if node.kind == "null":
        return ""
    if node.kind != "string":
        word = {"object": "object", "array": "array", "number": "number", "bool": "bool"}
        raise GoJSONError(f"json: cannot unmarshal {word[node.kind]} into Go value of type string")
    value: str = node.value
    return value


def is_empty_object(data: bytes) -> bool:
    """Whether json.Unmarshal of `data` into an `any` gives a map with no keys: a JSON object
    with no members, whitespace around it allowed, one value only."""
    reader = Reader(data)
    try:
        node = reader.next_value()
        if not reader.at_end():
            return False
    except JSONSyntaxError:
        return False
    return node.kind == "object" and not node.value
