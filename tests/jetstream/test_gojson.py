"""Go's encoding/json as nats-server reads requests with it (jetstream/gojson), in process.

The texts are Go's own; tests/e2e/test_parity_requests.py sends the same bodies to nats-server
and to an agent and finds the same answers.
"""

from __future__ import annotations

import pytest

from infinistream.jetstream.api import MsgGetRequest, StreamConfigRequest
from infinistream.jetstream.gojson import GoJSONError, decode_request, unmarshal

FIELD = "json: cannot unmarshal {} into Go struct field JSApiMsgGetRequest.seq of type uint64"

# (body, the sequence read, or Go's refusal)
MSG_GET: list[tuple[bytes, int | str]] = [
    (b"", 0),
    (b"  ", 0),
    (b"null", 0),
    (b'{"seq":null,"last_by_subj":"a"}', 0),
    (b'{"seq":3}', 3),
    (b'{"SEQ":3}', 3),  # keys match without regard to case
    (b'{"Seq":3,"seq":4}', 4),  # the last one wins
    (b'{"seq":1} {"seq":2}', 2),  # the strict decoder reads value after value
    (b'{"seq":1e0}', FIELD.format("number 1e0")),
    (b'{"seq":2.0}', FIELD.format("number 2.0")),
    (b'{"seq":2.5}', FIELD.format("number 2.5")),
    (b'{"seq":-1}', FIELD.format("number -1")),
    (b'{"seq":18446744073709551616}', FIELD.format("number 18446744073709551616")),
    (b'{"seq":"2"}', FIELD.format("string")),
    (b'{"seq":true}', FIELD.format("bool")),
    (b"[]", "json: cannot unmarshal array into Go value of type server.JSApiMsgGetRequest"),
    (b'{"bogus":1}', 'json: unknown field "bogus"'),
    (b'{"seq":1', "unexpected EOF"),
    (
        b'{"seq":1,}',
        "invalid character '}' looking for beginning of object key string at offset 10",
    ),
]


@pytest.mark.parametrize(("body", "expected"), MSG_GET, ids=[repr(b) for b, _ in MSG_GET])
def test_message_get_requests_read_as_go_reads_them(body: bytes, expected: int | str) -> None:
    if isinstance(expected, int):
        assert decode_request(body, MsgGetRequest).seq == expected
        return
    with pytest.raises(GoJSONError) as refused:
        decode_request(body, MsgGetRequest)
    assert str(refused.value) == expected


def test_a_null_leaves_the_zero_value_at_any_depth() -> None:
    body = b'{"name":"S","subjects":null,"placement":{"cluster":null,"tags":null},"metadata":null}'
    cfg = decode_request(body, StreamConfigRequest)
    assert (cfg.name, cfg.subjects, cfg.metadata) == ("S", [], None)
    assert cfg.placement is not None and cfg.placement.cluster == ""


def test_configs_are_strict_at_every_depth_and_durations_are_numbers() -> None:
    with pytest.raises(GoJSONError, match='unknown field "bogus"'):
        decode_request(b'{"name":"S","consumer_limits":{"bogus":1}}', StreamConfigRequest)
    with pytest.raises(GoJSONError) as refused:
        decode_request(b'{"name":"S","max_age":"1h"}', StreamConfigRequest)
    assert str(refused.value) == (
        "json: cannot unmarshal string into Go struct field StreamConfigRequest.max_age"
        " of type time.Duration"
    )
    # An enum reads its raw JSON: null is no storage type.
    with pytest.raises(GoJSONError, match='can not unmarshal "null"'):
        decode_request(b'{"name":"S","storage":null}', StreamConfigRequest)


def test_unmarshal_skips_unknown_fields_and_reads_one_value() -> None:
    assert unmarshal(b'{"seq":5,"bogus":1}', MsgGetRequest).seq == 5
    with pytest.raises(GoJSONError, match="after top-level value"):
        unmarshal(b'{"seq":1} {"seq":2}', MsgGetRequest)
