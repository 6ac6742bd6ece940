"""Publish subjects a client should not send: bytes that are not UTF-8, and (for a pedantic
client) subjects that are not valid literal subjects.

Every test runs against an agent and against nats-server 2.15.1, over a raw socket, with the
same bytes in and the same answers expected.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

from support.agentproc import running_agent
from support.rawnats import RawClient, api_request, parse_msgs, pub
from support.servers import both_servers

server_url = both_servers()

CONNECT = b'CONNECT {"verbose":false,"pedantic":%s,"headers":true}\r\nSUB _INBOX.> 1\r\n'
INVALID_PUBLISH_SUBJECT = b"-ERR 'Invalid Publish Subject'\r\n"


async def connect(url: str, *, pedantic: bool = False) -> RawClient:
    port = urlparse(url).port
    assert port is not None
    raw = await RawClient.open(port)
    raw.send(CONNECT % (b"true" if pedantic else b"false"))
    return raw


_names = itertools.count(1)


@pytest.fixture
def stream() -> str:
    """A stream name of the test's own: under load in CI, nats-server once began a stream
    deleted and created again under its old name past seq 1."""
    return f"U{next(_names)}"


@pytest.fixture
async def raw(server_url: str, stream: str) -> AsyncIterator[RawClient]:
    """A client, and a new empty stream `stream` on `u.>`, the previous test's deleted."""
    client = await connect(server_url)
    previous = f"U{int(stream[1:]) - 1}"
    client.send(api_request(f"$JS.API.STREAM.DELETE.{previous}", None, "_INBOX.delete"))
    await client.read_until(b"_INBOX.delete")
    client.send(
        api_request(
            f"$JS.API.STREAM.CREATE.{stream}", {"name": stream, "subjects": ["u.>"]}, "_INBOX.c"
        )
    )
    await client.read_until(b'"did_create":true}\r\n', timeout=10)
    yield client
    await client.close()


async def acks(raw: RawClient, replies: list[str]) -> dict[str, dict[str, object]]:
    """The PubAck on each reply subject, by reply (waits for the last one)."""
    data = await raw.read_until(f"MSG {replies[-1]} ".encode(), timeout=10)
    data += await raw.read_until(b"}\r\n")
    got = {subject: json.loads(body) for subject, _, _, body in parse_msgs(data)}
    return {r: got[r] for r in replies if r in got}


async def test_a_subject_that_is_not_utf8_is_stored_and_acked_with_its_neighbours(
    raw: RawClient, stream: str
) -> None:
    replies = [f"_INBOX.a{i}" for i in range(5)] + ["_INBOX.bad", "_INBOX.after"]
    for reply in replies[:5]:
        raw.send(pub("u.a", b"x", reply))
    raw.send(b"PUB u.\xff\xfe _INBOX.bad 1\r\nx\r\n")
    raw.send(pub("u.a", b"x", "_INBOX.after"))
    got = await acks(raw, replies)
    assert [got[r] for r in replies] == [{"stream": stream, "seq": s} for s in range(1, 8)]
    raw.send(api_request(f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": 6}, "_INBOX.get"))
    data = await raw.read_until(b"}}\r\n", timeout=10)
    (message,) = [json.loads(body) for _, _, _, body in parse_msgs(data)]
    # Both servers show the bytes that are not UTF-8 as U+FFFD in JSON.
    assert message["message"]["subject"] == "u.\ufffd\ufffd"
    assert message["message"]["seq"] == 6


async def test_a_pedantic_client_is_told_of_an_invalid_publish_subject(
    raw: RawClient, server_url: str, stream: str
) -> None:
    pedantic = await connect(server_url, pedantic=True)
    pedantic.send(b"PUB f..a 1\r\nx\r\n")
    assert await pedantic.ping() == INVALID_PUBLISH_SUBJECT
    pedantic.send(b"PUB u. 1\r\nx\r\nPUB .u 1\r\nx\r\n")
    assert await pedantic.ping() == INVALID_PUBLISH_SUBJECT * 2
    # Told, and the message goes on all the same, as nats-server does.
    pedantic.send(b"PUB u.* _INBOX.star 1\r\nx\r\n")
    assert await pedantic.read_until(INVALID_PUBLISH_SUBJECT) == INVALID_PUBLISH_SUBJECT
    assert (await acks(pedantic, ["_INBOX.star"]))["_INBOX.star"] == {"stream": stream, "seq": 1}
    pedantic.send(b"PUB u.ok _INBOX.ok 1\r\nx\r\n")
    assert (await acks(pedantic, ["_INBOX.ok"]))["_INBOX.ok"] == {"stream": stream, "seq": 2}
    await pedantic.close()


async def test_a_client_that_is_not_pedantic_is_not_told(
    raw: RawClient, server_url: str, stream: str
) -> None:
    plain = await connect(server_url)
    plain.send(b"PUB f..a 1\r\nx\r\nPUB u.* 1\r\nx\r\n")
    assert await plain.ping() == b""
    # Stored before this one (commits keep a connection's order): nothing is left in flight
    # for the next test's stream.
    plain.send(b"PUB u.ok _INBOX.last 1\r\nx\r\n")
    assert (await acks(plain, ["_INBOX.last"]))["_INBOX.last"] == {"stream": stream, "seq": 2}
    await plain.close()


async def test_acks_and_requests_naming_streams_that_are_not_utf8_are_answered(
    raw: RawClient, stream: str
) -> None:
    raw.send(b"PUB $JS.ACK.\xff.C.1.1.1.1.1 0\r\n\r\nPUB $JS.ACK.\xfe.C.1.2.2.1.1 0\r\n\r\n")
    raw.send(b"PUB $JS.API.STREAM.INFO.\xff _INBOX.info 0\r\n\r\n")
    data = await raw.read_until(b"stream not found", timeout=10)
    data += await raw.read_until(b"\r\n")
    (answer,) = [json.loads(body) for _, _, _, body in parse_msgs(data)]
    assert answer["error"] == {"code": 404, "err_code": 10059, "description": "stream not found"}
    assert await raw.ping() == b""
    raw.send(pub("u.a", b"x", "_INBOX.after"))
    assert (await acks(raw, ["_INBOX.after"]))["_INBOX.after"] == {"stream": stream, "seq": 1}


async def test_an_ack_naming_a_stream_that_is_not_utf8_is_no_error_of_the_agent(
    tmp_path: Path,
) -> None:
    """No such consumer can exist: the ack is dropped as for any unknown consumer, and the
    agent does not log a failure of its own."""
    with running_agent(tmp_path / "store") as agent:
        client = await connect(agent.url)
        client.send(b"PUB $JS.ACK.\xff.C.1.1.1.1.1 0\r\n\r\n")
        client.send(b"PUB $JS.ACK.\xff.C.1.1.1.1.1 _INBOX.sync 4\r\n+ACK\r\n")
        assert await client.ping() == b""
        await asyncio.sleep(0.5)  # the ack batcher's commit, had there been one
        assert "Traceback" not in agent.log()
        await client.close()
