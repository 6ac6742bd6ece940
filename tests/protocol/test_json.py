"""JSON read as Go reads it, at any depth Go takes (decode_json)."""

from __future__ import annotations

import msgspec
import pytest

from infinistream.protocol import GO_MAX_DEPTH, JsonTooDeep, decode_json


class Request(msgspec.Struct, forbid_unknown_fields=True):
    batch: int = 0
    subjects: list[str] = []


class Lenient(msgspec.Struct):
    batch: int = 0


def nested(depth: int, open_: bytes = b"[", close: bytes = b"]") -> bytes:
    return open_ * depth + close * depth


@pytest.mark.parametrize("depth", [1, 500, 1000, 5000, GO_MAX_DEPTH - 1])
def test_deep_values_read_as_go_reads_them(depth: int) -> None:
    body = b'{"batch":3,"x":' + nested(depth) + b"}"
    assert decode_json(body, type=Lenient) == Lenient(batch=3)
    with pytest.raises(msgspec.ValidationError, match="unknown field `x`"):
        decode_json(body, type=Request)
    objects = b'{"batch":4,"y":' + b'{"o":' * depth + b"1" + b"}" * depth + b"}"
    assert decode_json(objects, type=Lenient) == Lenient(batch=4)


def test_a_deep_value_in_a_known_field_is_the_same_type_error() -> None:
    shallow = b'{"subjects":[[1]]}'
    deep = b'{"subjects":[' + nested(3000) + b"]}"
    with pytest.raises(msgspec.ValidationError) as at_two:
        decode_json(shallow, type=Request)
    with pytest.raises(msgspec.ValidationError) as at_3000:
        decode_json(deep, type=Request)
    assert str(at_two.value) == str(at_3000.value)


def test_deeper_than_go_takes_is_its_error_at_its_offset() -> None:
    # As nats-server's strict decoder: the offset after the bracket one level too deep.
    body = b'{"x":' + nested(GO_MAX_DEPTH)[: GO_MAX_DEPTH + 10] + b"]}"
    with pytest.raises(JsonTooDeep) as exc:
        decode_json(body)
    assert exc.value.offset == 10005
    assert str(exc.value) == "exceeded max depth at offset 10005"
    assert exc.value.reason == "exceeded max depth"


def test_brackets_in_strings_are_text() -> None:
    text = "[" * 3000 + '"\\"{' + "]"
    body = b'{"x":' + nested(2000) + b',"s":' + msgspec.json.encode(text) + b"}"
    assert decode_json(body)["s"] == text
    with pytest.raises(msgspec.DecodeError):
        decode_json(b'{"x":' + nested(2000)[:-1])
