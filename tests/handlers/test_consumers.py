"""The consumers half of the JetStream API (handlers/consumers.py) over a real SQLite store:
create by each subject form, info, names and lists, pause, delete, and their refusals."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable
from typing import Any

import pytest

from infinistream.handlers.consumers import ConsumerApi
from infinistream.jetstream import errors
from infinistream.jetstream.api import TYPE_PREFIX
from infinistream.jetstream.times import ZERO_TIME, go_time
from support.apiaccount import Account

GO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d*[1-9])?Z")


def tokens(subject: str) -> list[str]:
    return ("$JS.API." + subject).split(".")


def create_body(stream: str = "S", action: str = "", **config: Any) -> bytes:
    config.setdefault("ack_policy", "explicit")
    return json.dumps({"stream_name": stream, "config": config, "action": action}).encode()


async def refused(work: Awaitable[Any]) -> errors.ApiError:
    with pytest.raises(errors.ApiError) as info:
        await work
    return info.value


async def stream_of_four(account: Account) -> ConsumerApi:
    await account.create_stream(name="S", subjects=["s.>"])
    for i in range(4):
        await account.publish("S", f"s.{i % 2}", b"m")
    return account.consumer_api


async def test_create_by_each_subject_form(account: Account) -> None:
    api = await stream_of_four(account)
    durable = await api.create(tokens("CONSUMER.DURABLE.CREATE.S.D"), create_body(durable_name="D"))
    assert durable["type"] == TYPE_PREFIX + "consumer_create_response"
    assert (durable["name"], durable["config"]["durable_name"]) == ("D", "D")
    named = await api.create(tokens("CONSUMER.CREATE.S.N"), create_body(name="N"))
    assert named["name"] == "N" and named["num_pending"] == 4
    filtered = await api.create(
        tokens("CONSUMER.CREATE.S.F.s.1"), create_body(name="F", filter_subject="s.1")
    )
    assert (filtered["config"]["filter_subject"], filtered["num_pending"]) == ("s.1", 2)
    ephemeral = await api.create(tokens("CONSUMER.CREATE.S"), create_body())
    assert len(ephemeral["name"]) > 0 and "durable_name" not in ephemeral["config"]
    assert GO_TIME.fullmatch(ephemeral["created"]) and GO_TIME.fullmatch(ephemeral["ts"])
    assert await api.count_all() == 4


async def test_create_again_and_its_refusals(account: Account) -> None:
    api = await stream_of_four(account)
    first = await api.create(tokens("CONSUMER.CREATE.S.C"), create_body(name="C"))
    again = await api.create(tokens("CONSUMER.CREATE.S.C"), create_body(name="C"))
    assert again["created"] == first["created"]
    missing = await refused(
        api.create(tokens("CONSUMER.CREATE.S.U"), create_body(name="U", action="update"))
    )
    assert missing.err_code == errors.consumer_does_not_exist().err_code
    mismatch = await refused(
        api.create(tokens("CONSUMER.CREATE.S.C"), create_body(stream="T", name="C"))
    )
    assert mismatch.err_code == errors.stream_mismatch().err_code
    no_stream = await refused(
        api.create(tokens("CONSUMER.CREATE.X.C"), create_body(stream="X", name="C"))
    )
    assert no_stream.err_code == errors.stream_not_found().err_code


async def test_a_start_time_is_read_as_go_reads_it(account: Account) -> None:
    api = await stream_of_four(account)
    later = go_time(time.time_ns() + 3600 * 10**9)
    by_time = await api.create(
        tokens("CONSUMER.CREATE.S.T"),
        create_body(name="T", deliver_policy="by_start_time", opt_start_time=later),
    )
    assert (by_time["config"]["opt_start_time"], by_time["num_pending"]) == (later, 0)
    # Written back at its offset, as nats-server does; a one-digit hour is a time to Go.
    early = await api.create(
        tokens("CONSUMER.CREATE.S.E"),
        create_body(
            name="E", deliver_policy="by_start_time", opt_start_time="2000-01-01T1:00:00+01:00"
        ),
    )
    assert (early["config"]["opt_start_time"], early["num_pending"]) == (
        "2000-01-01T01:00:00+01:00",
        4,
    )
    bad = await refused(
        api.create(
            tokens("CONSUMER.CREATE.S.B"),
            create_body(name="B", deliver_policy="by_start_time", opt_start_time="2000-13-01"),
        )
    )
    assert bad.description == 'invalid JSON: parsing time "2000-13-01": month out of range'


async def test_info_names_and_list(account: Account) -> None:
    api = await stream_of_four(account)
    for name in ("B", "A"):
        await api.create(tokens(f"CONSUMER.CREATE.S.{name}"), create_body(name=name))
    info = await api.info("S", "A")
    assert info["type"] == TYPE_PREFIX + "consumer_info_response"
    assert info["delivered"] == {"consumer_seq": 0, "stream_seq": 0}
    assert (info["num_pending"], info["num_ack_pending"], info["num_waiting"]) == (4, 0, 0)
    names = await api.names("S", b"")
    assert (names["consumers"], names["total"]) == (["A", "B"], 2)
    listed = await api.list("S", b"")
    assert [c["name"] for c in listed["consumers"]] == ["A", "B"]
    assert "type" not in listed["consumers"][0]
    gone = await refused(api.info("S", "NOSUCH"))
    assert gone.err_code == errors.consumer_not_found().err_code
    bad_page = await refused(api.names("S", b"{nope"))
    assert bad_page.err_code == 10025


async def test_pause_and_resume(account: Account) -> None:
    api = await stream_of_four(account)
    await api.create(tokens("CONSUMER.CREATE.S.C"), create_body(name="C"))
    until = go_time(time.time_ns() + 3600 * 10**9)
    paused = await api.pause("S", "C", json.dumps({"pause_until": until}).encode())
    assert paused["type"] == TYPE_PREFIX + "consumer_pause_response"
    assert (paused["paused"], paused["pause_until"]) == (True, until)
    assert 0 < paused["pause_remaining"] <= 3600 * 10**9
    assert (await api.info("S", "C"))["paused"] is True
    # No time, or Go's zero time, resumes.
    resumed = await api.pause("S", "C", json.dumps({"pause_until": ZERO_TIME}).encode())
    assert resumed == {
        "type": TYPE_PREFIX + "consumer_pause_response",
        "paused": False,
        "pause_until": ZERO_TIME,
    }
    assert "paused" not in await api.info("S", "C")
    bad = await refused(api.pause("S", "C", b'{"pause_until": "soon"}'))
    assert bad.err_code == 10025 and "cannot parse" in bad.description
    strict = await refused(api.pause("S", "C", b'{"pause_until": null, "x": 1}'))
    assert strict.err_code == 10025


async def test_delete(account: Account) -> None:
    api = await stream_of_four(account)
    await api.create(tokens("CONSUMER.CREATE.S.C"), create_body(name="C"))
    deleted = await api.delete("S", "C")
    assert deleted == {"type": TYPE_PREFIX + "consumer_delete_response", "success": True}
    assert (await refused(api.delete("S", "C"))).err_code == errors.consumer_not_found().err_code
    assert await api.count_all() == 0
