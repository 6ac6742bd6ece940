"""Message schedules (`allow_msg_schedules`, `Nats-Schedule`), against an agent and nats-server.

What a stream with schedules allows, what `@at`, `@every` and cron schedules publish and when,
a schedule replaced by a newer one on its subject, stopped by a delete, a purge or a cancel
message, sampling a source subject, a schedule outliving a restart, and every refusal with its
error. tests/e2e/test_schedules_agents.py fires schedules from two agents.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg
from nats.js.errors import NotFoundError

from support.jsapi import api, error
from support.servers import Server

S = 1_000_000_000
SCHEDULES = {"name": "S", "subjects": ["sched.>", "out.>", "in.>"], "allow_msg_schedules": True}


async def publish(
    nc: Client, subject: str, data: bytes = b"", headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """The PubAck (or error) as JSON."""
    msg = await nc.request(subject, data, headers=headers, timeout=10)
    return json.loads(msg.data)  # type: ignore[no-any-return]


async def create(nc: Client, **extra: Any) -> dict[str, Any]:
    resp = await api(nc, "STREAM.CREATE.S", {**SCHEDULES, **extra})
    assert "error" not in resp, resp
    return resp


def at(seconds: float) -> str:
    """`@at` this many seconds from now, to the second."""
    when = datetime.now(UTC) + timedelta(seconds=seconds)
    return "@at " + when.strftime("%Y-%m-%dT%H:%M:%SZ")


async def messages(js: JetStreamContext, subject: str) -> list[RawStreamMsg]:
    """Every message the stream holds on `subject`, in order."""
    state = (await js.stream_info("S")).state
    found = []
    for seq in range(state.first_seq, state.last_seq + 1):
        try:
            msg = await js.get_msg("S", seq)
        except NotFoundError:
            continue
        if msg.subject == subject:
            found.append(msg)
    return found


async def wait_for(js: JetStreamContext, subject: str, count: int, within: float) -> list[Any]:
    """The messages on `subject` once there are `count`; fails if not within `within` s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        found = await messages(js, subject)
        if len(found) >= count or loop.time() > deadline:
            assert len(found) >= count, f"{len(found)} messages on {subject} after {within}s"
            return found
        await asyncio.sleep(0.2)


async def after_a_later_fire(nc: Client, js: JetStreamContext, seconds: float) -> None:
    """Returns once a witness schedule due `seconds` from now (on out.witness) has fired.

    What should not have fired is checked after it: a fixed sleep on a slow machine can end
    before the server's schedule pass has run at all, the witness cannot. Give it a second or
    more past the due time of what must not fire.
    """
    witness = {"Nats-Schedule": at(seconds), "Nats-Schedule-Target": "out.witness"}
    assert "error" not in await publish(nc, "sched.witness", b"w", witness)
    await wait_for(js, "out.witness", 1, within=seconds + 15)


async def last_on(js: JetStreamContext, subject: str) -> RawStreamMsg | None:
    try:
        return await js.get_msg("S", subject=subject)
    except NotFoundError:
        return None


def headers_of(msg: RawStreamMsg) -> dict[str, str]:
    return dict(msg.headers or {})


# -- the stream ------------------------------------------------------------------------------


async def test_schedules_turn_on_rollups(server_nc: Client) -> None:
    body = {**SCHEDULES, "deny_purge": True}
    cfg = (await api(server_nc, "STREAM.CREATE.S", body))["config"]
    assert (cfg["allow_msg_schedules"], cfg["allow_rollup_hdrs"], cfg["deny_purge"]) == (
        True,
        True,
        False,
    )


async def test_schedules_refuse_discard_new(server_nc: Client) -> None:
    resp = await api(server_nc, "STREAM.CREATE.S", {**SCHEDULES, "discard": "new"})
    assert error(resp) == (500, 10052, "message scheduling cannot use discard new")


async def test_schedules_can_be_turned_on_but_not_off(server_nc: Client) -> None:
    plain = {"name": "S", "subjects": ["sched.>"]}
    await api(server_nc, "STREAM.CREATE.S", plain)
    resp = await api(server_nc, "STREAM.UPDATE.S", {**plain, "allow_msg_schedules": True})
    assert resp["config"]["allow_msg_schedules"] is True
    resp = await api(server_nc, "STREAM.UPDATE.S", plain)
    assert error(resp) == (500, 10052, "message schedules can not be disabled")


# -- what schedules publish ------------------------------------------------------------------


