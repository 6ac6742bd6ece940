"""JSON values into request structs, with the rules of Go's encoding/json that nats-server
decodes with.

A request type is a msgspec Struct whose fields are those of nats-server's Go struct, with
`go_name` (a ClassVar) naming that struct in errors; what a Python annotation does not say
about the Go type is said with a `GoType` in `Annotated`:

- `int` fields name their Go integer type (`uint64`, `int32`, `time.Duration` ...): a number
  that is not an integer of that range is refused, with its text as written;
- `GoType("time.Time")` on a string field: an RFC 3339 string, checked as time.Time reads it;
- `GoType(name, unmarshal=...)`: a Go type with its own UnmarshalJSON (nats-server's enums),
  given the raw JSON of the value, null included, and answering its own errors;
- `X | None`: a Go pointer, slice or map, which null sets to nil. For any other field null
  leaves the value as it is.

Keys match a field's name exactly, else without regard to case; a repeated key decodes again
into the same field (an object merges into what the field holds). The first error met in the
document ends the decoding, as in the Go that nats-server 2.15 is built with.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Final, Union

import msgspec

from infinistream.jetstream.gojson._quote import go_quote
from infinistream.jetstream.gojson._syntax import ARRAY, BOOL, NULL, NUMBER, OBJECT, STRING, Node
from infinistream.jetstream.times import parse_go_time

__all__ = ["GoJSONError", "GoType", "decode_node", "enum", "fast_checks", "schema_of"]

# The range of each Go integer type a request field may have.
_INT_RANGES: Final[dict[str, tuple[int, int]]] = {
    "int": (-(2**63), 2**63 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "time.Duration": (-(2**63), 2**63 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint64": (0, 2**64 - 1),
}
_TIME: Final = "time.Time"
# How Go names a JSON value of each kind in "cannot unmarshal <kind> into ...".
_KIND_WORDS: Final = {
    OBJECT: "object",
    ARRAY: "array",
    STRING: "string",
    NUMBER: "number",
    BOOL: "bool",
    NULL: "null",
}


class GoJSONError(ValueError):
    """A request Go's decoder refuses; str() is Go's text (nats-server prefixes "invalid
    JSON: " in API answers)."""


@dataclass(frozen=True, slots=True)
class GoType:
    """What nats-server's Go type of a field is, where the Python type does not say it.

    `name` is how Go's errors name the type. `unmarshal` stands for the type's own
    UnmarshalJSON: it takes the value's raw JSON (null included) and returns the field's value,
    or raises GoJSONError with the type's words.
    """

    name: str
    unmarshal: Callable[[bytes], Any] | None = field(default=None, compare=False)


# -- what a field is ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Kind:
    """How one Go type decodes: `tag` is one of the kinds below, `name` its Go name in errors;
    `pointer`: null sets nil."""

    tag: str
    name: str
    pointer: bool = False
    low: int = 0
    high: int = 0
    element: _Kind | None = None
    schema: _Schema | None = None
    unmarshal: Callable[[bytes], Any] | None = None


@dataclass(frozen=True, slots=True)
class _Schema:
    """A struct's fields by JSON name, and by name folded to lower case."""

    cls: type[msgspec.Struct]
    go_name: str
    fields: dict[str, tuple[str, _Kind]]
    folded: dict[str, str]
    # Decodable by msgspec straight away: no nested structs, maps or types of their own.
    fast: bool


_STRING, _BOOL, _INT, _TIMEVALUE, _CUSTOM, _SLICE, _MAP, _STRUCT = (
    "string",
    "bool",
    "int",
    "time",
    "custom",
    "slice",
    "map",
    "struct",
)


def _kind_of(annotation: Any) -> _Kind:
    go: GoType | None = None
    if typing.get_origin(annotation) is typing.Annotated:
        annotation, *extras = typing.get_args(annotation)
        go = next((e for e in extras if isinstance(e, GoType)), None)
    pointer = False
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation, pointer = args[0], True
        if typing.get_origin(annotation) is typing.Annotated:
            inner = _kind_of(annotation)
            return _with(inner, pointer=True)
    if go is not None and go.unmarshal is not None:
        return _Kind(_CUSTOM, go.name, pointer, unmarshal=go.unmarshal)
    if go is not None and go.name == _TIME:
        return _Kind(_TIMEVALUE, _TIME, pointer)
    origin = typing.get_origin(annotation)
    if annotation is str:
        return _Kind(_STRING, "string", pointer)
    if annotation is bool:
        return _Kind(_BOOL, "bool", pointer)
    if annotation is int:
        name = go.name if go is not None else "int"
        low, high = _INT_RANGES[name]
        return _Kind(_INT, name, pointer, low, high)
    if origin is list:
        element = _kind_of(typing.get_args(annotation)[0])
        name = go.name if go is not None else "[]" + element.name
        return _Kind(_SLICE, name, pointer, element=element)
    if origin is dict:
        element = _kind_of(typing.get_args(annotation)[1])
        return _Kind(_MAP, "map[string]" + element.name, pointer, element=element)
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        schema = schema_of(annotation)
        return _Kind(_STRUCT, "server." + schema.go_name, pointer, schema=schema)
    raise TypeError(f"no Go decoding for {annotation!r}")


def _with(kind: _Kind, *, pointer: bool) -> _Kind:
    return _Kind(
        kind.tag, kind.name, pointer, kind.low, kind.high, kind.element, kind.schema, kind.unmarshal
    )


@cache
def schema_of(cls: type[msgspec.Struct]) -> _Schema:
    """The Go decoding of a request struct, worked out once per type."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {name: (name, _kind_of(hints[name])) for name in cls.__struct_fields__}
    fast = cls.__struct_config__.forbid_unknown_fields and all(
        kind.tag in (_STRING, _BOOL, _INT, _TIMEVALUE)
        or (kind.tag == _SLICE and kind.element is not None and kind.element.tag == _STRING)
        for _, kind in fields.values()
    )
    return _Schema(
        cls,
        getattr(cls, "go_name", cls.__name__),
        fields,
        {name.casefold(): name for name in fields},
        fast,
    )


# -- decoding ----------------------------------------------------------------------------------

# A decoded null that leaves the field as it was.
_KEEP: Final = object()


@dataclass(slots=True)
class _Context:
    data: bytes
    top: str  # the top-level struct's name, as Go's errors start a field's path with it
    strict: bool  # unknown fields are errors (nats-server's strict decoder)


def decode_node(
    node: Node, schema: _Schema, values: dict[str, Any], data: bytes, *, strict: bool, top: str
) -> None:
    """Decode a top-level value into `values` (a struct's fields by name, as far as set)."""
    ctx = _Context(data, top, strict)
    if node.kind == NULL:
        return
    if node.kind != OBJECT:
        raise _type_error(ctx, node, [], "server." + schema.go_name)
    _decode_object(ctx, node, schema, values, [])


def _decode_object(
    ctx: _Context, node: Node, schema: _Schema, values: dict[str, Any], path: list[str | int]
) -> None:
    for key, child in node.value:
        name = key if key in schema.fields else schema.folded.get(key.casefold())
        if name is None:
            if ctx.strict:
                raise GoJSONError("json: unknown field " + go_quote(key))
            continue
        attr, kind = schema.fields[name]
        value = _decode(ctx, child, kind, values.get(attr, _KEEP), [*path, key])
        if value is not _KEEP:
            values[attr] = value


def _decode(ctx: _Context, node: Node, kind: _Kind, current: Any, path: list[str | int]) -> Any:
    """The value `node` gives a field of `kind` that holds `current` (_KEEP: its default)."""
    tag = kind.tag
    if tag == _CUSTOM:
        assert kind.unmarshal is not None
        return kind.unmarshal(ctx.data[node.start : node.end])
    if node.kind == NULL:
        # nil for a pointer, slice or map (an empty one where Python holds no None)
        if kind.pointer:
            return None
        return [] if tag == _SLICE else {} if tag == _MAP else _KEEP
    if tag == _STRING:
        if node.kind == STRING:
            return node.value
    elif tag == _BOOL:
        if node.kind == BOOL:
            return node.value
    elif tag == _INT:
        if node.kind == NUMBER:
            return _integer(ctx, node, kind, path)
    elif tag == _TIMEVALUE:
        if node.kind == STRING:
            try:
                parse_go_time(node.value)
            except ValueError as exc:
                raise GoJSONError(str(exc)) from None
            return node.value
    elif tag == _SLICE:
        if node.kind == ARRAY:
            assert kind.element is not None
            return [_element(ctx, n, kind.element, [*path, i]) for i, n in enumerate(node.value)]
    elif tag == _MAP:
        if node.kind == OBJECT:
            assert kind.element is not None
            mapping = dict(current) if isinstance(current, dict) else {}
            for key, child in node.value:
                mapping[key] = _element(ctx, child, kind.element, [*path, key])
            return mapping
    elif node.kind == OBJECT:  # a struct
        assert kind.schema is not None
        fields = dict(current) if isinstance(current, dict) else {}
        _decode_object(ctx, node, kind.schema, fields, path)
        return fields
    raise _type_error(ctx, node, path, kind.name)


def _element(ctx: _Context, node: Node, kind: _Kind, path: list[str | int]) -> Any:
    """An element of a slice or map: a null one is its type's zero value."""
    value = _decode(ctx, node, kind, _KEEP, path)
    if value is not _KEEP:
        return value
    if kind.tag == _STRUCT:
        return {}
    return {_STRING: "", _BOOL: False, _INT: 0}.get(kind.tag)


def _integer(ctx: _Context, node: Node, kind: _Kind, path: list[str | int]) -> int:
    text: str = node.value
    # strconv.ParseInt and ParseUint: decimal digits, a sign only where the type has one.
    digits = text[1:] if text.startswith("-") and kind.low < 0 else text
    if digits.isdigit() and digits.isascii():
        value = int(text)
        if kind.low <= value <= kind.high:
            return value
    raise _type_error(ctx, node, path, kind.name, number=text)


def _type_error(
    ctx: _Context, node: Node, path: list[str | int], go_name: str, *, number: str = ""
) -> GoJSONError:
    what = f"number {number}" if number else _KIND_WORDS[node.kind]
    if not path:
        return GoJSONError(f"json: cannot unmarshal {what} into Go value of type {go_name}")
    where = ".".join(str(p) for p in path)
    # Go names a struct field's path so; an element of a slice has no field name of its own.
    into = "" if isinstance(path[-1], int) else "Go struct field "
    return GoJSONError(
        f"json: cannot unmarshal {what} into {into}{ctx.top}.{where} of type {go_name}"
    )


def fast_checks(schema: _Schema, request: msgspec.Struct) -> bool:
    """Whether a request msgspec decoded by itself is what Go reads: integers within their Go
    types (msgspec reads any size) and times Go can parse."""
    for attr, kind in schema.fields.values():
        value = getattr(request, attr)
        if kind.tag == _INT and not kind.low <= value <= kind.high:
            return False
        if kind.tag == _TIMEVALUE and value is not None:
            try:
                parse_go_time(value)
            except ValueError:
                return False
    return True


def enum(
    go_name: str,
    names: dict[str, str],
    *,
    lower: bool = False,
    error: str = "can not unmarshal {quoted}",
) -> GoType:
    """A Go enum whose UnmarshalJSON switches on its raw JSON, as nats-server's do: `names` maps
    the raw text (quotes included: `"limits"`) to the value, after Go's strings.ToLower where
    `lower`; anything else, null too, is refused with `error` (`{quoted}`: the raw text as %q
    quotes it, `{raw}`: as it is)."""

    def unmarshal(raw: bytes) -> str:
        text = raw.decode("utf-8", "surrogateescape")
        value = names.get(text.lower() if lower else text)
        if value is None:
            raise GoJSONError(error.format(quoted=go_quote(text), raw=text))
        return value

    return GoType(go_name, unmarshal)
