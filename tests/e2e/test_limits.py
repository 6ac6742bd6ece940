"""Stream limits and discard policies: counts, bytes, age, per subject; updates that lower them.

Outcomes were checked against nats-server 2.15.1 doing the same. Byte sizes are learned from the
stream itself (InfiniStream counts a message's stored record, nats-server its file-store record).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy
from nats.js.errors import APIError

from support.moduleagent import one_agent_per_module

agent, no_streams = one_agent_per_module()


async def state(nc: Client, stream: str) -> dict[str, Any]:
    msg = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b'{"subjects_filter": ">"}', timeout=5)
    return json.loads(msg.data)["state"]


async def refused(js: JetStreamContext, subject: str, data: bytes = b"x") -> APIError:
    with pytest.raises(APIError) as exc:
        await js.publish(subject, data)
    return exc.value


async def wait_for_state(
    nc: Client, stream: str, predicate: Any, timeout: float = 5.0
) -> dict[str, Any]:
    """Poll the stream's state until `predicate(state)` holds; that state."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        st = await state(nc, stream)
        if predicate(st):
            return st
        assert loop.time() < deadline, f"state never matched: {st}"
        await asyncio.sleep(0.05)


async def record_size(nc: Client, js: JetStreamContext, subject: str, data: bytes) -> int:
    """What one message of this subject and payload counts for in a stream's bytes."""
    await js.add_stream(name="PROBE", subjects=[subject])
    await js.publish(subject, data)
    size = (await state(nc, "PROBE"))["bytes"]
    await js.delete_stream("PROBE")
    return int(size)


# -- max_msgs -----------------------------------------------------------------------------------


async def test_max_msgs_with_discard_old_drops_the_oldest(nc: Client, js: JetStreamContext) -> None:
    await js.add_stream(name="L", subjects=["l.>"], max_msgs=3)
    acks = [await js.publish("l.x", f"{i}".encode()) for i in range(5)]
    assert [a.seq for a in acks] == [1, 2, 3, 4, 5]
    st = await state(nc, "L")
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (3, 3, 5)
    assert "num_deleted" not in st
    assert (await js.get_msg("L", 3)).data == b"2"


async def test_max_msgs_with_discard_new_refuses(nc: Client, js: JetStreamContext) -> None:
    await js.add_stream(name="L", subjects=["l.>"], max_msgs=3, discard=DiscardPolicy.NEW)
    for _ in range(3):
        await js.publish("l.x", b"x")
    err = await refused(js, "l.x")
    assert (err.code, err.err_code, err.description) == (503, 10077, "maximum messages exceeded")
    st = await state(nc, "L")
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (3, 1, 3)


async def test_max_msgs_in_one_batch_keeps_the_newest(js: JetStreamContext) -> None:
    await js.add_stream(name="L", subjects=["l"], max_msgs=4)
    acks = await asyncio.gather(*(js.publish("l", f"{i}".encode()) for i in range(20)))
    assert sorted(a.seq for a in acks) == list(range(1, 21))
    info = await js.stream_info("L")
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (4, 17, 20)


async def test_max_msgs_with_discard_new_in_one_batch_takes_only_what_fits(
    js: JetStreamContext,
) -> None:
    await js.add_stream(name="L", subjects=["l"], max_msgs=4, discard=DiscardPolicy.NEW)
    results = await asyncio.gather(
        *(js.publish("l", b"x") for _ in range(10)), return_exceptions=True
    )
    accepted = [r.seq for r in results if not isinstance(r, BaseException)]
    errors = [r for r in results if isinstance(r, APIError)]
    assert sorted(accepted) == [1, 2, 3, 4]
    assert len(errors) == 6
    assert {e.err_code for e in errors} == {10077}


# -- max_bytes ----------------------------------------------------------------------------------


