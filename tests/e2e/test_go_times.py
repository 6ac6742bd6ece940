"""Times in requests are read as Go's time.Time reads them, against an agent and nats-server:
what it takes beyond RFC 3339, and Go's words for what it refuses, in consumer configs, message
gets and direct gets. (tests/jetstream/test_times.py has the rules.)

Where they differ by design: nats-server keeps the offset a consumer's time was sent with, the
agent the same instant in UTC; only times in UTC are echoed here.
"""

from __future__ import annotations

import json
from typing import Any

from nats.aio.client import Client

from support.jsapi import api, status

LAYOUT = "2006-01-02T15:04:05Z07:00"

TAKEN = {
    "2030-01-01T00:00:00Z": "2030-01-01T00:00:00Z",
    "2030-01-01T1:02:03Z": "2030-01-01T01:02:03Z",
    "2030-01-01T01:02:03,5Z": "2030-01-01T01:02:03.5Z",
    "2030-01-01T00:00:00.1234567891234Z": "2030-01-01T00:00:00.123456789Z",
    "0000-02-29T00:00:00Z": "0000-02-29T00:00:00Z",
    "0001-01-01T00:00:00Z": "0001-01-01T00:00:00Z",
}
REFUSED = {
    "2030-01-01": 'cannot parse "" as "T"',
    "2030-01-01t00:00:00z": 'cannot parse "t00:00:00z" as "T"',
    "2030-01-01T00:00:00": 'cannot parse "" as "Z07:00"',
    "2030-01-01T00:00:00+0100": 'cannot parse "+0100" as "Z07:00"',
    "2030-13-01T00:00:00Z": "month out of range",
    "1900-02-29T00:00:00Z": "day out of range",
    "2030-01-01T00:00:00+25:61": "time zone offset minute out of range",
    "2030-01-01T00:00:00ZZ": 'extra text: "Z"',
}


def refusal(text: str) -> str:
    why = REFUSED[text]
    if why.startswith("cannot"):
        return f'invalid JSON: parsing time "{text}" as "{LAYOUT}": {why}'
    return f'invalid JSON: parsing time "{text}": {why}'


async def create_consumer(nc: Client, name: str, start: str) -> dict[str, Any]:
    config = {
        "name": name,
        "deliver_policy": "by_start_time",
        "opt_start_time": start,
        "ack_policy": "none",
    }
    return await api(nc, f"CONSUMER.CREATE.S.{name}", {"stream_name": "S", "config": config})


async def test_consumer_start_times(server_nc: Client) -> None:
    await api(server_nc, "STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
    for i, (text, echoed) in enumerate(TAKEN.items()):
        resp = await create_consumer(server_nc, f"t{i}", text)
        assert resp["config"]["opt_start_time"] == echoed, resp
    for i, text in enumerate(REFUSED):
        resp = await create_consumer(server_nc, f"r{i}", text)
        assert resp["error"]["description"] == refusal(text), resp


async def test_message_get_start_times(server_nc: Client) -> None:
    stream = {"name": "S", "subjects": ["s.>"], "allow_direct": True}
    await api(server_nc, "STREAM.CREATE.S", stream)
    await server_nc.request("s.1", b"x", timeout=10)
    for text in REFUSED:
        resp = await api(server_nc, "STREAM.MSG.GET.S", {"start_time": text})
        assert resp["error"]["description"] == refusal(text), resp
        body = json.dumps({"start_time": text}).encode()
        msg = await server_nc.request("$JS.API.DIRECT.GET.S", body, timeout=10)
        assert status(msg) == ("408", "Malformed Request")
    # A time Go takes that is no RFC 3339: the first message at or after it.
    resp = await api(server_nc, "STREAM.MSG.GET.S", {"start_time": "2000-01-01T1:00:00Z"})
    assert resp["message"]["seq"] == 1
