"""Consumer reset (`$JS.API.CONSUMER.RESET.<stream>.<consumer>`), on an agent and on
nats-server: back to just past the ack floor or to a sequence of one's own, what the deliver
policy allows, the JSON errors, silence for a consumer that does not exist, and what a fetch
hands out after a reset; a reset on one agent moves a request waiting on another."""

from __future__ import annotations

import json
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from support.jsapi import error

RESET = "$JS.API.CONSUMER.RESET."
RESPONSE = "io.nats.jetstream.api.v1.consumer_reset_response"


async def reset(nc: Client, stream: str, consumer: str, body: bytes = b"") -> dict[str, Any]:
    reply = await nc.request(f"{RESET}{stream}.{consumer}", body, timeout=10)
    return json.loads(reply.data)  # type: ignore[no-any-return]


async def stream_with(js: JetStreamContext, n: int) -> None:
    await js.add_stream(name="S", subjects=["s.>"])
    for i in range(n):
        await js.publish(f"s.{i}", str(i).encode())


def progress(info: dict[str, Any]) -> tuple[Any, ...]:
    return (
        info["delivered"]["consumer_seq"],
        info["delivered"]["stream_seq"],
        info["ack_floor"]["consumer_seq"],
        info["ack_floor"]["stream_seq"],
        info["num_ack_pending"],
        info["num_pending"],
    )


async def test_reset_to_the_ack_floor_and_to_a_sequence(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream_with(js, 5)
    await js.add_consumer("S", durable_name="C", ack_policy="explicit")
    sub = await js.pull_subscribe_bind("C", "S")
    first, *_ = await sub.fetch(3, timeout=5)
    await first.ack_sync()
    # No body: just past the ack floor (1), whatever was delivered since.
    answer = await reset(server_nc, "S", "C")
    assert answer["type"] == RESPONSE and answer["reset_seq"] == 2
    assert answer["name"] == "C" and answer["stream_name"] == "S"
    assert progress(answer) == (0, 1, 0, 1, 0, 4)
    [again] = await sub.fetch(1, timeout=5)
    assert (again.metadata.sequence.stream, again.metadata.sequence.consumer) == (2, 1)
    assert again.metadata.num_delivered == 1
    # A sequence of one's own (deliver policy all); unknown fields are ignored.
    answer = await reset(server_nc, "S", "C", b'{"seq": 4, "extra": true}')
    assert answer["reset_seq"] == 4
    assert progress(answer) == (0, 3, 0, 3, 0, 2)
    got = await sub.fetch(5, timeout=2)
    assert [m.metadata.sequence.stream for m in got] == [4, 5]


@pytest.mark.parametrize(
    ("body", "description"),
    [
        (
            b'{"seq": "x"}',
            "invalid JSON: json: cannot unmarshal string into Go struct field"
            " JSApiConsumerResetRequest.seq of type uint64",
        ),
        (
            b'{"seq": -1}',
            "invalid JSON: json: cannot unmarshal number -1 into Go struct field"
            " JSApiConsumerResetRequest.seq of type uint64",
        ),
        (
            b"[1]",
            "invalid JSON: json: cannot unmarshal array into Go value of type"
            " server.JSApiConsumerResetRequest",
        ),
    ],
)
async def test_bad_requests_get_nats_servers_errors(
    server_nc: Client, body: bytes, description: str
) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream_with(js, 1)
    await js.add_consumer("S", durable_name="C", ack_policy="explicit")
    answer = await reset(server_nc, "S", "C", body)
    assert error(answer) == (400, 10025, description)
    assert answer["reset_seq"] == 0 and answer["type"] == RESPONSE


async def test_what_the_deliver_policy_allows(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream_with(js, 5)
    await js.add_consumer(
        "S", durable_name="BYSEQ", deliver_policy="by_start_sequence", opt_start_seq=3
    )
    await js.add_consumer("S", durable_name="NEW", deliver_policy="new")
    below = await reset(server_nc, "S", "BYSEQ", b'{"seq": 2}')
    assert error(below) == (400, 10204, "invalid reset: below start seq")
    assert (await reset(server_nc, "S", "BYSEQ", b'{"seq": 3}'))["reset_seq"] == 3
    refused = await reset(server_nc, "S", "NEW", b'{"seq": 2}')
    assert error(refused) == (400, 10204, "invalid reset: not allowed")
    # Back to the ack floor is allowed whatever the policy.
    assert (await reset(server_nc, "S", "NEW"))["reset_seq"] == 6


async def test_no_such_consumer_is_not_answered(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream_with(js, 1)
    for subject in ("S.NOPE", "NOPE.C", "S"):
        with pytest.raises(nats.errors.TimeoutError):
            await server_nc.request(RESET + subject, b"", timeout=1)


async def test_a_reset_on_one_agent_moves_a_request_waiting_on_another(
    two_clients: list[Client],
) -> None:
    first, second = two_clients
    js = first.jetstream(timeout=10)
    await stream_with(js, 3)
    await js.add_consumer("S", durable_name="C", ack_policy="explicit")
    sub = await js.pull_subscribe_bind("C", "S")
    assert len(await sub.fetch(3, timeout=5)) == 3
    # A request waits on the first agent: nothing is left to hand out.
    inbox = first.new_inbox()
    waiting = await first.subscribe(inbox)
    await first.publish(
        "$JS.API.CONSUMER.MSG.NEXT.S.C", b'{"batch":1,"expires":10000000000}', reply=inbox
    )
    await first.flush()
    # Reset on the other agent: the waiting request gets the message at the sequence asked.
    answer = await reset(second, "S", "C", b'{"seq": 2}')
    assert answer["reset_seq"] == 2
    msg = await waiting.next_msg(timeout=10)
    assert msg.data == b"1" and msg.reply.split(".")[5:7] == ["2", "1"]
