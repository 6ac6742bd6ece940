"""MSG.GET, MSG.DELETE and PURGE, and the stream state each leaves behind.

The states asserted here are what nats-server 2.15.1 reports after the same operations (byte
counts aside: the two servers size a stored message differently).
"""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import APIError, BadRequestError, NotFoundError

from support.moduleagent import one_agent_per_module

agent, no_streams = one_agent_per_module()

API = "$JS.API."


async def api(nc: Client, subject: str, body: Any = b"") -> dict[str, Any]:
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    msg = await nc.request(API + subject, body, timeout=5)
    return json.loads(msg.data)


def assert_error(resp: dict[str, Any], code: int, err_code: int, description: str) -> None:
    assert resp.get("error") == {"code": code, "err_code": err_code, "description": description}


async def state(nc: Client, stream: str) -> dict[str, Any]:
    resp = await api(nc, f"STREAM.INFO.{stream}", {"subjects_filter": ">", "deleted_details": True})
    st = resp["state"]
    for key in ("bytes", "first_ts", "last_ts", "consumer_count"):
        st.pop(key)
    return st


async def five(js: JetStreamContext) -> None:
    """Stream S: s.a, s.b, s.a (with a header), s.c, s.b as sequences 1..5, payloads m1..m5."""
    await js.add_stream(name="S", subjects=["s.>"])
    for i, subject in enumerate(["s.a", "s.b", "s.a", "s.c", "s.b"], start=1):
        headers = {"H": "2"} if i == 3 else None
        await js.publish(subject, f"m{i}".encode(), headers=headers)


# -- MSG.GET ------------------------------------------------------------------------------------


async def test_get_by_sequence(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    before = time.time()
    resp = await api(nc, "STREAM.MSG.GET.S", {"seq": 2})
    assert resp["type"] == "io.nats.jetstream.api.v1.stream_msg_get_response"
    message = resp["message"]
    assert (message["subject"], message["seq"]) == ("s.b", 2)
    assert base64.b64decode(message["data"]) == b"m2"
    assert "hdrs" not in message
    stamp = datetime.fromisoformat(message["time"].replace("Z", "+00:00"))
    assert stamp.tzinfo == UTC
    assert before - 60 < stamp.timestamp() <= time.time() + 1


async def test_get_returns_the_stored_headers(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    resp = await api(nc, "STREAM.MSG.GET.S", {"seq": 3})
    assert base64.b64decode(resp["message"]["hdrs"]) == b"NATS/1.0\r\nH: 2\r\n\r\n"
    msg = await js.get_msg("S", 3)
    assert (msg.subject, msg.data, msg.headers) == ("s.a", b"m3", {"H": "2"})


async def test_get_last_by_subject(js: JetStreamContext) -> None:
    await five(js)
    assert (await js.get_last_msg("S", "s.a")).seq == 3
    assert (await js.get_last_msg("S", "s.*")).seq == 5
    assert (await js.get_last_msg("S", "s.c")).data == b"m4"


async def test_get_next_by_subject(js: JetStreamContext) -> None:
    await five(js)
    assert (await js.get_msg("S", 3, subject="s.b", next=True)).seq == 5
    assert (await js.get_msg("S", 2, subject="s.b", next=True)).seq == 2
    assert (await js.get_msg("S", 1, subject="s.>", next=True)).seq == 1


async def test_get_next_by_subject_without_a_sequence_starts_at_the_beginning(
    nc: Client, js: JetStreamContext
) -> None:
    await five(js)
    resp = await api(nc, "STREAM.MSG.GET.S", {"next_by_subj": "s.b"})
    assert resp["message"]["seq"] == 2


@pytest.mark.parametrize(
    "request_body",
    [{"seq": 99}, {"next_by_subj": "s.z"}, {"last_by_subj": "s.z"}, {"seq": 6}],
)
async def test_get_of_no_message_is_not_found(
    nc: Client, js: JetStreamContext, request_body: dict[str, Any]
) -> None:
    await five(js)
    resp = await api(nc, "STREAM.MSG.GET.S", request_body)
    assert_error(resp, 404, 10037, "no message found")


async def test_get_of_a_deleted_message_is_not_found(js: JetStreamContext) -> None:
    await five(js)
    await js.delete_msg("S", 2)
    with pytest.raises(NotFoundError) as exc:
        await js.get_msg("S", 2)
    assert (exc.value.err_code, exc.value.description) == (10037, "no message found")
    # Nor is it the last of its subject any more.
    await js.delete_msg("S", 5)
    with pytest.raises(NotFoundError):
        await js.get_last_msg("S", "s.b")


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{}",
        b'{"seq": 0}',
        b'{"seq": 1, "last_by_subj": "s.a"}',
        b'{"last_by_subj": "s.a", "next_by_subj": "s.a"}',
        b'{"seq": 1, "batch": 2}',
    ],
)
async def test_get_with_nothing_or_conflicting_options_is_a_bad_request(
    nc: Client, js: JetStreamContext, body: bytes
) -> None:
    await five(js)
    assert_error(await api(nc, "STREAM.MSG.GET.S", body), 400, 10003, "bad request")


