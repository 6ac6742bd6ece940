"""The consumer API ($JS.API.CONSUMER.*) from nats-py and raw requests, against a running agent.

Answers (codes, err_codes, descriptions, configs) were taken from nats-server 2.15.1 running the
same requests. Where InfiniStream deliberately differs, the test says so: it refuses replay
policy "original" instead of accepting what it does not implement, and writes no "_nats.*"
metadata into configs. Push consumers have their own tests (test_push.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import nats.errors
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig
from nats.js.errors import APIError, NotFoundError

from support.moduleagent import one_agent_per_module

API = "$JS.API."
T = "io.nats.jetstream.api.v1."
NAME_RULE = "consumer name can not contain '.', '*', '>', '\\', '/'"


agent, no_streams = one_agent_per_module()


async def api(nc: Client, subject: str, body: Any = b"") -> dict[str, Any]:
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    msg = await nc.request(API + subject, body, timeout=5)
    return json.loads(msg.data)  # type: ignore[no-any-return]


def error(resp: dict[str, Any]) -> tuple[int, int, str]:
    err = resp.get("error")
    assert err is not None, resp
    return (err["code"], err["err_code"], err["description"])


async def stream(js: JetStreamContext, **kw: Any) -> None:
    await js.add_stream(name="S", subjects=["s.>"], **kw)


def create(name: str | None, action: str = "", **config: Any) -> dict[str, Any]:
    """A create request body for consumer `name` (None: an ephemeral without a name)."""
    if name is not None:
        config.setdefault("name", name)
    config.setdefault("ack_policy", "explicit")
    body: dict[str, Any] = {"stream_name": "S", "config": config}
    if action:
        body["action"] = action
    return body


# What nats-server fills in for {"name": "c1", "durable_name": "c1", "ack_policy": "explicit"}.
DEFAULTS = {
    "deliver_policy": "all",
    "ack_policy": "explicit",
    "ack_wait": 30_000_000_000,
    "max_deliver": -1,
    "replay_policy": "instant",
    "max_waiting": 512,
    "max_ack_pending": 1000,
    "num_replicas": 0,
    # nats-server's metadata (ADR-44): the API level the config needs, and the server's
    # version and API level, which InfiniStream gives as 2.12.0's.
    "metadata": {"_nats.req.level": "0", "_nats.ver": "2.12.0", "_nats.level": "2"},
}


# -- create -----------------------------------------------------------------------------------


async def test_create_with_name_and_filter_in_the_subject(nc: Client, js: JetStreamContext) -> None:
    await stream(js)
    resp = await api(
        nc, "CONSUMER.CREATE.S.c1.s.a", create("c1", durable_name="c1", filter_subject="s.a")
    )
    assert resp["type"] == T + "consumer_create_response"
    assert (resp["stream_name"], resp["name"]) == ("S", "c1")
    assert resp["config"] == {
        "durable_name": "c1",
        "name": "c1",
        **DEFAULTS,
        "filter_subject": "s.a",
    }
    assert resp["delivered"] == {"consumer_seq": 0, "stream_seq": 0}
    assert resp["ack_floor"] == {"consumer_seq": 0, "stream_seq": 0}
    assert (resp["num_ack_pending"], resp["num_redelivered"], resp["num_waiting"]) == (0, 0, 0)
    assert resp["num_pending"] == 0
    created = datetime.fromisoformat(resp["created"].replace("Z", "+00:00"))
    assert abs(created - datetime.now(UTC)) < timedelta(seconds=30)
    # The filter in the subject must be the one in the request.
    resp = await api(nc, "CONSUMER.CREATE.S.c2.s.a", create("c2", filter_subject="s.b"))
    assert error(resp) == (
        400,
        10131,
        "Consumer create request did not match filtered subject from create subject",
    )


async def test_durable_create(nc: Client, js: JetStreamContext) -> None:
    await stream(js)
    resp = await api(nc, "CONSUMER.DURABLE.CREATE.S.d1", create(None, durable_name="d1"))
    assert resp["name"] == "d1"
    assert resp["config"] == {"durable_name": "d1", "name": "d1", **DEFAULTS}
    resp = await api(nc, "CONSUMER.DURABLE.CREATE.S.d1", create(None, durable_name="d2"))
    assert error(resp) == (
        400,
        10017,
        "consumer name in subject does not match durable name in request",
    )


async def test_ephemeral_create(nc: Client, js: JetStreamContext) -> None:
    await stream(js)
    resp = await api(nc, "CONSUMER.CREATE.S", create(None))
    assert len(resp["name"]) == 8
    # (nats-server leaves "name" out of this config; InfiniStream writes the name it gave.)
    assert resp["config"].get("name", resp["name"]) == resp["name"]
    assert "durable_name" not in resp["config"]
    # Ephemerals go away after 5 s unused unless told otherwise.
    assert resp["config"]["inactive_threshold"] == 5_000_000_000
    resp = await api(nc, "CONSUMER.CREATE.S", create(None, durable_name="x"))
    assert error(resp) == (
        400,
        10020,
        "consumer expected to be ephemeral but a durable name was set in request",
    )
    # nats-py: a consumer without a durable name.
    info = await js.add_consumer("S", ConsumerConfig(ack_policy=AckPolicy.EXPLICIT))
    assert len(info.name) == 8
    assert info.config.durable_name is None
    assert info.config.inactive_threshold == 5.0


async def test_create_and_update_actions(nc: Client, js: JetStreamContext) -> None:
    await stream(js)
    base = {"durable_name": "c1", "filter_subject": "s.a"}
    assert "error" not in await api(nc, "CONSUMER.CREATE.S.c1", create("c1", **base))
    # "create" of the same config again is fine; of another config it is refused.
    resp = await api(nc, "CONSUMER.CREATE.S.c1", create("c1", "create", **base))
    assert resp["name"] == "c1"
    resp = await api(nc, "CONSUMER.CREATE.S.c1", create("c1", "create", **base, description="x"))
    assert error(resp) == (400, 10148, "consumer already exists")
    resp = await api(nc, "CONSUMER.CREATE.S.zz", create("zz", "update"))
    assert error(resp) == (400, 10149, "consumer does not exist")
    resp = await api(nc, "CONSUMER.CREATE.S.zz", {"stream_name": "S", "action": "upsert"})
    assert error(resp)[:2] == (400, 10025)
    # What may change.
    changed = {
        "durable_name": "c1",
        "filter_subject": "s.b",
        "description": "x",
        "ack_wait": 5_000_000_000,
        "max_deliver": 4,
        "max_ack_pending": 10,
    }
    resp = await api(nc, "CONSUMER.CREATE.S.c1", create("c1", "update", **changed))
    assert resp["config"] == {
        "durable_name": "c1",
        "name": "c1",
        "description": "x",
        **DEFAULTS,
        "ack_wait": 5_000_000_000,
        "max_deliver": 4,
        "filter_subject": "s.b",
        "max_ack_pending": 10,
    }
    info = await js.consumer_info("S", "c1")
    assert (info.config.filter_subject, info.config.ack_wait) == ("s.b", 5.0)


@pytest.mark.parametrize(
    ("change", "description"),
    [
        ({"deliver_policy": "new"}, "deliver policy can not be updated"),
        ({"ack_policy": "all"}, "ack policy can not be updated"),
        ({"max_waiting": 7}, "max waiting can not be updated"),
        (
            {"deliver_policy": "by_start_sequence", "opt_start_seq": 3},
            "deliver policy can not be updated",
        ),
    ],
)
async def test_update_refused(
    nc: Client, js: JetStreamContext, change: dict[str, Any], description: str
) -> None:
    await stream(js)
    assert "error" not in await api(nc, "CONSUMER.CREATE.S.c1", create("c1", durable_name="c1"))
    resp = await api(nc, "CONSUMER.CREATE.S.c1", create("c1", durable_name="c1", **change))
    assert error(resp) == (500, 10012, description)


async def test_update_with_nats_py(js: JetStreamContext) -> None:
    await stream(js)
    await js.add_consumer("S", ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT))
    info = await js.add_consumer(
        "S",
        ConsumerConfig(
            durable_name="d", ack_policy=AckPolicy.EXPLICIT, description="now", max_deliver=3
        ),
    )
    assert (info.config.description, info.config.max_deliver) == ("now", 3)
    with pytest.raises(APIError) as exc:
        await js.add_consumer("S", ConsumerConfig(durable_name="d", ack_policy=AckPolicy.ALL))
    assert (exc.value.err_code, exc.value.description) == (10012, "ack policy can not be updated")


# -- refusals ---------------------------------------------------------------------------------


async def test_bad_requests(nc: Client, js: JetStreamContext) -> None:
    await stream(js)
    resp = await api(nc, "CONSUMER.CREATE.NOPE.c1", {"stream_name": "NOPE", "config": {}})
    assert error(resp) == (404, 10059, "stream not found")
    code, err_code, description = error(await api(nc, "CONSUMER.CREATE.S.c9", b"{not json"))
    assert (code, err_code) == (400, 10025)
    assert description.startswith("invalid JSON: ")
    resp = await api(nc, "CONSUMER.CREATE.S.c9", {"stream_name": "T", "config": {"name": "c9"}})
    assert error(resp) == (400, 10056, "stream name in subject does not match request")


@pytest.mark.parametrize(
    ("subject", "config"),
    [
        ("CONSUMER.CREATE.S.a*b", {"name": "a*b"}),
        ("CONSUMER.CREATE.S", {"name": "a.b"}),
        ("CONSUMER.CREATE.S", {"name": "a>b"}),
        ("CONSUMER.DURABLE.CREATE.S.a>b", {"durable_name": "a>b"}),
    ],
)
async def test_invalid_names(
    nc: Client, js: JetStreamContext, subject: str, config: dict[str, Any]
) -> None:
    await stream(js)
    resp = await api(nc, subject, {"stream_name": "S", "config": config})
    assert error(resp) == (500, 10052, NAME_RULE)


async def test_replay_original_is_refused(nc: Client, js: JetStreamContext) -> None:
    # nats-server creates it; InfiniStream does not implement replay at original speed.
    await stream(js)
    resp = await api(nc, "CONSUMER.CREATE.S.x", create("x", replay_policy="original"))
    assert error(resp) == (500, 10012, 'replay policy "original" is not supported by InfiniStream')


async def test_unknown_stream_and_consumer(nc: Client, js: JetStreamContext) -> None:
    await stream(js)
    for subject in (
        "CONSUMER.INFO.NOPE.c",
        "CONSUMER.DELETE.NOPE.c",
        "CONSUMER.NAMES.NOPE",
        "CONSUMER.LIST.NOPE",
        "CONSUMER.PAUSE.NOPE.c",
    ):
        assert error(await api(nc, subject)) == (404, 10059, "stream not found"), subject
    for subject in ("CONSUMER.INFO.S.nope", "CONSUMER.DELETE.S.nope", "CONSUMER.PAUSE.S.nope"):
        assert error(await api(nc, subject)) == (404, 10014, "consumer not found"), subject
    with pytest.raises(NotFoundError) as exc:
        await js.consumer_info("S", "nope")
    assert exc.value.err_code == 10014
    with pytest.raises(NotFoundError) as exc:
        await js.consumer_info("NOPE", "nope")
    assert exc.value.err_code == 10059


# -- info, names, list, delete ------------------------------------------------------------------


async def test_info_names_list_and_delete(nc: Client, js: JetStreamContext) -> None:
    await stream(js)
    for i in range(3):
        await js.publish(f"s.{i}", b"x")
    for name in ("c", "a", "b"):
        await js.add_consumer("S", ConsumerConfig(durable_name=name, ack_policy=AckPolicy.EXPLICIT))
    info = await js.consumer_info("S", "a")
    assert (info.stream_name, info.name, info.num_pending) == ("S", "a", 3)
    resp = await api(nc, "CONSUMER.NAMES.S")
    assert resp["type"] == T + "consumer_names_response"
    assert (resp["total"], resp["offset"], resp["limit"]) == (3, 0, 1024)
    assert sorted(resp["consumers"]) == ["a", "b", "c"]
    resp = await api(nc, "CONSUMER.NAMES.S", {"offset": 1})
    assert (resp["total"], resp["offset"], len(resp["consumers"])) == (3, 1, 2)
    resp = await api(nc, "CONSUMER.LIST.S", {"offset": 2})
    assert resp["type"] == T + "consumer_list_response"
    assert (resp["total"], resp["offset"], resp["limit"]) == (3, 2, 256)
    assert len(resp["consumers"]) == 1
    assert resp["consumers"][0]["stream_name"] == "S"
    assert {c.name for c in await js.consumers_info("S")} == {"a", "b", "c"}
    code, err_code, _ = error(await api(nc, "CONSUMER.NAMES.S", b"{bad"))
    assert (code, err_code) == (400, 10025)
    assert await js.delete_consumer("S", "b")
    assert error(await api(nc, "CONSUMER.DELETE.S.b")) == (404, 10014, "consumer not found")
    assert sorted((await api(nc, "CONSUMER.NAMES.S"))["consumers"]) == ["a", "c"]
    with pytest.raises(NotFoundError):
        await js.consumer_info("S", "b")


async def test_list_pages(nc: Client, js: JetStreamContext) -> None:
    await stream(js)
    names = [f"c{i:03d}" for i in range(260)]
    replies = await asyncio.gather(
        *(api(nc, f"CONSUMER.CREATE.S.{n}", create(n, durable_name=n)) for n in names)
    )
    assert all("error" not in r for r in replies)
    first = await api(nc, "CONSUMER.LIST.S")
    assert (first["total"], first["offset"], first["limit"]) == (260, 0, 256)
    assert len(first["consumers"]) == 256
    second = await api(nc, "CONSUMER.LIST.S", {"offset": 256})
    assert (second["total"], second["offset"], len(second["consumers"])) == (260, 256, 4)
    listed = [c["name"] for c in first["consumers"] + second["consumers"]]
    assert sorted(listed) == names
    # nats-py asks for one page at a time.
    assert len(await js.consumers_info("S")) == 256
    assert len(await js.consumers_info("S", offset=256)) == 4
    resp = await api(nc, "CONSUMER.NAMES.S")
    assert (resp["total"], len(resp["consumers"])) == (260, 260)


async def test_consumers_go_with_their_stream(nc: Client, js: JetStreamContext) -> None:
    await stream(js)
    await js.add_consumer("S", ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT))
    await js.delete_stream("S")
    await stream(js)
    assert (await api(nc, "CONSUMER.NAMES.S"))["total"] == 0
    with pytest.raises(NotFoundError):
        await js.consumer_info("S", "d")


# -- pause and resume ---------------------------------------------------------------------------


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


async def test_pause_then_deliver_after(nc: Client, js: JetStreamContext) -> None:
    await stream(js)
    await js.add_consumer("S", ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT))
    await js.publish("s.a", b"x")
    until = time.time() + 1.2
    resp = await api(nc, "CONSUMER.PAUSE.S.d", {"pause_until": rfc3339(until)})
    assert resp["type"] == T + "consumer_pause_response"
    assert resp["paused"] is True
    assert 0 < resp["pause_remaining"] <= 1.2e9
    paused_until = datetime.fromisoformat(resp["pause_until"].replace("Z", "+00:00"))
    assert abs(paused_until.timestamp() - until) < 1e-3
    info = await api(nc, "CONSUMER.INFO.S.d")
    assert info["paused"] is True and info["pause_remaining"] > 0
    assert info["config"]["pause_until"] == resp["pause_until"]
    sub = await js.pull_subscribe_bind("d", "S")
    with pytest.raises(TimeoutError):
        await sub.fetch(1, timeout=0.5)
    assert (await js.consumer_info("S", "d")).num_pending == 1
    (msg,) = await sub.fetch(1, timeout=3)
    assert msg.data == b"x"
    assert time.time() >= until - 0.05
    info = await api(nc, "CONSUMER.INFO.S.d")
    assert "paused" not in info and "pause_remaining" not in info


async def test_resume_and_pauses_in_the_past(nc: Client, js: JetStreamContext) -> None:
    await stream(js)
    await js.add_consumer("S", ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT))
    resp = await api(nc, "CONSUMER.PAUSE.S.d", {"pause_until": rfc3339(time.time() + 100)})
    assert resp["paused"] is True
    await js.publish("s.a", b"x")
    sub = await js.pull_subscribe_bind("d", "S")
    with pytest.raises(TimeoutError):
        await sub.fetch(1, timeout=0.3)
    # An empty body resumes.
    resp = await api(nc, "CONSUMER.PAUSE.S.d")
    assert resp == {
        "type": T + "consumer_pause_response",
        "paused": False,
        "pause_until": "0001-01-01T00:00:00Z",
    }
    info = await api(nc, "CONSUMER.INFO.S.d")
    assert "paused" not in info and "pause_until" not in info["config"]
    (msg,) = await sub.fetch(1, timeout=2)
    assert msg.data == b"x"
    # A time in the past: kept, not paused.
    resp = await api(nc, "CONSUMER.PAUSE.S.d", {"pause_until": "2000-01-01T00:00:00Z"})
    assert resp == {
        "type": T + "consumer_pause_response",
        "paused": False,
        "pause_until": "2000-01-01T00:00:00Z",
    }
    code, err_code, _ = error(await api(nc, "CONSUMER.PAUSE.S.d", b"{bad"))
    assert (code, err_code) == (400, 10025)


async def test_pause_with_nats_py_and_at_creation(nc: Client, js: JetStreamContext) -> None:
    await stream(js)
    await js.add_consumer("S", ConsumerConfig(durable_name="d", ack_policy=AckPolicy.EXPLICIT))
    resp = await js.pause_consumer("S", "d", rfc3339(time.time() + 100))
    assert resp.paused is True
    resp = await js.resume_consumer("S", "d")
    assert resp.paused is False
    # Paused from its creation.
    until = rfc3339(time.time() + 100)
    created = await api(nc, "CONSUMER.CREATE.S.p", create("p", durable_name="p", pause_until=until))
    assert created["paused"] is True and created["pause_remaining"] > 0


# -- inactive consumers -------------------------------------------------------------------------


async def test_inactive_consumers_are_removed(nc: Client, js: JetStreamContext) -> None:
    await stream(js)
    await js.publish("s.a", b"x")
    eph = await js.add_consumer(
        "S", ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, inactive_threshold=1.0)
    )
    durable = await js.add_consumer(
        "S",
        ConsumerConfig(durable_name="dur", ack_policy=AckPolicy.EXPLICIT, inactive_threshold=1.0),
    )
    kept = await js.add_consumer(
        "S", ConsumerConfig(durable_name="kept", ack_policy=AckPolicy.EXPLICIT)
    )
    # Kept active by pulls past its threshold.
    busy = await js.add_consumer(
        "S", ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, inactive_threshold=1.0)
    )
    created = time.monotonic()
    sub = await js.pull_subscribe_bind(busy.name, "S")
    await sub.fetch(1, timeout=1)
    while time.monotonic() - created < 2.5:
        with pytest.raises(TimeoutError):
            await sub.fetch(1, timeout=0.4)
    deadline = time.monotonic() + 5
    while True:
        names = set((await api(nc, "CONSUMER.NAMES.S"))["consumers"] or [])
        if eph.name not in names and durable.name not in names:
            break
        assert time.monotonic() < deadline, names
        await asyncio.sleep(0.1)
    assert time.monotonic() - created >= 1.0
    assert kept.name in names
    assert busy.name in names
    with pytest.raises(NotFoundError):
        await js.consumer_info("S", eph.name)


async def test_next_on_a_removed_consumer_has_no_responders(
    nc: Client, js: JetStreamContext
) -> None:
    await stream(js)
    info = await js.add_consumer("S", ConsumerConfig(ack_policy=AckPolicy.EXPLICIT))
    await js.delete_consumer("S", info.name)
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request(f"$JS.API.CONSUMER.MSG.NEXT.S.{info.name}", b"1", timeout=2)
