"""Numbers a request's Go field can not hold, and purges that would break a stream.

Each test in the first part runs against an agent and against nats-server 2.15.1 with the same
requests and the same expected answers: nats-server's JSON decoder refuses a number out of its
field's range (a negative purge `keep`, a sequence past 2^64, a limit past 2^63) with 400 10025
and encoding/json's words. The last part is InfiniStream's own rule where nats-server's answer
would break the stream: a purge or first_seq that would start it past 2^63 - 1.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from support.agentproc import running_agent
from support.servers import both_servers

server_url = both_servers()

API = "$JS.API."
U64_MAX = 2**64 - 1


_streams = itertools.count(1)


@pytest.fixture
def stream() -> str:
    """A stream name (and subject prefix) of this test's own: under load, a run against
    nats-server once found the messages of the previous test in the stream it had just
    deleted and created again under the same name."""
    return f"P{next(_streams)}"


@pytest.fixture
async def nc(server_url: str) -> AsyncIterator[Client]:
    client = await nats.connect(server_url)
    for name in (await api(client, "STREAM.NAMES"))["streams"] or []:
        assert (await api(client, f"STREAM.DELETE.{name}"))["success"]
    assert not (await api(client, "STREAM.NAMES"))["streams"]
    yield client
    await client.close()


async def api(nc: Client, subject: str, body: bytes | dict[str, Any] = b"") -> dict[str, Any]:
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    msg = await nc.request(API + subject, body, timeout=10)
    return json.loads(msg.data)  # type: ignore[no-any-return]


def invalid_json(go_struct_field: str, number: int, go_type: str) -> dict[str, Any]:
    return {
        "code": 400,
        "err_code": 10025,
        "description": f"invalid JSON: json: cannot unmarshal number {number} into Go struct"
        f" field {go_struct_field} of type {go_type}",
    }


async def ten_messages(nc: Client, stream: str) -> None:
    js = nc.jetstream(timeout=10)
    await js.add_stream(name=stream, subjects=[f"{stream}.>"])
    for i in range(10):
        await js.publish(f"{stream}.{i % 3}", b"x")


async def messages(nc: Client, stream: str) -> int:
    return (await api(nc, f"STREAM.INFO.{stream}"))["state"]["messages"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("body", "field", "number", "go_type"),
    [
        (b'{"keep": -5}', "keep", -5, "uint64"),
        (b'{"seq": -1}', "seq", -1, "uint64"),
        (b'{"seq": 18446744073709551616}', "seq", U64_MAX + 1, "uint64"),
        (b'{"filter": "p.1", "keep": -1}', "keep", -1, "uint64"),
    ],
)
async def test_a_purge_number_out_of_range_is_refused_and_deletes_nothing(
    nc: Client, stream: str, body: bytes, field: str, number: int, go_type: str
) -> None:
    await ten_messages(nc, stream)
    resp = await api(nc, f"STREAM.PURGE.{stream}", body)
    assert resp["error"] == invalid_json(f"JSApiStreamPurgeRequest.{field}", number, go_type)
    assert await messages(nc, stream) == 10


async def test_a_purge_keeping_more_than_there_is_keeps_everything(nc: Client, stream: str) -> None:
    await ten_messages(nc, stream)
    resp = await api(nc, f"STREAM.PURGE.{stream}", {"keep": U64_MAX})
    assert (resp.get("success"), resp["purged"]) == (True, 0)
    assert await messages(nc, stream) == 10


@pytest.mark.parametrize(
    ("field", "number", "go_type"),
    [
        ("max_msgs", 2**63, "int64"),
        ("max_bytes", 2**64, "int64"),
        ("max_msgs_per_subject", -(2**63) - 1, "int64"),
        ("max_age", 2**63, "time.Duration"),
        ("duplicate_window", 2**63, "time.Duration"),
        ("max_msg_size", 2**31, "int32"),
        ("max_consumers", 2**63, "int"),
        ("num_replicas", 2**63, "int"),
        ("first_seq", -1, "uint64"),
        ("first_seq", 2**64, "uint64"),
    ],
)
async def test_a_stream_config_number_out_of_range_is_invalid_json(
    nc: Client, field: str, number: int, go_type: str
) -> None:
    body = b'{"name": "Q", "subjects": ["q"], "%s": %d}' % (field.encode(), number)
    resp = await api(nc, "STREAM.CREATE.Q", body)
    assert resp["error"] == invalid_json(f"StreamConfigRequest.{field}", number, go_type)
    nested = b'{"name": "Q", "consumer_limits": {"max_ack_pending": %d}}' % 2**63
    resp = await api(nc, "STREAM.CREATE.Q", nested)
    assert resp["error"] == invalid_json(
        "StreamConfigRequest.consumer_limits.max_ack_pending", 2**63, "int"
    )
    assert (await api(nc, "STREAM.NAMES"))["streams"] in (None, [])


async def test_an_update_number_out_of_range_is_invalid_json(nc: Client) -> None:
    await api(nc, "STREAM.CREATE.Q", {"name": "Q"})
    resp = await api(nc, "STREAM.UPDATE.Q", b'{"name": "Q", "max_bytes": 9223372036854775808}')
    assert resp["error"] == invalid_json("StreamConfigRequest.max_bytes", 2**63, "int64")
    assert (await api(nc, "STREAM.INFO.Q"))["config"]["max_bytes"] == -1


@pytest.mark.parametrize(
    ("subject", "body", "field", "number", "go_type"),
    [
        ("MSG.GET.{}", b'{"seq": -1}', "JSApiMsgGetRequest.seq", -1, "uint64"),
        (
            "MSG.GET.{}",
            b'{"seq": 1, "up_to_seq": -1}',
            "JSApiMsgGetRequest.up_to_seq",
            -1,
            "uint64",
        ),
        (
            "MSG.GET.{}",
            b'{"seq": 1, "batch": %d}' % 2**63,
            "JSApiMsgGetRequest.batch",
            2**63,
            "int",
        ),
        ("MSG.DELETE.{}", b'{"seq": -1}', "JSApiMsgDeleteRequest.seq", -1, "uint64"),
        ("INFO.{}", b'{"offset": %d}' % 2**63, "JSApiStreamInfoRequest.offset", 2**63, "int"),
        ("NAMES", b'{"offset": %d}' % 2**63, "JSApiStreamNamesRequest.offset", 2**63, "int"),
    ],
)
async def test_a_message_request_number_out_of_range_is_invalid_json(
    nc: Client, stream: str, subject: str, body: bytes, field: str, number: int, go_type: str
) -> None:
    await ten_messages(nc, stream)
    resp = await api(nc, "STREAM." + subject.format(stream), body)
    assert resp["error"] == invalid_json(field, number, go_type)
    assert await messages(nc, stream) == 10


async def test_msg_get_past_the_last_uint64_is_not_found(nc: Client, stream: str) -> None:
    await ten_messages(nc, stream)
    resp = await api(nc, f"STREAM.MSG.GET.{stream}", {"seq": U64_MAX})
    assert resp["error"] == {"code": 404, "err_code": 10037, "description": "no message found"}


async def test_a_purge_far_ahead_moves_the_stream_and_it_stays_writable(
    nc: Client, stream: str
) -> None:
    await ten_messages(nc, stream)
    js = nc.jetstream(timeout=10)
    resp = await api(nc, f"STREAM.PURGE.{stream}", {"seq": 1_000_000})
    assert (resp["success"], resp["purged"]) == (True, 10)
    assert (await js.publish(f"{stream}.a", b"y")).seq == 1_000_000
    assert (await api(nc, f"STREAM.PURGE.{stream}"))["purged"] == 1
    assert (await js.publish(f"{stream}.a", b"z")).seq == 1_000_001


# -- InfiniStream's own bound ---------------------------------------------------------------------

START_MAX = 2**63 - 1


async def test_a_purge_past_the_highest_start_is_refused_and_the_stream_stays_writable(
    tmp_path: Path,
    stream: str,
) -> None:
    """nats-server accepts a purge to 2^64 - 1: its next publish gets that sequence, and the
    one after it sequence 0. InfiniStream refuses to start a stream past 2^63 - 1 (room for
    2^63 publishes), and everything short of that works, through a restart too."""
    store = tmp_path / "store"
    with running_agent(store, "--linger", "20ms") as agent:
        nc = await nats.connect(agent.url)
        await ten_messages(nc, stream)
        js = nc.jetstream(timeout=10)
        for seq in (U64_MAX, START_MAX + 1):
            resp = await api(nc, f"STREAM.PURGE.{stream}", {"seq": seq})
            assert resp["error"] == {
                "code": 500,
                "err_code": 10110,
                "description": f"purge sequence can not be larger than {START_MAX}",
            }
        assert await messages(nc, stream) == 10
        assert (await js.publish(f"{stream}.a", b"y")).seq == 11
        resp = await api(nc, f"STREAM.PURGE.{stream}", {"seq": START_MAX})
        assert (resp["success"], resp["purged"]) == (True, 11)
        assert (await js.publish(f"{stream}.a", b"y")).seq == START_MAX
        assert (await js.publish(f"{stream}.a", b"y")).seq == START_MAX + 1
        await nc.close()
    with running_agent(store, "--linger", "20ms") as agent:
        nc = await nats.connect(agent.url)
        js = nc.jetstream(timeout=10)
        assert (await js.publish(f"{stream}.a", b"y")).seq == START_MAX + 2
        assert (await api(nc, f"STREAM.PURGE.{stream}"))["purged"] == 3
        assert (await js.publish(f"{stream}.a", b"y")).seq == START_MAX + 3
        msg = await js.get_msg(stream, START_MAX + 3)
        assert msg.data == b"y"
        await nc.close()


async def test_a_first_seq_past_the_highest_start_is_refused(tmp_path: Path) -> None:
    with running_agent(tmp_path / "store", "--linger", "20ms") as agent:
        nc = await nats.connect(agent.url)
        resp = await api(nc, "STREAM.CREATE.Q", {"name": "Q", "first_seq": START_MAX + 1})
        assert resp["error"] == {
            "code": 500,
            "err_code": 10052,
            "description": f"first sequence can not be larger than {START_MAX}",
        }
        resp = await api(nc, "STREAM.CREATE.Q", {"name": "Q", "first_seq": START_MAX})
        assert resp["config"]["first_seq"] == START_MAX
        js = nc.jetstream(timeout=10)
        acks = await asyncio.gather(*(js.publish("Q", b"x") for _ in range(3)))
        assert sorted(a.seq for a in acks) == [START_MAX, START_MAX + 1, START_MAX + 2]
        await nc.close()


# -- MSG.NEXT with a batch of 0 or less ------------------------------------------------------------


async def pull(
    nc: Client, stream: str, body: bytes, quiet: float = 0.5
) -> list[tuple[str, str, str, bytes]]:
    """(status, description, pending messages, data) of what a request gets: up to its status
    (that ends it), or until nothing more came for `quiet` seconds after a message."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(API + f"CONSUMER.MSG.NEXT.{stream}.C", body, reply=inbox)
    got: list[tuple[str, str, str, bytes]] = []
    try:
        while not got or got[-1][0] == "":
            # Generous for the first answer (a 408 comes at the request's expiry, later on a
            # busy machine); short once a message is in.
            msg = await sub.next_msg(timeout=quiet if got else 10)
            headers = msg.headers or {}
            got.append(
                (
                    headers.get("Status", ""),
                    headers.get("Description", ""),
                    headers.get("Nats-Pending-Messages", ""),
                    msg.data,
                )
            )
    except nats.errors.TimeoutError:
        pass
    await sub.unsubscribe()
    return got


