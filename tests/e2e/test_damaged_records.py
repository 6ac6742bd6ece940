"""One damaged record affects only itself.

Forty messages are stored in one object; with the agent stopped, one byte of message 20's
payload is flipped in the object file (as a disk or a bucket might), and a new agent serves the
stream. Message 20 is answered with a clear error and reported (log, /varz); every other message
is served; consumers move past 20 as past a deleted message.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import APIError

from support.agentproc import AgentProcess, running_agent, wait_for
from support.storeinspect import damage_object, record_of

STREAM = "S"
COUNT = 40
DAMAGED = 20


def damage_message(store: Path, seq: int) -> None:
    key, offset, length = record_of(store / "meta.db", STREAM, seq)
    damage_object(store / "objects", key, offset + length - 1, 0x5A)  # the last payload byte


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    store = tmp_path_factory.mktemp("damaged") / "store"

    async def fill(url: str) -> None:
        nc = await nats.connect(url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name=STREAM, subjects=["s.>"], allow_direct=True)
        # Within one linger, so that every message is in the same object.
        acks = await asyncio.gather(*(js.publish(f"s.{i}", b"m%d" % i) for i in range(1, 41)))
        assert sorted(a.seq for a in acks) == list(range(1, COUNT + 1))
        await nc.close()

    with running_agent(store, "--linger", "300ms") as first:
        asyncio.run(fill(first.url))
    assert len({record_of(store / "meta.db", STREAM, s)[0] for s in range(1, 41)}) == 1
    damage_message(store, DAMAGED)
    with running_agent(store, "--linger", "20ms", "-m", "-1") as proc:
        yield proc


@pytest.fixture
async def nc(agent: AgentProcess) -> Any:
    client = await nats.connect(agent.url)
    yield client
    await client.close()


def varz(agent: AgentProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.http_port}/varz", timeout=10) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


async def test_msg_get_of_the_damaged_message_is_a_store_error(nc: Client) -> None:
    reply = await nc.request(
        f"$JS.API.STREAM.MSG.GET.{STREAM}", json.dumps({"seq": DAMAGED}).encode(), timeout=10
    )
    assert json.loads(reply.data)["error"] == {
        "code": 503,
        "err_code": 10077,
        "description": f"message {DAMAGED} of stream {STREAM} is damaged in object storage"
        " (record checksum mismatch)",
    }
    js = nc.jetstream(timeout=10)
    for seq in (1, DAMAGED - 1, DAMAGED + 1, COUNT):
        assert (await js.get_msg(STREAM, seq)).data == b"m%d" % seq


async def test_direct_get_answers_for_the_damaged_message_and_serves_the_rest(
    nc: Client,
) -> None:
    js = nc.jetstream(timeout=10)
    with pytest.raises(APIError) as raised:
        await js.get_msg(STREAM, DAMAGED, direct=True)
    assert (raised.value.code, raised.value.description) == (500, "Message Damaged")
    for seq in (DAMAGED - 1, DAMAGED + 1):
        assert (await js.get_msg(STREAM, seq, direct=True)).data == b"m%d" % seq
    # A batch leaves it out, as a deleted message.
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    body = json.dumps({"seq": DAMAGED - 2, "batch": 5}).encode()
    await nc.publish(f"$JS.API.DIRECT.GET.{STREAM}", body, reply=inbox)
    got = []
    while True:
        msg = await sub.next_msg(timeout=10)
        if msg.headers and msg.headers.get("Status") == "204":
            break
        got.append(int(msg.headers["Nats-Sequence"]))
    assert got == [DAMAGED - 2, DAMAGED - 1, DAMAGED + 1, DAMAGED + 2]


@pytest.mark.parametrize("ack_policy", [AckPolicy.EXPLICIT, AckPolicy.ALL, AckPolicy.NONE])
async def test_a_fetch_delivers_every_intact_message_and_moves_past_the_damaged_one(
    nc: Client, ack_policy: AckPolicy
) -> None:
    js = nc.jetstream(timeout=10)
    name = f"F{ack_policy.value}"
    await js.add_consumer(STREAM, ConsumerConfig(durable_name=name, ack_policy=ack_policy))
    sub = await js.pull_subscribe_bind(name, STREAM)
    msgs = await sub.fetch(COUNT, timeout=10)
    seqs = [m.metadata.sequence.stream for m in msgs]
    assert seqs == [s for s in range(1, COUNT + 1) if s != DAMAGED]
    if ack_policy == AckPolicy.EXPLICIT:
        for m in msgs:
            await m.ack_sync()
    elif ack_policy == AckPolicy.ALL:
        await msgs[-1].ack_sync()
    info = await js.consumer_info(STREAM, name)
    assert (info.num_pending, info.num_ack_pending) == (0, 0)
    assert info.ack_floor.stream_seq == COUNT


async def test_a_batch_of_one_consumer_does_not_stop_at_the_damaged_message(
    nc: Client,
) -> None:
    js = nc.jetstream(timeout=10)
    sub = await js.pull_subscribe("s.>", durable="ONE", stream=STREAM)
    seqs = []
    for _ in range(COUNT - 1):
        (msg,) = await sub.fetch(1, timeout=10)
        seqs.append(msg.metadata.sequence.stream)
        await msg.ack()
    assert seqs == [s for s in range(1, COUNT + 1) if s != DAMAGED]


async def test_the_damage_is_counted_in_varz_and_logged(nc: Client, agent: AgentProcess) -> None:
    reply = await nc.request(
        f"$JS.API.STREAM.MSG.GET.{STREAM}", json.dumps({"seq": DAMAGED}).encode(), timeout=10
    )
    assert "error" in json.loads(reply.data)
    damaged = varz(agent)["infinistream"]["damaged"]
    assert damaged["records"] == 1
    assert damaged["reads"] >= 1
    (recent,) = damaged["recent"]
    assert (recent["stream"], recent["seq"], recent["reason"]) == (
        STREAM,
        DAMAGED,
        "record checksum mismatch",
    )
    wait_for(lambda: f"message {DAMAGED} of stream {STREAM} is damaged" in agent.log())
    assert agent.log().count(f"message {DAMAGED} of stream {STREAM} is damaged") == 1


async def test_the_stream_takes_publishes_as_before(nc: Client) -> None:
    js = nc.jetstream(timeout=10)
    ack = await js.publish("s.new", b"after")
    assert ack.seq > COUNT
    assert (await js.get_msg(STREAM, ack.seq)).data == b"after"


async def test_a_push_consumer_moves_past_the_damaged_message(nc: Client) -> None:
    js = nc.jetstream(timeout=10)
    got: list[int] = []
    done = asyncio.Event()

    async def handle(msg: Any) -> None:
        got.append(msg.metadata.sequence.stream)
        await msg.ack()
        if msg.metadata.sequence.stream == COUNT:
            done.set()

    sub = await js.subscribe("s.>", stream=STREAM, durable="PUSH", cb=handle, manual_ack=True)
    await asyncio.wait_for(done.wait(), 20)
    await sub.unsubscribe()
    # (An earlier test may have added messages past COUNT.)
    assert [s for s in got if s <= COUNT] == [s for s in range(1, COUNT + 1) if s != DAMAGED]
