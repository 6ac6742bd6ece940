"""JSON nested deeper than Python's recursion goes: answered as nats-server answers it.

Go's encoding/json reads up to 10,000 levels and refuses a deeper document with "exceeded max
depth"; msgspec gave up at about 1,000 with RecursionError, so the agent closed a connection
whose CONNECT nested that deep without a word, never answered such an MSG.NEXT and answered
API requests 500. Each test runs against an agent and against nats-server with the same
requests and expected answers.
"""

from __future__ import annotations

import json

import nats
from nats.aio.client import Client

from support.rawnats import RawClient
from support.servers import Server

SAFETY_NET = 20.0
API = "$JS.API."


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def with_deep_field(fields: bytes, depth: int) -> bytes:
    return b"{" + fields + b',"deep":' + nested(depth) + b"}"


async def test_a_deep_connect_gets_its_pong(server: Server) -> None:
    raw = await RawClient.open(server.port)
    connect = with_deep_field(b'"verbose":false,"pedantic":false', 1000)
    raw.send(b"CONNECT " + connect + b"\r\n")
    assert await raw.ping(timeout=SAFETY_NET) == b""
    await raw.close()


async def api_error(nc: Client, subject: str, body: bytes) -> dict[str, object]:
    msg = await nc.request(API + subject, body, timeout=SAFETY_NET)
    error = json.loads(msg.data)["error"]
    assert isinstance(error, dict)
    return error


async def test_deep_api_bodies_get_their_json_errors(server: Server) -> None:
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream(timeout=SAFETY_NET)
        await js.add_stream(name="D", subjects=["d"])
        for subject in ("STREAM.INFO.D", "CONSUMER.CREATE.D"):
            assert await api_error(nc, subject, with_deep_field(b'"name":"D"', 1000)) == {
                "code": 400,
                "err_code": 10025,
                "description": 'invalid JSON: json: unknown field "name"',
            }
        too_deep = b'{"name":"E","x":' + nested(20_000) + b"}"
        for subject in ("STREAM.CREATE.E", "STREAM.INFO.D", "CONSUMER.CREATE.D"):
            assert await api_error(nc, subject, too_deep) == {
                "code": 400,
                "err_code": 10025,
                "description": "invalid JSON: exceeded max depth at offset 10016",
            }
        assert (await js.stream_info("D")).state.messages == 0
    finally:
        await nc.close()


async def test_a_deep_pull_request_is_served_or_refused(server: Server) -> None:
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream(timeout=SAFETY_NET)
        await js.add_stream(name="P", subjects=["p"])
        await js.add_consumer("P", durable_name="C")
        await js.publish("p", b"one")
        next_subject = API + "CONSUMER.MSG.NEXT.P.C"
        # (old_style: a reply inbox of its own, as nats-py's pull subscriptions use.)
        # Unknown fields are skipped at any depth Go takes: the message comes.
        got = await nc.request(
            next_subject, with_deep_field(b'"batch":1', 1000), timeout=SAFETY_NET, old_style=True
        )
        assert got.data == b"one"
        refused = await nc.request(
            next_subject, with_deep_field(b'"batch":1', 20_000), timeout=SAFETY_NET, old_style=True
        )
        assert refused.headers is not None
        assert refused.headers["Status"] == "400"
        assert refused.headers["Description"] == "Bad Request - exceeded max depth"
    finally:
        await nc.close()