@pytest.mark.parametrize(
    ("body", "answers"),
    [
        (b'{"batch": -1, "expires": 300000000}', [("408", "Request Timeout", "-1", b"")]),
        (b'{"batch": 0, "expires": 300000000}', [("408", "Request Timeout", "0", b"")]),
        (b'{"batch": -1, "no_wait": true}', [("404", "No Messages", "", b"")]),
        (
            b'{"batch": -1, "expires": 300000000, "no_wait": true}',
            [("408", "Request Timeout", "-1", b"")],
        ),
    ],
)
async def test_a_pull_with_no_batch_on_an_empty_stream_is_answered(
    nc: Client, stream: str, body: bytes, answers: list[tuple[str, str, str, bytes]]
) -> None:
    js = nc.jetstream(timeout=10)
    await js.add_stream(name=stream, subjects=[f"{stream}.>"])
    await js.add_consumer(stream, durable_name="C", ack_policy="explicit")
    assert await pull(nc, stream, body) == answers


@pytest.mark.parametrize(
    "body", [b'{"batch": -1}', b'{"batch": -5, "expires": 300000000}', b"-1", b'{"batch": 0}']
)
async def test_a_pull_with_no_batch_hands_out_one_message(
    nc: Client, stream: str, body: bytes
) -> None:
    await ten_messages(nc, stream)
    js = nc.jetstream(timeout=10)
    await js.add_consumer(stream, durable_name="C", ack_policy="explicit")
    assert await pull(nc, stream, body) == [("", "", "", b"x")]