async def test_get_with_malformed_json_is_invalid_json(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    resp = await api(nc, "STREAM.MSG.GET.S", b"{x")
    assert resp["error"]["err_code"] == 10025


async def test_get_from_a_missing_stream_is_stream_not_found(nc: Client) -> None:
    resp = await api(nc, "STREAM.MSG.GET.GHOST", {"seq": 1})
    assert_error(resp, 404, 10059, "stream not found")


# -- MSG.DELETE ---------------------------------------------------------------------------------


async def test_delete_inside_the_stream_leaves_a_gap(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    assert await js.delete_msg("S", 2) is True
    assert await state(nc, "S") == {
        "messages": 4,
        "first_seq": 1,
        "last_seq": 5,
        "num_subjects": 3,
        "subjects": {"s.a": 2, "s.b": 1, "s.c": 1},
        "num_deleted": 1,
        "deleted": [2],
    }


async def test_delete_of_the_first_message_moves_first_seq(
    nc: Client, js: JetStreamContext
) -> None:
    await five(js)
    await js.delete_msg("S", 2)
    await js.delete_msg("S", 1)
    st = await state(nc, "S")
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (3, 3, 5)
    assert "num_deleted" not in st


async def test_delete_of_the_last_message_keeps_last_seq(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    await js.delete_msg("S", 5)
    st = await state(nc, "S")
    assert (st["messages"], st["first_seq"], st["last_seq"], st["deleted"]) == (4, 1, 5, [5])
    assert (await js.publish("s.x", b"x")).seq == 6


async def test_delete_of_every_message_empties_the_stream(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    for seq in (3, 1, 5, 2, 4):
        await js.delete_msg("S", seq)
    st = await state(nc, "S")
    assert st == {"messages": 0, "first_seq": 6, "last_seq": 5}


async def test_delete_with_no_erase(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    resp = await api(nc, "STREAM.MSG.DELETE.S", {"seq": 4, "no_erase": True})
    assert resp == {"type": "io.nats.jetstream.api.v1.stream_msg_delete_response", "success": True}
    assert (await state(nc, "S"))["deleted"] == [4]


async def test_delete_of_a_deleted_message_is_sequence_not_found(
    nc: Client, js: JetStreamContext
) -> None:
    await five(js)
    await js.delete_msg("S", 2)
    resp = await api(nc, "STREAM.MSG.DELETE.S", {"seq": 2})
    assert_error(resp, 400, 10043, "sequence 2 not found")


async def test_delete_below_the_first_sequence_is_no_message_found(
    nc: Client, js: JetStreamContext
) -> None:
    await five(js)
    await js.purge_stream("S", seq=3)
    resp = await api(nc, "STREAM.MSG.DELETE.S", {"seq": 1})
    assert_error(resp, 500, 10057, "no message found")


async def test_delete_past_the_end_is_store_eof(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    resp = await api(nc, "STREAM.MSG.DELETE.S", {"seq": 99})
    assert_error(resp, 500, 10057, "stream store EOF")


async def test_delete_of_sequence_zero_is_no_message_found(
    nc: Client, js: JetStreamContext
) -> None:
    await five(js)
    resp = await api(nc, "STREAM.MSG.DELETE.S", {"seq": 0})
    assert_error(resp, 500, 10057, "no message found")


async def test_delete_without_a_body_is_a_bad_request(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    assert_error(await api(nc, "STREAM.MSG.DELETE.S"), 400, 10003, "bad request")


async def test_delete_from_a_missing_stream_is_stream_not_found(nc: Client) -> None:
    resp = await api(nc, "STREAM.MSG.DELETE.GHOST", {"seq": 1})
    assert_error(resp, 404, 10059, "stream not found")


async def test_delete_is_refused_with_deny_delete(js: JetStreamContext) -> None:
    await js.add_stream(name="D", subjects=["d"], deny_delete=True)
    await js.publish("d", b"x")
    with pytest.raises(APIError) as exc:
        await js.delete_msg("D", 1)
    err = exc.value
    assert (err.code, err.err_code, err.description) == (500, 10057, "message delete not permitted")
    assert (await js.stream_info("D")).state.messages == 1


async def test_delete_is_refused_on_a_sealed_stream(nc: Client, js: JetStreamContext) -> None:
    await js.add_stream(name="D", subjects=["d"])
    await js.publish("d", b"x")
    await js.update_stream(name="D", subjects=["d"], sealed=True)
    resp = await api(nc, "STREAM.MSG.DELETE.D", {"seq": 1})
    assert_error(resp, 400, 10109, "invalid operation on sealed stream")


# -- PURGE --------------------------------------------------------------------------------------


async def purge(nc: Client, stream: str, body: Any = b"") -> dict[str, Any]:
    return await api(nc, f"STREAM.PURGE.{stream}", body)


async def test_purge_all(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    resp = await purge(nc, "S")
    assert resp == {
        "type": "io.nats.jetstream.api.v1.stream_purge_response",
        "success": True,
        "purged": 5,
    }
    assert await state(nc, "S") == {"messages": 0, "first_seq": 6, "last_seq": 5}
    assert (await js.publish("s.a", b"x")).seq == 6


async def test_purge_of_an_empty_stream_purges_nothing(nc: Client, js: JetStreamContext) -> None:
    await js.add_stream(name="E", subjects=["e"])
    assert (await purge(nc, "E"))["purged"] == 0
    assert (await js.publish("e", b"x")).seq == 1


async def test_purge_with_a_literal_filter(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    assert (await purge(nc, "S", {"filter": "s.a"}))["purged"] == 2
    assert await state(nc, "S") == {
        "messages": 3,
        "first_seq": 2,
        "last_seq": 5,
        "num_subjects": 2,
        "subjects": {"s.b": 2, "s.c": 1},
        "num_deleted": 1,
        "deleted": [3],
    }


async def test_purge_with_a_wildcard_filter(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    assert await js.purge_stream("S", subject="s.*") is True
    assert await state(nc, "S") == {"messages": 0, "first_seq": 6, "last_seq": 5}


async def test_purge_with_a_filter_matching_nothing(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    assert (await purge(nc, "S", {"filter": "q.>"}))["purged"] == 0
    assert (await state(nc, "S"))["messages"] == 5


async def test_purge_up_to_a_sequence_excludes_it(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    assert (await purge(nc, "S", {"seq": 3}))["purged"] == 2
    st = await state(nc, "S")
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (3, 3, 5)
    assert st["subjects"] == {"s.a": 1, "s.b": 1, "s.c": 1}


async def test_purge_past_the_end_moves_both_ends(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    assert (await purge(nc, "S", {"seq": 100}))["purged"] == 5
    assert await state(nc, "S") == {"messages": 0, "first_seq": 100, "last_seq": 99}
    assert (await js.publish("s.a", b"x")).seq == 100


async def test_purge_keeping_the_newest(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    assert (await purge(nc, "S", {"keep": 2}))["purged"] == 3
    st = await state(nc, "S")
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (2, 4, 5)
    assert (await purge(nc, "S", {"keep": 5}))["purged"] == 0


async def test_purge_keep_counts_live_messages_only(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    await js.delete_msg("S", 4)
    assert (await purge(nc, "S", {"keep": 2}))["purged"] == 2
    st = await state(nc, "S")
    assert (st["messages"], st["first_seq"], st["last_seq"], st["deleted"]) == (2, 3, 5, [4])


async def test_purge_with_filter_and_keep(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    assert (await purge(nc, "S", {"filter": "s.a", "keep": 1}))["purged"] == 1
    st = await state(nc, "S")
    assert st["subjects"] == {"s.a": 1, "s.b": 2, "s.c": 1}
    assert (st["first_seq"], st["last_seq"]) == (2, 5)


async def test_purge_with_a_wildcard_filter_keeps_the_newest_matches_overall(
    nc: Client, js: JetStreamContext
) -> None:
    await five(js)
    assert (await purge(nc, "S", {"filter": "s.*", "keep": 2}))["purged"] == 3
    st = await state(nc, "S")
    assert st["subjects"] == {"s.b": 1, "s.c": 1}
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (2, 4, 5)


async def test_purge_with_filter_up_to_a_sequence(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    assert (await purge(nc, "S", {"filter": "s.b", "seq": 5}))["purged"] == 1
    st = await state(nc, "S")
    assert st["subjects"] == {"s.a": 2, "s.b": 1, "s.c": 1}
    assert st["deleted"] == [2]


async def test_purge_with_seq_and_keep_is_a_bad_request(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    assert_error(await purge(nc, "S", {"seq": 2, "keep": 1}), 400, 10003, "bad request")
    assert (await state(nc, "S"))["messages"] == 5


async def test_purge_is_refused_with_deny_purge(js: JetStreamContext) -> None:
    await js.add_stream(name="D", subjects=["d"], deny_purge=True)
    await js.publish("d", b"x")
    with pytest.raises(APIError) as exc:
        await js.purge_stream("D")
    err = exc.value
    assert (err.code, err.err_code, err.description) == (500, 10110, "stream purge not permitted")
    assert (await js.stream_info("D")).state.messages == 1


async def test_purge_is_refused_on_a_sealed_stream(nc: Client, js: JetStreamContext) -> None:
    await js.add_stream(name="D", subjects=["d"])
    await js.update_stream(name="D", subjects=["d"], sealed=True)
    assert_error(await purge(nc, "D"), 400, 10109, "invalid operation on sealed stream")


async def test_purge_of_a_missing_stream_is_stream_not_found(js: JetStreamContext) -> None:
    with pytest.raises(NotFoundError) as exc:
        await js.purge_stream("GHOST")
    assert exc.value.err_code == 10059


async def test_purge_with_malformed_json_is_invalid_json(js: JetStreamContext, nc: Client) -> None:
    await five(js)
    resp = await purge(nc, "S", b"{x")
    assert resp["error"]["err_code"] == 10025


async def test_purged_messages_cannot_be_read(js: JetStreamContext) -> None:
    await five(js)
    await js.purge_stream("S", subject="s.b")
    with pytest.raises(NotFoundError):
        await js.get_msg("S", 2)
    assert (await js.get_msg("S", 3)).data == b"m3"
    with pytest.raises(BadRequestError):
        await js.get_msg("S", 0)


async def test_a_sequence_of_purges_matches_nats_server(nc: Client, js: JetStreamContext) -> None:
    """The same operations run against nats-server 2.15.1 gave exactly these states."""
    await js.add_stream(name="P", subjects=["p.>"])
    for i in range(10):
        await js.publish(f"p.{'a' if i % 2 == 0 else 'b'}.{i % 3}", b"x" * i)
    st = await state(nc, "P")
    assert (st["messages"], st["first_seq"], st["last_seq"], st["num_subjects"]) == (10, 1, 10, 6)

    assert (await purge(nc, "P", {"filter": "p.a.*"}))["purged"] == 5
    assert await state(nc, "P") == {
        "messages": 5,
        "first_seq": 2,
        "last_seq": 10,
        "num_subjects": 3,
        "subjects": {"p.b.0": 2, "p.b.1": 2, "p.b.2": 1},
        "num_deleted": 4,
        "deleted": [3, 5, 7, 9],
    }

    assert (await purge(nc, "P", {"filter": "p.b.1", "keep": 1}))["purged"] == 1
    assert await state(nc, "P") == {
        "messages": 4,
        "first_seq": 4,
        "last_seq": 10,
        "num_subjects": 3,
        "subjects": {"p.b.0": 2, "p.b.1": 1, "p.b.2": 1},
        "num_deleted": 3,
        "deleted": [5, 7, 9],
    }

    assert (await purge(nc, "P", {"seq": 6}))["purged"] == 1
    assert await state(nc, "P") == {
        "messages": 3,
        "first_seq": 6,
        "last_seq": 10,
        "num_subjects": 3,
        "subjects": {"p.b.0": 1, "p.b.1": 1, "p.b.2": 1},
        "num_deleted": 2,
        "deleted": [7, 9],
    }

    for i in range(5):
        await js.publish("p.c", b"y" * i)
    assert (await purge(nc, "P", {"keep": 3}))["purged"] == 5
    assert await state(nc, "P") == {
        "messages": 3,
        "first_seq": 13,
        "last_seq": 15,
        "num_subjects": 1,
        "subjects": {"p.c": 3},
    }

    assert (await purge(nc, "P", {"filter": "p.c", "seq": 15}))["purged"] == 2
    assert await state(nc, "P") == {
        "messages": 1,
        "first_seq": 15,
        "last_seq": 15,
        "num_subjects": 1,
        "subjects": {"p.c": 1},
    }

    assert (await purge(nc, "P", {"seq": 100}))["purged"] == 1
    assert await state(nc, "P") == {"messages": 0, "first_seq": 100, "last_seq": 99}

    assert (await js.publish("p.z", b"")).seq == 100
    assert (await purge(nc, "P"))["purged"] == 1
    assert await state(nc, "P") == {"messages": 0, "first_seq": 101, "last_seq": 100}
