"""Unknown fields in JetStream API requests, as nats-server 2.15's strict mode answers them.

Each test runs against an agent and against nats-server 2.15.1 with the same requests and the
same expected answers. nats-server decodes a request with encoding/json's DisallowUnknownFields:
a field its Go struct does not have is refused with 400 10025 `invalid JSON: json: unknown field
"bogus"`, and the request has no effect. Every field the Go struct has is accepted: the field
names listed here are read from nats-server's source (server/jetstream_api.go JSApi*Request,
server/consumer.go CreateConsumerRequest).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from support.servers import both_servers

server_url = both_servers()

API = "$JS.API."
TYPE = "io.nats.jetstream.api.v1."

_streams = itertools.count(1)


@pytest.fixture
def stream() -> str:
    return f"U{next(_streams)}"


@pytest.fixture
async def nc(server_url: str, stream: str) -> AsyncIterator[Client]:
    client = await nats.connect(server_url)
    js = client.jetstream(timeout=10)
    await js.add_stream(name=stream, subjects=[f"{stream}.>"])
    for i in range(5):
        await js.publish(f"{stream}.{i % 2}", b"x")
    await js.add_consumer(stream, durable_name="C", ack_policy="explicit")
    yield client
    await js.delete_stream(stream)
    await client.close()


async def api(nc: Client, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    msg = await nc.request(API + subject, json.dumps(body).encode(), timeout=10)
    return json.loads(msg.data)  # type: ignore[no-any-return]


def unknown(field: str) -> dict[str, Any]:
    return {
        "code": 400,
        "err_code": 10025,
        "description": f'invalid JSON: json: unknown field "{field}"',
    }


# (API subject with {s} for the stream, response type, a valid body, is the response paged)
STRICT = [
    ("STREAM.NAMES", "stream_names_response", {"offset": 0}, True),
    ("STREAM.LIST", "stream_list_response", {"offset": 0}, True),
    ("STREAM.INFO.{s}", "stream_info_response", {"deleted_details": True}, False),
    ("STREAM.PURGE.{s}", "stream_purge_response", {"seq": 3}, False),
    ("STREAM.MSG.GET.{s}", "stream_msg_get_response", {"seq": 1}, False),
    ("STREAM.MSG.DELETE.{s}", "stream_msg_delete_response", {"seq": 1}, False),
    ("CONSUMER.NAMES.{s}", "consumer_names_response", {"offset": 0}, True),
    ("CONSUMER.LIST.{s}", "consumer_list_response", {"offset": 0}, True),
    (
        "CONSUMER.PAUSE.{s}.C",
        "consumer_pause_response",
        {"pause_until": "2999-01-01T00:00:00Z"},
        False,
    ),
    (
        "CONSUMER.CREATE.{s}.D",
        "consumer_create_response",
        {"stream_name": "{s}", "config": {"durable_name": "D", "ack_policy": "explicit"}},
        False,
    ),
]


def _fill(value: Any, stream: str) -> Any:
    if isinstance(value, str):
        return value.replace("{s}", stream)
    if isinstance(value, dict):
        return {k: _fill(v, stream) for k, v in value.items()}
    return value


@pytest.mark.parametrize(("subject", "kind", "body", "paged"), STRICT, ids=[s[0] for s in STRICT])
async def test_unknown_field_is_refused_without_effect(
    nc: Client, stream: str, subject: str, kind: str, body: dict[str, Any], paged: bool
) -> None:
    subject = _fill(subject, stream)
    body = _fill(body, stream)
    before = await api(nc, f"STREAM.INFO.{stream}", {})
    reply = await api(nc, subject, {**body, "bogus": 1})
    assert reply["type"] == TYPE + kind
    assert reply["error"] == unknown("bogus")
    if paged:
        assert (reply["total"], reply["offset"], reply["limit"]) == (0, 0, 0)
    # No effect: the stream's messages, its consumers and C's pause are as they were.
    after = await api(nc, f"STREAM.INFO.{stream}", {})
    assert after["state"] == before["state"]
    names = await api(nc, f"CONSUMER.NAMES.{stream}", {})
    assert names["consumers"] == ["C"]
    info = await api(nc, f"CONSUMER.INFO.{stream}.C", {})
    assert not info.get("paused", False)
    # The same body without the unknown field is served.
    served = await api(nc, subject, body)
    assert "error" not in served, served
    assert served["type"] == TYPE + kind


async def test_the_first_unknown_field_is_named(nc: Client, stream: str) -> None:
    reply = await api(nc, f"STREAM.MSG.GET.{stream}", {"seq": 1, "zeta": 1, "bogus": 2})
    assert reply["error"] == unknown("zeta")
    reply = await api(
        nc, f"CONSUMER.CREATE.{stream}.D", {"stream_name": stream, "Bogus": 1, "bogus": 2}
    )
    assert reply["error"] == unknown("Bogus")
    assert (await api(nc, f"CONSUMER.NAMES.{stream}", {}))["consumers"] == ["C"]


async def test_a_field_named_in_other_case_is_that_field(nc: Client, stream: str) -> None:
    """encoding/json matches keys case-insensitively: "SEQ" is seq, not an unknown field."""
    reply = await api(nc, f"STREAM.MSG.GET.{stream}", {"SEQ": 2})
    assert reply["message"]["seq"] == 2
    reply = await api(nc, f"STREAM.MSG.GET.{stream}", {"Seq": 2, "No_Hdr": True, "bogus": 1})
    assert reply["error"] == unknown("bogus")


async def test_direct_get_stays_lenient(nc: Client, stream: str) -> None:
    """nats-server's direct get decodes its body with plain json.Unmarshal."""
    js = nc.jetstream(timeout=10)
    await js.add_stream(name=f"{stream}D", subjects=[f"{stream}D.>"], allow_direct=True)
    await js.publish(f"{stream}D.a", b"hello")
    msg = await nc.request(
        f"{API}DIRECT.GET.{stream}D", json.dumps({"seq": 1, "bogus": 1}).encode(), timeout=10
    )
    assert msg.data == b"hello"
    await js.delete_stream(f"{stream}D")


