"""Publishing: PubAcks, dedupe, the expected-* headers, rollups, size and sealed refusals, order.

The error codes and texts are nats-server's (checked against nats-server 2.15.1).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.js import JetStreamContext
from nats.js.errors import APIError, NoStreamResponseError

from support.agentproc import AgentProcess
from support.moduleagent import one_agent_per_module

agent, no_streams = one_agent_per_module()

MSG_ID = "Nats-Msg-Id"
EXPECTED_STREAM = "Nats-Expected-Stream"
EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
EXPECTED_LAST_SUBJECT_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
ROLLUP = "Nats-Rollup"


async def raw_publish(
    nc: Client, subject: str, data: bytes = b"x", headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """Publish and return the PubAck JSON as sent (including a `duplicate` flag or an error)."""
    msg = await nc.request(subject, data, timeout=5, headers=headers)
    return json.loads(msg.data)


async def publish_error(
    js: JetStreamContext, subject: str, headers: dict[str, str], data: bytes = b"x"
) -> APIError:
    with pytest.raises(APIError) as exc:
        await js.publish(subject, data, headers=headers)
    return exc.value


async def state(nc: Client, stream: str) -> dict[str, Any]:
    msg = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b'{"subjects_filter": ">"}', timeout=5)
    return json.loads(msg.data)["state"]


# -- acks ---------------------------------------------------------------------------------------


async def test_puback_names_the_stream_and_sequence(nc: Client, js: JetStreamContext) -> None:
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    assert await raw_publish(nc, "orders.a") == {"stream": "ORDERS", "seq": 1}
    assert await raw_publish(nc, "orders.b") == {"stream": "ORDERS", "seq": 2}


async def test_publish_to_a_subject_without_a_stream_has_no_responders(
    nc: Client, js: JetStreamContext
) -> None:
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    with pytest.raises(NoRespondersError):
        await nc.request("elsewhere", b"x", timeout=5)
    with pytest.raises(NoStreamResponseError):
        await js.publish("elsewhere", b"x")
    assert (await js.stream_info("ORDERS")).state.messages == 0


async def test_publish_without_reply_is_stored(nc: Client, js: JetStreamContext) -> None:
    await js.add_stream(name="FIRE", subjects=["fire"])
    await nc.publish("fire", b"and forget")
    await nc.flush()
    deadline = asyncio.get_running_loop().time() + 5
    while (await js.stream_info("FIRE")).state.messages == 0:
        assert asyncio.get_running_loop().time() < deadline, "message never stored"
        await asyncio.sleep(0.02)
    assert (await js.get_msg("FIRE", 1)).data == b"and forget"


async def test_headers_and_payload_are_stored_as_published(js: JetStreamContext) -> None:
    await js.add_stream(name="H", subjects=["h"])
    await js.publish("h", b"\x00binary\xff", headers={"X-Trace": "abc", "X-Other": "1"})
    msg = await js.get_msg("H", 1)
    assert msg.data == b"\x00binary\xff"
    assert msg.headers == {"X-Trace": "abc", "X-Other": "1"}


async def test_empty_payload_is_stored(js: JetStreamContext) -> None:
    await js.add_stream(name="E", subjects=["e"])
    assert (await js.publish("e", b"")).seq == 1
    msg = await js.get_msg("E", 1)
    assert (msg.subject, msg.data) == ("e", None)


# -- dedupe -------------------------------------------------------------------------------------


async def test_same_msg_id_within_the_window_is_a_duplicate(
    nc: Client, js: JetStreamContext
) -> None:
    await js.add_stream(name="D", subjects=["d.>"])
    await js.publish("d.a", b"0")
    assert await raw_publish(nc, "d.a", b"1", {MSG_ID: "id1"}) == {"stream": "D", "seq": 2}
    again = await raw_publish(nc, "d.b", b"other", {MSG_ID: "id1"})
    assert again == {"stream": "D", "seq": 2, "duplicate": True}
    ack = await js.publish("d.a", b"1", headers={MSG_ID: "id1"})
    assert (ack.seq, ack.duplicate) == (2, True)
    info = await js.stream_info("D")
    assert (info.state.messages, info.state.last_seq) == (2, 2)


async def test_msg_ids_within_one_batch_are_deduplicated(js: JetStreamContext) -> None:
    await js.add_stream(name="D", subjects=["d"])
    acks = await asyncio.gather(
        *(js.publish("d", f"{i}".encode(), headers={MSG_ID: f"id{i % 3}"}) for i in range(9))
    )
    assert sorted({a.seq for a in acks}) == [1, 2, 3]
    assert sum(1 for a in acks if a.duplicate) == 6
    assert (await js.stream_info("D")).state.messages == 3


async def test_msg_id_is_new_again_after_the_window(js: JetStreamContext) -> None:
    await js.add_stream(name="D", subjects=["d"], duplicate_window=0.5)
    first = await js.publish("d", b"1", headers={MSG_ID: "id1"})
    assert (await js.publish("d", b"1", headers={MSG_ID: "id1"})).duplicate
    await asyncio.sleep(0.6)
    later = await js.publish("d", b"1", headers={MSG_ID: "id1"})
    assert not later.duplicate
    assert (first.seq, later.seq) == (1, 2)


async def test_msg_id_is_remembered_across_a_purge(js: JetStreamContext) -> None:
    await js.add_stream(name="D", subjects=["d"])
    await js.publish("d", b"1", headers={MSG_ID: "id1"})
    await js.purge_stream("D")
    ack = await js.publish("d", b"1", headers={MSG_ID: "id1"})
    assert (ack.seq, ack.duplicate) == (1, True)
    assert (await js.stream_info("D")).state.messages == 0


async def test_empty_msg_id_is_no_msg_id(js: JetStreamContext) -> None:
    await js.add_stream(name="D", subjects=["d"])
    acks = [await js.publish("d", b"x", headers={MSG_ID: ""}) for _ in range(2)]
    assert [(a.seq, a.duplicate) for a in acks] == [(1, None), (2, None)]


# -- expected stream / last sequence ------------------------------------------------------------


async def test_expected_stream_matches(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s"])
    assert (await js.publish("s", b"x", stream="S")).seq == 1


async def test_expected_stream_mismatch_is_refused(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s"])
    err = await publish_error(js, "s", {EXPECTED_STREAM: "OTHER"})
    assert (err.code, err.err_code, err.description) == (
        400,
        10060,
        "expected stream does not match",
    )
    assert (await js.stream_info("S")).state.messages == 0


async def test_expected_last_sequence(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s.>"])
    assert (await js.publish("s.a", b"x", headers={EXPECTED_LAST_SEQ: "0"})).seq == 1
    assert (await js.publish("s.b", b"x", headers={EXPECTED_LAST_SEQ: "1"})).seq == 2
    err = await publish_error(js, "s.a", {EXPECTED_LAST_SEQ: "1"})
    assert (err.code, err.err_code, err.description) == (400, 10071, "wrong last sequence: 2")
    assert (await js.stream_info("S")).state.messages == 2


@pytest.mark.parametrize("value", ["abc", "-1"])
async def test_expected_last_sequence_that_is_no_number_never_matches(
    js: JetStreamContext, value: str
) -> None:
    await js.add_stream(name="S", subjects=["s"])
    await js.publish("s", b"x")
    err = await publish_error(js, "s", {EXPECTED_LAST_SEQ: value})
    assert (err.err_code, err.description) == (10071, "wrong last sequence: 1")


async def test_empty_expected_last_sequence_is_ignored(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s"])
    await js.publish("s", b"x")
    assert (await js.publish("s", b"x", headers={EXPECTED_LAST_SEQ: ""})).seq == 2


async def test_expected_last_sequence_counts_publishes_in_the_same_batch(
    js: JetStreamContext,
) -> None:
    await js.add_stream(name="S", subjects=["s"])
    # Ten publishes in flight together, each expecting the one before it.
    acks = await asyncio.gather(
        *(js.publish("s", b"x", headers={EXPECTED_LAST_SEQ: str(i)}) for i in range(10))
    )
    assert [a.seq for a in acks] == list(range(1, 11))


# -- expected last subject sequence -------------------------------------------------------------


async def test_expected_last_subject_sequence(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s.>"])
    await js.publish("s.a", b"1")
    await js.publish("s.b", b"2")
    assert (await js.publish("s.a", b"3", headers={EXPECTED_LAST_SUBJECT_SEQ: "1"})).seq == 3
    err = await publish_error(js, "s.a", {EXPECTED_LAST_SUBJECT_SEQ: "1"})
    assert (err.code, err.err_code, err.description) == (400, 10071, "wrong last sequence: 3")


async def test_expected_last_subject_sequence_zero_means_no_message_yet(
    js: JetStreamContext,
) -> None:
    await js.add_stream(name="S", subjects=["s.>"])
    await js.publish("s.a", b"1")
    assert (await js.publish("s.new", b"x", headers={EXPECTED_LAST_SUBJECT_SEQ: "0"})).seq == 2
    err = await publish_error(js, "s.other", {EXPECTED_LAST_SUBJECT_SEQ: "1"})
    assert err.description == "wrong last sequence: 0"


async def test_expected_last_subject_sequence_ignores_deleted_messages(
    js: JetStreamContext,
) -> None:
    await js.add_stream(name="S", subjects=["s.>"])
    await js.publish("s.a", b"1")
    await js.publish("s.a", b"2")
    await js.delete_msg("S", 2)
    assert (await js.publish("s.a", b"3", headers={EXPECTED_LAST_SUBJECT_SEQ: "1"})).seq == 3


async def test_expected_last_subject_sequence_for_another_subject(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s.>"])
    await js.publish("s.a", b"1")
    await js.publish("s.a", b"2")
    headers = {EXPECTED_LAST_SUBJECT_SEQ: "2", EXPECTED_LAST_SUBJECT_SEQ_SUBJECT: "s.a"}
    assert (await js.publish("s.d", b"x", headers=headers)).seq == 3
    headers = {EXPECTED_LAST_SUBJECT_SEQ: "2", EXPECTED_LAST_SUBJECT_SEQ_SUBJECT: "s.d"}
    err = await publish_error(js, "s.d", headers)
    assert err.description == "wrong last sequence: 3"


async def test_expected_last_subject_sequence_for_a_wildcard_takes_the_last_match(
    js: JetStreamContext,
) -> None:
    await js.add_stream(name="S", subjects=["s.>"])
    await js.publish("s.a", b"1")
    await js.publish("s.b", b"2")
    headers = {EXPECTED_LAST_SUBJECT_SEQ: "2", EXPECTED_LAST_SUBJECT_SEQ_SUBJECT: "s.*"}
    assert (await js.publish("s.c", b"x", headers=headers)).seq == 3
    err = await publish_error(js, "s.c", headers)
    assert err.description == "wrong last sequence: 3"


async def test_expected_subject_without_expected_sequence_is_refused(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s.>"])
    err = await publish_error(js, "s.a", {EXPECTED_LAST_SUBJECT_SEQ_SUBJECT: "s.a"})
    assert (err.code, err.err_code, err.description) == (
        400,
        10193,
        "missing sequence for expected last sequence per subject",
    )


# -- expected last msg id -----------------------------------------------------------------------


async def test_expected_last_msg_id(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s"])
    await js.publish("s", b"1", headers={MSG_ID: "id1"})
    ack = await js.publish("s", b"2", headers={EXPECTED_LAST_MSG_ID: "id1", MSG_ID: "id2"})
    assert ack.seq == 2
    err = await publish_error(js, "s", {EXPECTED_LAST_MSG_ID: "id1"})
    assert (err.code, err.err_code, err.description) == (400, 10070, "wrong last msg ID: id2")


async def test_expected_last_msg_id_after_a_message_without_id(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s"])
    await js.publish("s", b"1", headers={MSG_ID: "id1"})
    await js.publish("s", b"2")
    err = await publish_error(js, "s", {EXPECTED_LAST_MSG_ID: "id1"})
    assert (err.err_code, err.description) == (10070, "wrong last msg ID: ")


async def test_duplicate_does_not_change_the_last_msg_id(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s"])
    await js.publish("s", b"1", headers={MSG_ID: "a"})
    await js.publish("s", b"2", headers={MSG_ID: "b"})
    assert (await js.publish("s", b"1", headers={MSG_ID: "a"})).duplicate
    assert (await js.publish("s", b"3", headers={EXPECTED_LAST_MSG_ID: "b"})).seq == 3


async def test_duplicate_wins_over_a_wrong_expected_last_msg_id(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s"])
    await js.publish("s", b"1", headers={MSG_ID: "a"})
    ack = await js.publish("s", b"1", headers={MSG_ID: "a", EXPECTED_LAST_MSG_ID: "zz"})
    assert (ack.seq, ack.duplicate) == (1, True)


async def test_wrong_expected_last_sequence_wins_over_a_duplicate(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s"])
    await js.publish("s", b"1", headers={MSG_ID: "a"})
    err = await publish_error(js, "s", {MSG_ID: "a", EXPECTED_LAST_SEQ: "9"})
    assert err.err_code == 10071


# -- rollups ------------------------------------------------------------------------------------


async def rollup_stream(js: JetStreamContext) -> None:
    await js.add_stream(name="R", subjects=["r.>"], allow_rollup_hdrs=True)
    for subject in ["r.a", "r.a", "r.b", "r.a", "r.b"]:
        await js.publish(subject, b"x")


async def test_rollup_sub_keeps_only_the_new_message_of_its_subject(
    nc: Client, js: JetStreamContext
) -> None:
    await rollup_stream(js)
    assert (await js.publish("r.a", b"roll", headers={ROLLUP: "sub"})).seq == 6
    st = await state(nc, "R")
    assert st["subjects"] == {"r.a": 1, "r.b": 2}
    assert (st["messages"], st["first_seq"], st["last_seq"], st["num_deleted"]) == (3, 3, 6, 1)


async def test_rollup_all_keeps_only_the_new_message(nc: Client, js: JetStreamContext) -> None:
    await rollup_stream(js)
    assert (await js.publish("r.c", b"roll", headers={ROLLUP: "all"})).seq == 6
    st = await state(nc, "R")
    assert st["subjects"] == {"r.c": 1}
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (1, 6, 6)
    assert "num_deleted" not in st


async def test_rollup_without_allow_rollup_hdrs_is_refused(js: JetStreamContext) -> None:
    await js.add_stream(name="R", subjects=["r.>"])
    await js.publish("r.a", b"x")
    err = await publish_error(js, "r.a", {ROLLUP: "sub"})
    assert (err.code, err.err_code, err.description) == (500, 10111, "rollup not permitted")
    assert (await js.stream_info("R")).state.messages == 1


async def test_rollup_with_an_unknown_value_is_refused(js: JetStreamContext) -> None:
    await js.add_stream(name="R", subjects=["r.>"], allow_rollup_hdrs=True)
    err = await publish_error(js, "r.a", {ROLLUP: "bogus"})
    assert (err.err_code, err.description) == (10111, 'rollup value invalid: "bogus"')


# -- size, TTL, sealed --------------------------------------------------------------------------


async def test_message_at_max_msg_size_is_accepted(js: JetStreamContext) -> None:
    await js.add_stream(name="Z", subjects=["z"], max_msg_size=20)
    assert (await js.publish("z", b"x" * 20)).seq == 1


async def test_message_over_max_msg_size_is_refused(js: JetStreamContext) -> None:
    await js.add_stream(name="Z", subjects=["z"], max_msg_size=20)
    with pytest.raises(APIError) as exc:
        await js.publish("z", b"x" * 21)
    err = exc.value
    assert (err.code, err.err_code, err.description) == (
        400,
        10054,
        "message size exceeds maximum allowed",
    )


async def test_headers_count_towards_max_msg_size(js: JetStreamContext) -> None:
    await js.add_stream(name="Z", subjects=["z"], max_msg_size=20)
    err = await publish_error(js, "z", {"Hh": "y" * 10}, data=b"x" * 5)
    assert err.err_code == 10054
    assert (await js.stream_info("Z")).state.messages == 0


async def test_per_message_ttl_is_refused(js: JetStreamContext) -> None:
    await js.add_stream(name="T", subjects=["t"])
    err = await publish_error(js, "t", {"Nats-TTL": "1s"})
    assert (err.code, err.err_code, err.description) == (400, 10166, "per-message TTL is disabled")


async def test_sealed_stream_refuses_publishes(js: JetStreamContext) -> None:
    await js.add_stream(name="SEAL", subjects=["seal"])
    await js.publish("seal", b"x")
    await js.update_stream(name="SEAL", subjects=["seal"], sealed=True)
    with pytest.raises(APIError) as exc:
        await js.publish("seal", b"y")
    err = exc.value
    assert (err.code, err.err_code, err.description) == (
        400,
        10109,
        "invalid operation on sealed stream",
    )
    info = await js.stream_info("SEAL")
    assert (info.state.messages, info.state.last_seq) == (1, 1)


async def test_refused_publish_does_not_take_a_sequence(js: JetStreamContext) -> None:
    await js.add_stream(name="S", subjects=["s"], max_msg_size=10)
    await js.publish("s", b"1")
    with pytest.raises(APIError):
        await js.publish("s", b"x" * 11)
    assert (await js.publish("s", b"2")).seq == 2
    assert (await js.get_msg("S", 2)).data == b"2"


async def test_refused_message_inside_a_batch_does_not_shift_the_others(
    js: JetStreamContext,
) -> None:
    await js.add_stream(name="S", subjects=["s.>"], max_msg_size=10)
    results = await asyncio.gather(
        js.publish("s.a", b"first"),
        js.publish("s.b", b"x" * 11),
        js.publish("s.c", b"third"),
        return_exceptions=True,
    )
    assert isinstance(results[1], APIError)
    assert [r.seq for r in (results[0], results[2]) if not isinstance(r, BaseException)] == [1, 2]
    first, second = await js.get_msg("S", 1), await js.get_msg("S", 2)
    assert (first.subject, first.data) == ("s.a", b"first")
    assert (second.subject, second.data) == ("s.c", b"third")


# -- ordering and concurrency -------------------------------------------------------------------


async def test_concurrent_publishes_from_one_connection_keep_their_order(
    nc: Client, js: JetStreamContext
) -> None:
    await js.add_stream(name="ORD", subjects=["ord"])
    count = 300
    inbox = nc.new_inbox()
    acks: dict[int, int] = {}
    done = asyncio.get_running_loop().create_future()

    async def on_ack(msg: Any) -> None:
        acks[int(msg.subject.rsplit(".", 1)[1])] = json.loads(msg.data)["seq"]
        if len(acks) == count and not done.done():
            done.set_result(None)

    await nc.subscribe(inbox + ".*", cb=on_ack)
    # Sent back to back without waiting for acks: many land in the same batches.
    for i in range(count):
        await nc.publish("ord", str(i).encode(), reply=f"{inbox}.{i}")
    await asyncio.wait_for(done, 10)
    seqs = [acks[i] for i in range(count)]
    assert seqs == list(range(1, count + 1))
    for seq in (1, 150, 300):
        assert (await js.get_msg("ORD", seq)).data == str(seq - 1).encode()


async def test_publishes_from_many_connections_get_distinct_sequences(
    agent: AgentProcess, js: JetStreamContext
) -> None:
    await js.add_stream(name="MANY", subjects=["many.*"])
    clients = [await nats.connect(agent.url) for _ in range(5)]
    try:

        async def publish_all(index: int, client: Client) -> list[int]:
            cjs = client.jetstream(timeout=10)
            acks = await asyncio.gather(
                *(cjs.publish(f"many.{index}", f"{index}-{i}".encode()) for i in range(40))
            )
            return [a.seq for a in acks]

        per_client = await asyncio.gather(*(publish_all(i, c) for i, c in enumerate(clients)))
    finally:
        for client in clients:
            await client.close()
    seqs = [s for client_seqs in per_client for s in client_seqs]
    assert sorted(seqs) == list(range(1, 201))
    info = await js.stream_info("MANY")
    assert (info.state.messages, info.state.last_seq) == (200, 200)


async def test_publishes_to_several_streams_in_one_batch_each_count_from_one(
    js: JetStreamContext,
) -> None:
    await js.add_stream(name="A", subjects=["a"])
    await js.add_stream(name="B", subjects=["b"])
    acks = await asyncio.gather(*(js.publish("a" if i % 2 else "b", b"x") for i in range(10)))
    assert sorted(a.seq for a in acks if a.stream == "A") == [1, 2, 3, 4, 5]
    assert sorted(a.seq for a in acks if a.stream == "B") == [1, 2, 3, 4, 5]
