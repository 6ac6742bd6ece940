"""nats.js, a second client implementation written apart from nats-py, against a real agent
and against nats-server (the same test, the `server` fixture).

tests/js/jetstream_client.mjs (run with node; scripts/test installs its pinned packages with
`npm ci`) creates a stream, publishes with and without message ids, and serves a durable pull
consumer with fetch(), next() and consume(), acking every way nats.js can. Then nats-py reads
back what nats.js did: the stored messages, the dedupe ids, and the consumers' progress.
"""

from __future__ import annotations

import pytest
from nats.aio.client import Client

from support.jsclient import run_js
from support.servers import Server

STEPS = [
    "connect",
    "account info",
    "stream created",
    "publish without msgID",
    "publish with msgID (deduplicated)",
    "publish with wrong lastSequence refused",
    "stream info",
    "get message",
    "durable pull consumer created",
    "raw pull: delivered with its stream subject and an ack subject",
    "fetch 3",
    "ack, ackAck, nak",
    "next (redelivery after nak, working, term)",
    "fetch and next on a drained consumer expire empty",
    "consumer info",
    "consume 10 with max_messages 4",
    "filtered consumer (4 acked, 5 left pending)",
    "consumer list",
    "ordered consumer fetch",
]


async def test_nats_js_client_streams_publishes_and_pull_consumers(
    server: Server, server_nc: Client
) -> None:
    js = server_nc.jetstream(timeout=10)
    run = await run_js("jetstream_client.mjs", server.url, "JSC", server_log=server.log, timeout=60)
    assert run.steps == STEPS
    assert run.result == {
        "stream": "JSC",
        "acked": [1, 2, 3, 4],
        "termed": [5],
        "consumed": list(range(6, 16)),
        "filtered_pending": [5],
    }

    # What nats.js stored, as nats-py reads it.
    info = await js.stream_info("JSC")
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (15, 1, 15)
    expected = {1: ("jsc.a", b"one"), 2: ("jsc.b", b"two"), 3: ("jsc.a", b"three")}
    expected |= {4: ("jsc.c", b"four"), 5: ("jsc.c", b"five")}
    expected |= {6 + i: ("jsc.d", b"d%d" % i) for i in range(10)}
    for seq, (subject, data) in expected.items():
        msg = await js.get_msg("JSC", seq)
        assert (msg.subject, msg.data) == (subject, data), seq
    assert (await js.get_msg("JSC", 3)).headers == {"X-Client": "nats.js"}

    # The message ids nats.js published with are remembered for nats-py's publishes too.
    dup = await js.publish("jsc.c", b"four from python", headers={"Nats-Msg-Id": "m-4"})
    assert (dup.seq, dup.duplicate) == (4, True)

    # Every ack nats.js sent (ack, ackAck, nak then ackAck, working, term) is committed.
    jsd = await js.consumer_info("JSC", "JSD")
    assert (jsd.delivered.stream_seq, jsd.delivered.consumer_seq) == (15, 16)
    assert (jsd.ack_floor.stream_seq, jsd.ack_floor.consumer_seq) == (15, 16)
    assert (jsd.num_ack_pending, jsd.num_pending, jsd.num_redelivered) == (0, 0, 0)
    names = {c.name for c in await js.consumers_info("JSC")}
    assert {"JSD", "JSF", "RAW"} <= names
    assert len(names) == 4, names  # and the ordered consumer's ephemeral

    # The filtered consumer nats.js left with message 5 unacked (ack_wait 1s): nats-py gets it
    # redelivered, with its stream subject, and its ack completes the consumer.
    jsf = await js.consumer_info("JSC", "JSF")
    assert (jsf.ack_floor.stream_seq, jsf.num_ack_pending, jsf.num_pending) == (4, 1, 0)
    psub = await js.pull_subscribe_bind("JSF", stream="JSC")
    (msg,) = await psub.fetch(1, timeout=5)
    assert (msg.subject, msg.data) == ("jsc.c", b"five")
    assert (msg.metadata.sequence.stream, msg.metadata.num_delivered) == (5, 2)
    await msg.ack_sync()
    jsf = await js.consumer_info("JSC", "JSF")
    assert (jsf.ack_floor.stream_seq, jsf.num_ack_pending, jsf.delivered.consumer_seq) == (5, 0, 3)
    await psub.unsubscribe()


async def test_a_failing_script_fails_the_test_naming_its_step() -> None:
    # Nothing listens on port 1: the script fails in its first step, and says so.
    with pytest.raises(AssertionError) as failed:
        await run_js("batch_client.mjs", "nats://127.0.0.1:1", server_log=lambda: "(no server)")
    assert "failed in step 'connect'" in str(failed.value)
    assert "(no server)" in str(failed.value)