async def test_max_bytes_with_discard_old_drops_the_oldest(
    nc: Client, js: JetStreamContext
) -> None:
    size = await record_size(nc, js, "l.x", b"x" * 30)
    await js.add_stream(name="L", subjects=["l.>"], max_bytes=size * 3 + size // 2)
    for _ in range(5):
        await js.publish("l.x", b"x" * 30)
    st = await state(nc, "L")
    assert (st["messages"], st["bytes"], st["first_seq"], st["last_seq"]) == (3, size * 3, 3, 5)


async def test_max_bytes_with_discard_new_refuses(nc: Client, js: JetStreamContext) -> None:
    size = await record_size(nc, js, "l.x", b"x" * 30)
    await js.add_stream(
        name="L", subjects=["l.>"], max_bytes=size * 3 - 1, discard=DiscardPolicy.NEW
    )
    await js.publish("l.x", b"x" * 30)
    await js.publish("l.x", b"x" * 30)
    err = await refused(js, "l.x", b"x" * 30)
    assert (err.code, err.err_code, err.description) == (503, 10077, "maximum bytes exceeded")
    # A smaller message still fits.
    assert (await js.publish("l.x", b"")).seq == 3
    st = await state(nc, "L")
    assert (st["messages"], st["first_seq"]) == (3, 1)


async def test_message_larger_than_max_bytes_with_discard_old_is_kept(
    nc: Client, js: JetStreamContext
) -> None:
    # nats-server stores it and then removes everything, itself included.
    size = await record_size(nc, js, "l.x", b"x" * 10)
    await js.add_stream(name="L", subjects=["l.>"], max_bytes=size * 2)
    await js.publish("l.x", b"x" * 10)
    ack = await js.publish("l.x", b"x" * 1000)
    assert ack.seq == 2
    st = await state(nc, "L")
    assert (st["messages"], st["bytes"], st["first_seq"], st["last_seq"]) == (0, 0, 3, 2)


# -- max_msgs_per_subject -----------------------------------------------------------------------


async def test_max_msgs_per_subject_keeps_the_newest_of_each_subject(
    nc: Client, js: JetStreamContext
) -> None:
    await js.add_stream(name="L", subjects=["l.>"], max_msgs_per_subject=2)
    for subject in ["l.a", "l.a", "l.b", "l.a", "l.a", "l.b", "l.c"]:
        await js.publish(subject, b"x")
    st = await state(nc, "L")
    assert st["subjects"] == {"l.a": 2, "l.b": 2, "l.c": 1}
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (5, 3, 7)
    assert (await js.get_msg("L", 1, subject="l.a", next=True)).seq == 4


async def test_discard_new_per_subject_refuses_at_the_subject_limit(
    nc: Client, js: JetStreamContext
) -> None:
    await js.add_stream(
        name="L",
        subjects=["l.>"],
        max_msgs_per_subject=2,
        discard=DiscardPolicy.NEW,
        discard_new_per_subject=True,
    )
    await js.publish("l.a", b"x")
    await js.publish("l.a", b"x")
    err = await refused(js, "l.a")
    assert (err.code, err.err_code, err.description) == (
        503,
        10077,
        "maximum messages per subject exceeded",
    )
    assert (await js.publish("l.b", b"x")).seq == 3
    st = await state(nc, "L")
    assert st["subjects"] == {"l.a": 2, "l.b": 1}


async def test_discard_new_without_per_subject_still_evicts_per_subject(
    nc: Client, js: JetStreamContext
) -> None:
    await js.add_stream(
        name="L", subjects=["l.>"], max_msgs_per_subject=2, discard=DiscardPolicy.NEW
    )
    for subject in ["l.a", "l.a", "l.a", "l.b"]:
        await js.publish(subject, b"x")
    st = await state(nc, "L")
    assert st["subjects"] == {"l.a": 2, "l.b": 1}
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (3, 2, 4)


async def test_full_stream_with_discard_new_takes_a_message_that_replaces_one(
    nc: Client, js: JetStreamContext
) -> None:
    await js.add_stream(
        name="L",
        subjects=["l.>"],
        max_msgs=3,
        max_msgs_per_subject=1,
        discard=DiscardPolicy.NEW,
    )
    for subject in ["l.a", "l.b", "l.c"]:
        await js.publish(subject, b"x")
    # l.a is at its subject limit, so storing it evicts the old l.a: the count stays at 3.
    assert (await js.publish("l.a", b"new")).seq == 4
    err = await refused(js, "l.d")
    assert err.description == "maximum messages exceeded"
    st = await state(nc, "L")
    assert st["subjects"] == {"l.a": 1, "l.b": 1, "l.c": 1}
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (3, 2, 4)


async def test_discard_new_max_bytes_takes_a_same_size_replacement(
    nc: Client, js: JetStreamContext
) -> None:
    size = await record_size(nc, js, "l.a", b"x" * 100)
    await js.add_stream(
        name="L",
        subjects=["l.>"],
        max_msgs_per_subject=1,
        max_bytes=size + size // 2,
        discard=DiscardPolicy.NEW,
    )
    await js.publish("l.a", b"x" * 100)
    err = await refused(js, "l.a", b"x" * 150)
    assert err.description == "maximum bytes exceeded"
    assert (await js.publish("l.a", b"x" * 100)).seq == 2
    err = await refused(js, "l.b", b"x" * 100)
    assert err.description == "maximum bytes exceeded"
    st = await state(nc, "L")
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (1, 2, 2)


# -- max_age ------------------------------------------------------------------------------------


async def test_max_age_expires_messages_without_new_publishes(
    nc: Client, js: JetStreamContext
) -> None:
    await js.add_stream(name="AGE", subjects=["age"], max_age=0.6)
    for _ in range(3):
        await js.publish("age", b"x")
    assert (await state(nc, "AGE"))["messages"] == 3
    st = await wait_for_state(nc, "AGE", lambda st: st["messages"] == 0)
    assert (st["bytes"], st["first_seq"], st["last_seq"]) == (0, 4, 3)
    assert (await js.publish("age", b"x")).seq == 4


async def test_max_age_keeps_younger_messages(nc: Client, js: JetStreamContext) -> None:
    await js.add_stream(name="AGE", subjects=["age.>"], max_age=0.5)
    await js.publish("age.old", b"x")
    # Longer than the agent's 1 s expiry tick, so the old message goes while the young one is
    # younger than max_age.
    await asyncio.sleep(1.1)
    await js.publish("age.young", b"y")
    st = await wait_for_state(nc, "AGE", lambda st: st["first_seq"] >= 2)
    assert st["subjects"] == {"age.young": 1}
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (1, 2, 2)


# -- limits lowered by an update ----------------------------------------------------------------


async def test_lowering_max_msgs_applies_at_once(nc: Client, js: JetStreamContext) -> None:
    await js.add_stream(name="K", subjects=["k.>"])
    for i in range(10):
        await js.publish(f"k.{i % 3}", b"x")
    info = await js.update_stream(name="K", subjects=["k.>"], max_msgs=4)
    assert (info.state.messages, info.state.first_seq) == (4, 7)
    st = await state(nc, "K")
    assert st["subjects"] == {"k.0": 2, "k.1": 1, "k.2": 1}


async def test_lowering_max_msgs_per_subject_applies_at_once(
    nc: Client, js: JetStreamContext
) -> None:
    await js.add_stream(name="K", subjects=["k.>"])
    for i in range(10):
        await js.publish(f"k.{i % 3}", b"x")
    await js.update_stream(name="K", subjects=["k.>"], max_msgs_per_subject=1)
    st = await state(nc, "K")
    assert st["subjects"] == {"k.0": 1, "k.1": 1, "k.2": 1}
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (3, 8, 10)
    assert "num_deleted" not in st


async def test_lowering_max_bytes_applies_at_once(nc: Client, js: JetStreamContext) -> None:
    size = await record_size(nc, js, "k.0", b"x" * 10)
    await js.add_stream(name="K", subjects=["k.>"])
    for i in range(6):
        await js.publish(f"k.{i % 2}", b"x" * 10)
    await js.update_stream(name="K", subjects=["k.>"], max_bytes=size * 2)
    st = await state(nc, "K")
    assert (st["messages"], st["bytes"], st["first_seq"]) == (2, size * 2, 5)


async def test_lowering_max_age_expires_at_once(nc: Client, js: JetStreamContext) -> None:
    await js.add_stream(name="K", subjects=["k"])
    await js.publish("k", b"x")
    await asyncio.sleep(0.25)
    await js.update_stream(name="K", subjects=["k"], max_age=0.2, duplicate_window=0.2)
    assert (await state(nc, "K"))["messages"] == 0


async def test_lowering_count_limits_with_discard_new_keeps_the_messages(
    nc: Client, js: JetStreamContext
) -> None:
    # nats-server only refuses new messages then; it does not drop stored ones.
    await js.add_stream(name="K", subjects=["k.>"], discard=DiscardPolicy.NEW)
    for i in range(6):
        await js.publish(f"k.{i % 2}", b"x")
    await js.update_stream(
        name="K", subjects=["k.>"], discard=DiscardPolicy.NEW, max_msgs=2, max_bytes=10
    )
    st = await state(nc, "K")
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (6, 1, 6)
    err = await refused(js, "k.0")
    assert err.err_code == 10077


async def test_lowering_per_subject_limit_with_discard_new_trims(
    nc: Client, js: JetStreamContext
) -> None:
    await js.add_stream(name="K", subjects=["k.>"], discard=DiscardPolicy.NEW)
    for i in range(6):
        await js.publish(f"k.{i % 2}", b"x")
    await js.update_stream(
        name="K", subjects=["k.>"], discard=DiscardPolicy.NEW, max_msgs_per_subject=1
    )
    st = await state(nc, "K")
    assert st["subjects"] == {"k.0": 1, "k.1": 1}
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (2, 5, 6)


async def test_discard_new_stream_over_its_count_limit_evicts_only_per_subject(
    nc: Client, js: JetStreamContext
) -> None:
    await js.add_stream(name="K", subjects=["k.>"], discard=DiscardPolicy.NEW)
    for i in range(4):
        await js.publish(f"k.{i}", b"x")
    await js.update_stream(
        name="K",
        subjects=["k.>"],
        discard=DiscardPolicy.NEW,
        max_msgs=2,
        max_msgs_per_subject=1,
    )
    # k.0 is at its subject limit, so it is taken and replaces the old k.0; nothing else goes.
    assert (await js.publish("k.0", b"new")).seq == 5
    st = await state(nc, "K")
    assert st["subjects"] == {"k.0": 1, "k.1": 1, "k.2": 1, "k.3": 1}
    assert (st["messages"], st["first_seq"], st["last_seq"]) == (4, 2, 5)