# Every field of nats-server's Go struct for each strict request type (json tags), each in a
# body of its own with values the request accepts.
GO_FIELDS: list[tuple[str, str, list[dict[str, Any]]]] = [
    # JSApiStreamNamesRequest: ApiPagedRequest{offset}, subject
    ("JSApiStreamNamesRequest", "STREAM.NAMES", [{"offset": 0}, {"subject": "{s}.0"}]),
    # JSApiStreamListRequest: ApiPagedRequest{offset}, subject
    ("JSApiStreamListRequest", "STREAM.LIST", [{"offset": 0}, {"subject": "{s}.0"}]),
    # JSApiStreamInfoRequest: ApiPagedRequest{offset}, deleted_details, subjects_filter
    (
        "JSApiStreamInfoRequest",
        "STREAM.INFO.{s}",
        [{"offset": 0}, {"deleted_details": True}, {"subjects_filter": "{s}.>"}],
    ),
    # JSApiStreamPurgeRequest: seq, filter, keep
    (
        "JSApiStreamPurgeRequest",
        "STREAM.PURGE.{s}",
        [{"seq": 2}, {"filter": "{s}.0", "keep": 2}, {"keep": 3}],
    ),
    # JSApiMsgDeleteRequest: seq, no_erase
    ("JSApiMsgDeleteRequest", "STREAM.MSG.DELETE.{s}", [{"seq": 5, "no_erase": True}]),
    # JSApiMsgGetRequest: seq, last_by_subj, next_by_subj, batch, max_bytes, start_time,
    # multi_last, up_to_seq, up_to_time, no_hdr
    (
        "JSApiMsgGetRequest",
        "STREAM.MSG.GET.{s}",
        [
            {"seq": 1},
            {"last_by_subj": "{s}.0"},
            {"next_by_subj": "{s}.1"},
            {"start_time": "2000-01-01T00:00:00Z"},
            {"seq": 1, "no_hdr": True},
            {"seq": 1, "max_bytes": 0},
            {"seq": 1, "batch": 0},
            {"seq": 1, "up_to_seq": 0},
            {"seq": 1, "multi_last": []},
            {"seq": 1, "up_to_time": None},
        ],
    ),
    # JSApiConsumersRequest: ApiPagedRequest{offset}
    ("JSApiConsumersRequest", "CONSUMER.NAMES.{s}", [{"offset": 0}]),
    ("JSApiConsumersRequest", "CONSUMER.LIST.{s}", [{"offset": 0}]),
    # JSApiConsumerPauseRequest: pause_until
    (
        "JSApiConsumerPauseRequest",
        "CONSUMER.PAUSE.{s}.C",
        [{"pause_until": "2000-01-01T00:00:00Z"}],
    ),
    # CreateConsumerRequest: stream_name, config, action, pedantic
    (
        "CreateConsumerRequest",
        "CONSUMER.CREATE.{s}.E",
        [
            {
                "stream_name": "{s}",
                "config": {"durable_name": "E", "ack_policy": "explicit"},
                "action": "create",
                "pedantic": True,
            }
        ],
    ),
]


@pytest.mark.parametrize(
    ("go_struct", "subject", "bodies"), GO_FIELDS, ids=[f"{g[0]}-{g[1]}" for g in GO_FIELDS]
)
async def test_every_go_field_is_accepted(
    nc: Client, stream: str, go_struct: str, subject: str, bodies: list[dict[str, Any]]
) -> None:
    for body in bodies:
        reply = await api(nc, _fill(subject, stream), _fill(body, stream))
        assert "error" not in reply, (go_struct, body, reply)