async def test_at_publishes_once_and_removes_its_schedule(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await create(server_nc, allow_msg_ttl=True)
    headers = {
        "Nats-Schedule": at(1),
        "Nats-Schedule-Target": "out.one",
        "Nats-Schedule-TTL": "5m",
        "X-Order": "42",
        "Nats-Msg-Id": "order-42",
    }
    assert await publish(server_nc, "sched.one", b"hello", headers) == {"stream": "S", "seq": 1}
    schedule = await js.get_msg("S", 1)
    # Stored as a rollup of its subject, so a newer schedule there replaces it.
    assert headers_of(schedule) == {**headers, "Nats-Rollup": "sub"}
    [fired] = await wait_for(js, "out.one", 1, within=10)
    assert fired.data == b"hello"
    # The schedule's headers and those that would stop the copy being stored go; the rest stay.
    assert headers_of(fired) == {
        "X-Order": "42",
        "Nats-Scheduler": "sched.one",
        "Nats-Schedule-Next": "purge",
        "Nats-TTL": "5m",
    }
    await asyncio.sleep(1.5)
    assert await last_on(js, "sched.one") is None
    assert len(await messages(js, "out.one")) == 1
    state = (await js.stream_info("S")).state
    assert (state.messages, state.last_seq) == (1, 2)


async def test_at_in_the_past_publishes_at_once(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await create(server_nc)
    headers = {"Nats-Schedule": "@at 2009-11-10T23:00:00Z", "Nats-Schedule-Target": "out.late"}
    await publish(server_nc, "sched.late", b"late", headers)
    [fired] = await wait_for(js, "out.late", 1, within=5)
    assert fired.data == b"late"


async def test_every_publishes_each_interval(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await create(server_nc)
    headers = {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "out.tick"}
    await publish(server_nc, "sched.tick", b"tick", headers)
    fired = await wait_for(js, "out.tick", 3, within=15)
    nexts = [_seconds(headers_of(m)["Nats-Schedule-Next"]) for m in fired[:3]]
    # Each says when the next one comes, on a whole second, one interval after the last.
    assert nexts[1] - nexts[0] == 1 and nexts[2] - nexts[1] == 1
    for msg in fired:
        assert msg.data == b"tick"
        assert headers_of(msg)["Nats-Scheduler"] == "sched.tick"
        assert set(headers_of(msg)) == {"Nats-Scheduler", "Nats-Schedule-Next"}
    # The schedule stays.
    schedule = await last_on(js, "sched.tick")
    assert schedule is not None and schedule.seq == 1


async def test_cron_publishes_on_its_pattern(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await create(server_nc)
    headers = {"Nats-Schedule": "*/1 * * * * *", "Nats-Schedule-Target": "out.cron"}
    await publish(server_nc, "sched.cron", b"c", headers)
    fired = await wait_for(js, "out.cron", 2, within=15)
    nexts = [_seconds(headers_of(m)["Nats-Schedule-Next"]) for m in fired[:2]]
    assert nexts[1] - nexts[0] == 1
    # Predefined patterns are accepted too (and will fire on the hour).
    hourly = {"Nats-Schedule": "@hourly", "Nats-Schedule-Target": "out.hourly"}
    assert "error" not in await publish(server_nc, "sched.hourly", b"h", hourly)


async def test_cron_in_a_time_zone(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await create(server_nc)
    headers = {
        "Nats-Schedule": "* * * * * *",
        "Nats-Schedule-Target": "out.tz",
        "Nats-Schedule-Time-Zone": "Asia/Tokyo",
    }
    await publish(server_nc, "sched.tz", b"z", headers)
    [fired, *_] = await wait_for(js, "out.tz", 1, within=10)
    # The next time is written in the schedule's zone.
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+09:00", headers_of(fired)["Nats-Schedule-Next"]
    )


async def test_source_publishes_the_last_message_of_a_subject(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await create(server_nc)
    await publish(server_nc, "in.temp", b"20", {"Unit": "C"})
    await publish(server_nc, "in.temp", b"21", {"Unit": "C"})
    headers = {
        "Nats-Schedule": at(1),
        "Nats-Schedule-Target": "out.temp",
        "Nats-Schedule-Source": "in.temp",
    }
    await publish(server_nc, "sched.sample", b"own body", headers)
    [fired] = await wait_for(js, "out.temp", 1, within=10)
    assert fired.data == b"21"
    assert headers_of(fired) == {
        "Unit": "C",
        "Nats-Scheduler": "sched.sample",
        "Nats-Schedule-Next": "purge",
    }
    # With nothing on its source subject, a schedule publishes itself.
    headers = {**headers, "Nats-Schedule-Source": "in.none", "Nats-Schedule-Target": "out.own"}
    await publish(server_nc, "sched.sample", b"own body", headers)
    [fired] = await wait_for(js, "out.own", 1, within=10)
    assert fired.data == b"own body"


async def test_schedule_rollup_rolls_up_the_target(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await create(server_nc)
    await publish(server_nc, "out.state", b"old")
    headers = {
        "Nats-Schedule": at(0),
        "Nats-Schedule-Target": "out.state",
        "Nats-Schedule-Rollup": "sub",
    }
    await publish(server_nc, "sched.state", b"new", headers)
    for _ in range(50):
        found = await messages(js, "out.state")
        if found and found[-1].data == b"new":
            break
        await asyncio.sleep(0.2)
    [only] = await messages(js, "out.state")
    assert only.data == b"new" and headers_of(only)["Nats-Rollup"] == "sub"


# -- replacing and stopping schedules --------------------------------------------------------


async def test_a_new_schedule_replaces_the_old(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await create(server_nc)
    old = {"Nats-Schedule": at(3600), "Nats-Schedule-Target": "out.old"}
    await publish(server_nc, "sched.x", b"old", old)
    new = {"Nats-Schedule": at(1), "Nats-Schedule-Target": "out.new"}
    assert (await publish(server_nc, "sched.x", b"new", new))["seq"] == 2
    assert [m.seq for m in await messages(js, "sched.x")] == [2]
    [fired] = await wait_for(js, "out.new", 1, within=10)
    assert fired.data == b"new"
    assert await messages(js, "out.old") == []


async def test_deleting_a_schedule_stops_it(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await create(server_nc)
    headers = {"Nats-Schedule": at(2), "Nats-Schedule-Target": "out.none"}
    await publish(server_nc, "sched.del", b"x", headers)
    await js.delete_msg("S", 1)
    every = {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "out.purged"}
    await publish(server_nc, "sched.purge", b"x", every)
    await js.purge_stream("S", subject="sched.purge")
    await after_a_later_fire(server_nc, js, 4)
    assert await messages(js, "out.none") == []
    assert await messages(js, "out.purged") == []


async def test_a_plain_message_on_its_subject_stops_a_schedule(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await create(server_nc)
    headers = {"Nats-Schedule": at(2), "Nats-Schedule-Target": "out.none"}
    await publish(server_nc, "sched.p", b"x", headers)
    await publish(server_nc, "sched.p", b"plain")
    await after_a_later_fire(server_nc, js, 4)
    assert await messages(js, "out.none") == []
    assert len(await messages(js, "sched.p")) == 2


async def test_a_cancel_message_stops_a_schedule(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await create(server_nc)
    headers = {"Nats-Schedule": at(2), "Nats-Schedule-Target": "out.none"}
    await publish(server_nc, "sched.order", b"x", headers)
    cancel = {"Nats-Schedule-Next": "purge", "Nats-Scheduler": "sched.order"}
    assert (await publish(server_nc, "sched.cancelled", b"why", cancel))["seq"] == 2
    assert await messages(js, "sched.order") == []
    await after_a_later_fire(server_nc, js, 4)
    assert await messages(js, "out.none") == []
    [kept] = await messages(js, "sched.cancelled")
    assert headers_of(kept) == cancel


async def test_a_schedule_outlives_a_restart(server: Server) -> None:
    nc = await nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        js = nc.jetstream(timeout=10)
        await create(nc)
        headers = {"Nats-Schedule": at(3), "Nats-Schedule-Target": "out.later"}
        await publish(nc, "sched.later", b"later", headers)
        server.restart()
        for _ in range(100):
            try:
                await js.stream_info("S")
                break
            except (TimeoutError, nats.errors.Error):
                await asyncio.sleep(0.2)
        [fired] = await wait_for(js, "out.later", 1, within=15)
        assert fired.data == b"later"
        await asyncio.sleep(1.5)
        assert len(await messages(js, "out.later")) == 1
    finally:
        await nc.close()


# -- refused ---------------------------------------------------------------------------------

PATTERN_INVALID = (400, 10189, "message schedules pattern is invalid")
TARGET_INVALID = (400, 10190, "message schedules target is invalid")
SOURCE_INVALID = (400, 10203, "message schedules source is invalid")
ROLLUP_INVALID = (400, 10192, "message schedules invalid rollup")
SCHEDULER_INVALID = (400, 10212, "message schedules invalid scheduler")
TZ_INVALID = (400, 10223, "message schedules time zone is invalid")
DISABLED = (400, 10188, "message schedules is disabled")
EVERY = {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "out.x"}


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Nats-Schedule": "@at tomorrow", "Nats-Schedule-Target": "out.x"}, PATTERN_INVALID),
        ({"Nats-Schedule": "@at 2030-01-01", "Nats-Schedule-Target": "out.x"}, PATTERN_INVALID),
        ({"Nats-Schedule": "@every 500ms", "Nats-Schedule-Target": "out.x"}, PATTERN_INVALID),
        ({"Nats-Schedule": "@every 1", "Nats-Schedule-Target": "out.x"}, PATTERN_INVALID),
        ({"Nats-Schedule": "* * * * *", "Nats-Schedule-Target": "out.x"}, PATTERN_INVALID),
        ({"Nats-Schedule": "0 0 0 30 2 *", "Nats-Schedule-Target": "out.x"}, PATTERN_INVALID),
        ({"Nats-Schedule": "61 * * * * *", "Nats-Schedule-Target": "out.x"}, PATTERN_INVALID),
        ({"Nats-Schedule": "@weekly-ish", "Nats-Schedule-Target": "out.x"}, PATTERN_INVALID),
        ({**EVERY, "Nats-Schedule-Time-Zone": "Europe/Amsterdam"}, PATTERN_INVALID),
        ({**EVERY, "Nats-Schedule": "@hourly", "Nats-Schedule-Time-Zone": "Mars/Base"}, TZ_INVALID),
        ({"Nats-Schedule": "@every 1s"}, TARGET_INVALID),
        ({**EVERY, "Nats-Schedule-Target": "sched.err"}, TARGET_INVALID),
        ({**EVERY, "Nats-Schedule-Target": "elsewhere"}, TARGET_INVALID),
        ({**EVERY, "Nats-Schedule-Target": "out.*"}, TARGET_INVALID),
        (
            {**EVERY, "Nats-Schedule-TTL": "500ms"},
            (400, 10191, "message schedules invalid per-message TTL"),
        ),
        ({**EVERY, "Nats-Schedule-TTL": "5m"}, (400, 10166, "per-message TTL is disabled")),
        ({**EVERY, "Nats-Schedule-Rollup": "all"}, ROLLUP_INVALID),
        ({**EVERY, "Nats-Rollup": "all"}, ROLLUP_INVALID),
        ({**EVERY, "Nats-Schedule-Source": "out.x"}, SOURCE_INVALID),
        ({**EVERY, "Nats-Schedule-Source": "sched.err"}, SOURCE_INVALID),
        ({**EVERY, "Nats-Schedule-Source": "elsewhere"}, SOURCE_INVALID),
        ({**EVERY, "Nats-Schedule-Source": "in.>"}, SOURCE_INVALID),
        ({"Nats-Schedule-Next": "purge"}, SCHEDULER_INVALID),
        ({"Nats-Schedule-Next": "purge", "Nats-Scheduler": "sched.err"}, SCHEDULER_INVALID),
        ({"Nats-Schedule-Next": "purge", "Nats-Scheduler": "sched.*"}, SCHEDULER_INVALID),
        (
            {"Nats-Schedule-Next": "2030-01-01T00:00:00Z", "Nats-Scheduler": "sched.x"},
            SCHEDULER_INVALID,
        ),
        ({"Nats-Scheduler": "sched.x"}, SCHEDULER_INVALID),
    ],
)
async def test_bad_schedules_are_refused(
    server_nc: Client, headers: dict[str, str], expected: tuple[int, int, str]
) -> None:
    js = server_nc.jetstream(timeout=10)
    await create(server_nc)
    resp = await publish(server_nc, "sched.err", b"x", headers)
    assert error(resp) == expected
    assert (await js.stream_info("S")).state.messages == 0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (EVERY, DISABLED),
        ({"Nats-Schedule": "@every 500ms", "Nats-Schedule-Target": "out.x"}, DISABLED),
        ({"Nats-Schedule-Next": "purge", "Nats-Scheduler": "sched.x"}, DISABLED),
        ({"Nats-Schedule-Next": "purge"}, SCHEDULER_INVALID),
    ],
)
async def test_schedules_on_a_stream_without_them_are_refused(
    server_nc: Client, headers: dict[str, str], expected: tuple[int, int, str]
) -> None:
    await api(server_nc, "STREAM.CREATE.N", {"name": "N", "subjects": ["sched.>", "out.>"]})
    resp = await publish(server_nc, "sched.err", b"x", headers)
    assert error(resp) == expected


async def test_an_empty_schedule_is_a_plain_message(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await create(server_nc)
    resp = await publish(server_nc, "sched.e", b"x", {"Nats-Schedule": "", "X": "1"})
    assert resp == {"stream": "S", "seq": 1}
    assert "Nats-Rollup" not in headers_of(await js.get_msg("S", 1))


def _seconds(rfc3339: str) -> int:
    return int(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp())
