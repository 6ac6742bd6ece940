"""The streams half of the JetStream API (handlers/streams.py) over a real SQLite store: create,
update, info, names and lists, delete, purge, message get and delete, erase status."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Awaitable
from typing import Any

import pytest

from infinistream.handlers.streams import StreamApi, stream_state_to_wire
from infinistream.jetstream import errors
from infinistream.jetstream.api import TYPE_PREFIX
from infinistream.jetstream.times import ZERO_TIME
from infinistream.stream.records import StreamState
from support.apiaccount import Account, fresh_agent

GO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d*[1-9])?Z")


def body(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


async def refused(work: Awaitable[Any]) -> errors.ApiError:
    with pytest.raises(errors.ApiError) as info:
        await work
    return info.value


async def five(account: Account, name: str = "S", **config: Any) -> StreamApi:
    await account.create_stream(name=name, subjects=[f"{name.lower()}.>"], **config)
    for i in range(1, 6):
        await account.publish(name, f"{name.lower()}.{i % 2}", b"m%d" % i)
    return account.streams


def test_an_empty_stream_reports_no_first_sequence_and_zero_times() -> None:
    state = StreamState(uid="u", first_seq=1, last_seq=0)
    wire = stream_state_to_wire(state, consumers=2)
    assert wire == {
        "messages": 0,
        "bytes": 0,
        "first_seq": 0,
        "first_ts": ZERO_TIME,
        "last_seq": 0,
        "last_ts": ZERO_TIME,
        "consumer_count": 2,
    }


async def test_create_and_create_again(account: Account) -> None:
    streams = account.streams
    created = await streams.create("S", body(name="S", subjects=["s.>"]))
    assert created["type"] == TYPE_PREFIX + "stream_create_response"
    assert created["did_create"] is True and created["config"]["subjects"] == ["s.>"]
    assert GO_TIME.fullmatch(created["created"]) and GO_TIME.fullmatch(created["ts"])
    again = await streams.create("S", body(name="S", subjects=["s.>"]))
    assert again["did_create"] is True
    other = await refused(streams.create("S", body(name="S", subjects=["t.>"])))
    assert other.err_code == errors.stream_name_exist().err_code


async def test_create_refuses_what_nats_server_refuses(account: Account) -> None:
    streams = account.streams
    mismatch = await refused(streams.create("S", body(name="T")))
    assert mismatch.err_code == errors.stream_mismatch().err_code
    bad_json = await refused(streams.create("S", b"{nope"))
    assert bad_json.err_code == 10025
    sealed = await refused(streams.create("S", body(name="S", sealed=True)))
    assert "can not be sealed" in sealed.description
    await streams.create("A", body(name="A", subjects=["x.>"]))
    overlap = await refused(streams.create("B", body(name="B", subjects=["x.y"])))
    assert overlap.err_code == errors.stream_subject_overlap().err_code


async def test_update_and_info(account: Account) -> None:
    streams = await five(account)
    updated = await streams.update("S", body(name="S", subjects=["s.>"], max_msgs=3))
    assert updated["config"]["max_msgs"] == 3
    # Tighter limits apply at once.
    info = await streams.info("S", b"")
    assert (info["state"]["messages"], info["state"]["first_seq"]) == (3, 3)
    assert (info["total"], info["offset"], info["limit"]) == (0, 0, 0)
    assert info["cluster"] == {"leader": "agent"}
    gone = await refused(streams.update("NOSUCH", body(name="NOSUCH")))
    assert gone.err_code == errors.stream_not_found().err_code


async def test_info_with_subjects_and_deleted_details(account: Account) -> None:
    streams = await five(account)
    await streams.delete_msg("S", body(seq=2))
    info = await streams.info("S", body(subjects_filter="s.*", deleted_details=True))
    state = info["state"]
    assert state["subjects"] == {"s.0": 1, "s.1": 3}
    assert state["deleted"] == [2]
    assert GO_TIME.fullmatch(state["first_ts"]) and state["first_ts"] <= state["last_ts"]


async def test_names_and_lists(account: Account) -> None:
    streams = account.streams
    for name in ("B", "A", "C"):
        await account.create_stream(name=name)
    names = await streams.names(b"")
    assert (names["streams"], names["total"]) == (["A", "B", "C"], 3)
    assert (await streams.names(body(subject="b.x")))["streams"] == ["B"]
    # An offset past the end is clamped to the total.
    assert (await streams.names(body(offset=10)))["offset"] == 3
    listed = await streams.list(b"")
    assert [s["config"]["name"] for s in listed["streams"]] == ["A", "B", "C"]
    assert "cluster" not in listed["streams"][0]


async def test_delete(account: Account) -> None:
    streams = await five(account)
    not_empty = await refused(streams.delete("S", body(x=1)))
    assert not_empty.err_code == errors.not_empty_request().err_code
    assert (await streams.delete("S", b"{}"))["success"] is True
    assert "S" not in account.catalog.streams
    gone = await refused(streams.delete("S", b""))
    assert gone.err_code == errors.stream_not_found().err_code


async def test_purge(account: Account) -> None:
    streams = await five(account)
    both = await refused(streams.purge("S", body(seq=2, keep=1)))
    assert both.err_code == errors.bad_request().err_code
    assert (await streams.purge("S", body(filter="s.0")))["purged"] == 2
    assert (await streams.purge("S", body(keep=1)))["purged"] == 2
    info = await streams.info("S", b"")
    assert (info["state"]["messages"], info["state"]["last_seq"]) == (1, 5)


async def test_message_delete(account: Account) -> None:
    streams = await five(account)
    assert (await refused(streams.delete_msg("S", b""))).err_code == 10003
    assert (await streams.delete_msg("S", body(seq=3)))["success"] is True
    # What the store cannot delete is answered, not raised: nats-server answers it as a
    # served request, which account info does not count as an error.
    again = (await streams.delete_msg("S", body(seq=3)))["error"]
    assert again["err_code"] == errors.sequence_not_found(3).err_code
    past = (await streams.delete_msg("S", body(seq=9)))["error"]
    assert past["description"] == "stream store EOF"


async def test_message_get(account: Account) -> None:
    streams = await five(account)
    headers = b"NATS/1.0\r\nA:  x  \r\nA: y\r\n\r\n"
    await account.publish("S", "s.h", b"with", headers)
    got = (await streams.get_msg("S", body(seq=6)))["message"]
    # The headers as published, byte for byte.
    assert base64.b64decode(got["hdrs"]) == headers
    assert (got["subject"], got["seq"], base64.b64decode(got["data"])) == ("s.h", 6, b"with")
    assert GO_TIME.fullmatch(got["time"])
    last = (await streams.get_msg("S", body(last_by_subj="s.0")))["message"]
    assert last["seq"] == 4
    nxt = (await streams.get_msg("S", body(seq=2, next_by_subj="s.1")))["message"]
    assert nxt["seq"] == 3
    first = (await streams.get_msg("S", body(start_time="2000-01-01T1:00:00+01:00")))["message"]
    assert first["seq"] == 1
    none = await refused(streams.get_msg("S", body(seq=99)))
    assert none.err_code == errors.no_message_found().err_code


async def test_message_get_refusals(account: Account) -> None:
    streams = await five(account)
    bad_time = await refused(streams.get_msg("S", body(start_time="2030-01-01")))
    assert bad_time.description == (
        'invalid JSON: parsing time "2030-01-01" as "2006-01-02T15:04:05Z07:00": '
        'cannot parse "" as "T"'
    )
    for conflicting in (body(seq=1, last_by_subj="s.1"), body(), body(seq=1, batch=2)):
        assert (await refused(streams.get_msg("S", conflicting))).err_code == 10003
    gone = await refused(streams.get_msg("NOSUCH", body(seq=1)))
    assert gone.err_code == errors.stream_not_found().err_code


async def test_erase_status(account: Account) -> None:
    streams = await five(account)
    empty = await streams.erase_status("S", b"")
    assert (empty["total"], empty["pending"], empty["erasures"]) == (0, 0, [])
    await streams.delete_msg("S", body(seq=1))
    status = await streams.erase_status("S", b"")
    assert (status["total"], status["pending"]) == (1, 1)
    assert (await refused(streams.erase_status("S", body(seq=1)))).err_code == 10038


async def test_a_get_by_sequence_reads_metadata_once(account: Account) -> None:
    await five(account)  # five flushes: five sections, a page of the index each
    streams, meta = await fresh_agent(account)
    # Cold: the catalog's marker and the stream's state come with the page holding 3.
    assert (await streams.get_msg("S", body(seq=3)))["message"]["seq"] == 3
    assert meta.counted() == 1
    # Warm: all held, but the marker and the state are read to be sure nothing moved.
    assert (await streams.get_msg("S", body(seq=3)))["message"]["seq"] == 3
    assert meta.counted() == 1
    # The view held, another page: read with the marker and the state.
    assert (await streams.get_msg("S", body(seq=5)))["message"]["seq"] == 5
    assert meta.counted() == 1


async def test_a_get_sees_what_another_agent_did_to_the_stream(account: Account) -> None:
    await five(account)
    streams, _ = await fresh_agent(account)
    assert (await streams.get_msg("S", body(seq=2)))["message"]["seq"] == 2
    await account.publish("S", "s.new", b"six")
    six = (await streams.get_msg("S", body(seq=6)))["message"]
    assert base64.b64decode(six["data"]) == b"six"
    await account.streams.purge("S", b"")
    purged = await refused(streams.get_msg("S", body(seq=2)))
    assert purged.err_code == errors.no_message_found().err_code
    await account.streams.delete("S", b"")
    gone = await refused(streams.get_msg("S", body(seq=2)))
    assert gone.err_code == errors.stream_not_found().err_code
    assert "S" not in streams.catalog.streams
    await five(account)  # created again: a new stream of the same name
    again = (await streams.get_msg("S", body(seq=2)))["message"]
    assert base64.b64decode(again["data"]) == b"m2"
    assert streams.catalog.streams["S"].uid == account.catalog.streams["S"].uid
