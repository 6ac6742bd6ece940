"""Edges of the streams and consumers API that client libraries exercise, against an agent and
against nats-server: which responses name a leader, the fields a config renders (TTLs, delete
markers, atomic batches, persist modes), named consumers with every option in the subject form,
pause answers, account info, and `pull_subscribe` creating its consumer.

nats-server writes "_nats.*" metadata (its version and API level) into every config;
InfiniStream writes none, so those keys are left out of the comparison, as in test_consumers.
"""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client

from support.jsapi import api, error

S = 1_000_000_000


def without_nats_metadata(cfg: dict[str, Any]) -> dict[str, Any]:
    cfg = dict(cfg)
    metadata = {k: v for k, v in cfg.pop("metadata", {}).items() if not k.startswith("_nats.")}
    if metadata:
        cfg["metadata"] = metadata
    return cfg


BASE = {
    "retention": "limits",
    "max_consumers": -1,
    "max_msgs": -1,
    "max_bytes": -1,
    "max_age": 0,
    "max_msgs_per_subject": -1,
    "max_msg_size": -1,
    "discard": "old",
    "storage": "file",
    "num_replicas": 1,
    "duplicate_window": 120 * S,
    "compression": "none",
    "allow_direct": False,
    "mirror_direct": False,
    "sealed": False,
    "deny_delete": False,
    "deny_purge": False,
    "allow_rollup_hdrs": False,
    "consumer_limits": {},
    "allow_msg_ttl": False,
}


async def test_which_stream_responses_name_a_leader(server_nc: Client) -> None:
    created = await api(server_nc, "STREAM.CREATE.A", {"name": "A", "subjects": ["a.>"]})
    assert "cluster" not in created
    assert sorted(created) == ["config", "created", "did_create", "state", "ts", "type"]
    info = await api(server_nc, "STREAM.INFO.A")
    assert sorted(info) == [
        "cluster",
        "config",
        "created",
        "limit",
        "offset",
        "state",
        "total",
        "ts",
        "type",
    ]
    assert set(info["cluster"]) == {"leader"}
    updated = await api(
        server_nc, "STREAM.UPDATE.A", {"name": "A", "subjects": ["a.>"], "max_msgs": 5}
    )
    assert sorted(updated) == ["config", "created", "state", "ts", "type"]
    listed = await api(server_nc, "STREAM.LIST", {})
    assert "cluster" not in listed["streams"][0]


async def test_configs_render_ttls_markers_batches_and_persist_modes(server_nc: Client) -> None:
    body = {
        "name": "T",
        "subjects": ["t.>"],
        "subject_delete_marker_ttl": 5 * S,
        "allow_atomic": True,
        "persist_mode": "default",
        "metadata": {"k": "v"},
    }
    cfg = without_nats_metadata((await api(server_nc, "STREAM.CREATE.T", body))["config"])
    assert cfg == {
        **BASE,
        "name": "T",
        "subjects": ["t.>"],
        "allow_rollup_hdrs": True,
        "allow_msg_ttl": True,
        "subject_delete_marker_ttl": 5 * S,
        "allow_atomic": True,
        "metadata": {"k": "v"},
    }
    body = {"name": "P", "subjects": ["p.>"], "persist_mode": "async"}
    cfg = without_nats_metadata((await api(server_nc, "STREAM.CREATE.P", body))["config"])
    assert cfg == {**BASE, "name": "P", "subjects": ["p.>"], "persist_mode": "async"}
    resp = await api(server_nc, "STREAM.UPDATE.P", {"name": "P", "subjects": ["p.>"]})
    assert error(resp) == (
        500,
        10052,
        "stream configuration update can not change persist mode",
    )
    memory = {"name": "M", "storage": "memory", "persist_mode": "async"}
    assert error(await api(server_nc, "STREAM.CREATE.M", memory)) == (
        500,
        10052,
        "async persist mode is only supported on file storage",
    )
    both = {"name": "X", "persist_mode": "async", "allow_atomic": True}
    assert error(await api(server_nc, "STREAM.CREATE.X", both)) == (
        500,
        10052,
        "async persist mode is not supported with atomic batch publish",
    )


async def test_a_named_push_consumer_with_every_option(server_nc: Client) -> None:
    await api(server_nc, "STREAM.CREATE.A", {"name": "A", "subjects": ["a.>"]})
    config = {
        "name": "p",
        "ack_policy": "explicit",
        "filter_subject": "a.x",
        "deliver_subject": "dd",
        "deliver_group": "g",
        "flow_control": True,
        "idle_heartbeat": S,
        "rate_limit_bps": 1000,
        "headers_only": True,
        "max_ack_pending": 10,
        "description": "d",
        "metadata": {"k": "v"},
        "backoff": [S, 2 * S],
        "max_deliver": 3,
        "inactive_threshold": 5 * S,
        "sample_freq": "50%",
    }
    resp = await api(server_nc, "CONSUMER.CREATE.A.p.a.x", {"stream_name": "A", "config": config})
    assert "cluster" not in resp
    assert without_nats_metadata(resp["config"]) == {
        **config,
        "deliver_policy": "all",
        "ack_wait": S,
        "replay_policy": "instant",
        "num_replicas": 0,
    }
    assert (resp["name"], resp["num_pending"], resp["num_waiting"]) == ("p", 0, 0)
    info = await api(server_nc, "CONSUMER.INFO.A.p")
    assert "cluster" not in info and "push_bound" not in info
    account = await api(server_nc, "INFO")
    assert (account["streams"], account["consumers"]) == (1, 1)


async def test_pause_answers(server_nc: Client) -> None:
    await api(server_nc, "STREAM.CREATE.A", {"name": "A", "subjects": ["a.>"]})
    await api(
        server_nc,
        "CONSUMER.CREATE.A.c",
        {"stream_name": "A", "config": {"name": "c", "ack_policy": "explicit"}},
    )
    cases: list[tuple[Any, bool, str]] = [
        (b"", False, "0001-01-01T00:00:00Z"),
        ({"pause_until": "2999-01-01T00:00:00Z"}, True, "2999-01-01T00:00:00Z"),
        ({}, False, "0001-01-01T00:00:00Z"),
        ({"pause_until": "2000-01-01T00:00:00Z"}, False, "2000-01-01T00:00:00Z"),
        ({"pause_until": "0001-01-01T00:00:00Z"}, False, "0001-01-01T00:00:00Z"),
    ]
    for body, paused, until in cases:
        resp = await api(server_nc, "CONSUMER.PAUSE.A.c", body)
        assert (resp["paused"], resp["pause_until"]) == (paused, until), body
        assert ("pause_remaining" in resp) == paused
    info = await api(server_nc, "CONSUMER.INFO.A.c")
    assert "paused" not in info and "pause_until" not in info["config"]


async def test_pull_subscribe_creates_its_consumer(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await js.add_stream(name="A", subjects=["a.>"])
    await js.publish("a.x", b"1")
    await js.publish("a.y", b"2")
    sub = await js.pull_subscribe("a.y", durable="puller")
    info = await js.consumer_info("A", "puller")
    assert (info.config.filter_subject, info.config.durable_name) == ("a.y", "puller")
    (msg,) = await sub.fetch(1, timeout=10)
    assert (msg.subject, msg.data) == ("a.y", b"2")
    await msg.ack_sync()
    # An ephemeral one, too.
    eph = await js.pull_subscribe("a.x")
    (msg,) = await eph.fetch(1, timeout=10)
    assert msg.data == b"1"
