"""Configs and infos as nats-server returns them, key by key, for a battery of configs.

Each config is created on an agent and on nats-server with the same raw request; the create
answer, then STREAM.INFO or CONSUMER.INFO after messages were published (and, for consumers,
delivered and acknowledged), must hold the same keys with the same values. Only what two
servers cannot share is blanked (tests/support/sidebyside.py `VARYING`: creation and activity
times, a pause's remaining time, server names, ids, versions, clusters and API levels).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import nats
import pytest

from support.servers import Server
from support.sidebyside import SideBySide, assert_same, connected_side_by_side, running_side_by_side


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    with running_side_by_side(tmp_path_factory.mktemp("infos")) as pair:
        yield pair


@pytest.fixture
async def both(servers: tuple[Server, Server]) -> AsyncIterator[SideBySide]:
    async with connected_side_by_side(servers) as pair:
        yield pair


_names = itertools.count(1)

STREAMS: list[dict[str, Any]] = [
    {},
    {"storage": "memory"},
    {"description": "d", "metadata": {"team": "a", "tier": "b"}},
    {"max_msgs": 3, "max_bytes": 1_000_000, "max_age": 3_600_000_000_000},
    {"max_msgs_per_subject": 2, "discard": "new", "discard_new_per_subject": True},
    {"max_msg_size": 1024, "max_consumers": 4},
    {"retention": "workqueue"},
    {"retention": "interest"},
    {"duplicate_window": 5_000_000_000},
    {"duplicate_window": 0},
    {"allow_direct": True, "allow_rollup_hdrs": True},
    {"deny_delete": True, "deny_purge": True},
    {"allow_msg_ttl": True, "subject_delete_marker_ttl": 60_000_000_000},
    {"allow_msg_schedules": True, "allow_msg_ttl": True},
    {"allow_atomic": True},
    {"compression": "s2"},
    {"first_seq": 100},
    {"consumer_limits": {"inactive_threshold": 60_000_000_000, "max_ack_pending": 50}},
    {"num_replicas": 1},
]


@pytest.mark.parametrize("extra", STREAMS, ids=[json.dumps(s) for s in STREAMS])
async def test_stream_create_and_info_match(both: SideBySide, extra: dict[str, Any]) -> None:
    name = f"I{next(_names)}"
    config = {"name": name, "subjects": [f"{name}.>"], **extra}
    created = await both.request(f"STREAM.CREATE.{name}", json.dumps(config).encode())
    assert_same(*created)
    assert "error" not in created[1], created[1]

    async def publish(nc: nats.NATS) -> None:
        js = nc.jetstream(timeout=10)
        for i in range(5):
            await js.publish(f"{name}.{i % 3}", b"x" * (10 * i))

    await both.each(publish)
    assert_same(*await both.request(f"STREAM.INFO.{name}"))
    details = b'{"deleted_details":true,"subjects_filter":">"}'
    assert_same(*await both.request(f"STREAM.INFO.{name}", details))
    await both.request(f"STREAM.DELETE.{name}")


# Consumer configs on a stream {s} of ten messages on {s}.c.0, {s}.c.1, {s}.c.2; "ordered" is
# the config an ordered consumer of nats-py and nats.js sends.
CONSUMERS: dict[str, dict[str, Any]] = {
    "pull": {"durable_name": "{n}", "ack_policy": "explicit"},
    "pull-all-fields": {
        "durable_name": "{n}",
        "description": "d",
        "ack_policy": "explicit",
        "ack_wait": 10_000_000_000,
        "max_deliver": 5,
        "backoff": [1_000_000_000, 2_000_000_000],
        "filter_subject": "{s}.c.1",
        "max_ack_pending": 20,
        "max_waiting": 10,
        "max_batch": 5,
        "max_expires": 30_000_000_000,
        "max_bytes": 1024,
        "inactive_threshold": 60_000_000_000,
        "metadata": {"k": "v"},
        "sample_freq": "50%",
    },
    "filters": {"name": "{n}", "ack_policy": "explicit", "filter_subjects": ["{s}.c.0", "{s}.c.2"]},
    "ephemeral-none": {"name": "{n}", "ack_policy": "none", "deliver_policy": "last"},
    # No name anywhere (the legacy ephemeral create nats-py's js.subscribe makes): the server
    # picks one, and the config keeps none.
    "unnamed": {"ack_policy": "explicit", "deliver_subject": "_P.{n}"},
    "last-per-subject": {
        "durable_name": "{n}",
        "ack_policy": "all",
        "deliver_policy": "last_per_subject",
        "filter_subject": "{s}.c.*",
    },
    "by-start-seq": {
        "durable_name": "{n}",
        "ack_policy": "explicit",
        "deliver_policy": "by_start_sequence",
        "opt_start_seq": 4,
    },
    "by-start-time": {
        "durable_name": "{n}",
        "ack_policy": "explicit",
        "deliver_policy": "by_start_time",
        "opt_start_time": "2000-01-01T00:00:00Z",
    },
    "new": {"durable_name": "{n}", "ack_policy": "explicit", "deliver_policy": "new"},
    "headers-only": {"durable_name": "{n}", "ack_policy": "explicit", "headers_only": True},
    "memory": {"durable_name": "{n}", "ack_policy": "explicit", "mem_storage": True},
    "paused": {
        "durable_name": "{n}",
        "ack_policy": "explicit",
        "pause_until": "2999-01-01T00:00:00Z",
    },
    "push": {"durable_name": "{n}", "deliver_subject": "_P.{n}", "ack_policy": "explicit"},
    "push-group": {
        "durable_name": "{n}",
        "deliver_subject": "_P.{n}",
        "deliver_group": "g",
        "ack_policy": "explicit",
    },
    "push-heartbeat": {
        "durable_name": "{n}",
        "deliver_subject": "_P.{n}",
        "ack_policy": "explicit",
        "flow_control": True,
        "idle_heartbeat": 5_000_000_000,
        "rate_limit_bps": 1_000_000,
    },
    "ordered": {
        "name": "{n}",
        "deliver_subject": "_P.{n}",
        "deliver_policy": "all",
        "ack_policy": "none",
        "max_deliver": 1,
        "replay_policy": "instant",
        "flow_control": True,
        "idle_heartbeat": 5_000_000_000,
        "inactive_threshold": 300_000_000_000,
        "num_replicas": 1,
        "mem_storage": True,
    },
}


def _fill(value: Any, name: str, stream: str) -> Any:
    if isinstance(value, str):
        return value.replace("{n}", name).replace("{s}", stream)
    if isinstance(value, list):
        return [_fill(v, name, stream) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, name, stream) for k, v in value.items()}
    return value


@pytest.mark.parametrize("kind", CONSUMERS)
async def test_consumer_create_and_info_match(both: SideBySide, kind: str) -> None:
    stream = f"C{next(_names)}"
    name = f"K{next(_names)}"
    config = _fill(CONSUMERS[kind], name, stream)

    async def fill(nc: nats.NATS) -> None:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name=stream, subjects=[f"{stream}.c.*"])
        for i in range(10):
            await js.publish(f"{stream}.c.{i % 3}", b"m%d" % i)

    await both.each(fill)
    body = json.dumps({"stream_name": stream, "config": config}).encode()
    unnamed = kind == "unnamed"
    subject = f"CONSUMER.CREATE.{stream}" + ("" if unnamed else f".{name}")
    agent, nats_server = await both.request(subject, body)
    assert "error" not in nats_server, nats_server
    names = (agent["name"], nats_server["name"])
    if unnamed:
        # Each server picks its own name: the only value of these answers that must differ.
        agent["name"] = nats_server["name"]
    assert_same(agent, nats_server)
    if "deliver_subject" not in config:
        await _pull_and_ack(both, stream, name, acks=config["ack_policy"] != "none")
    agent = (await both.request(f"CONSUMER.INFO.{stream}.{names[0]}"))[0]
    nats_server = (await both.request(f"CONSUMER.INFO.{stream}.{names[1]}"))[1]
    if unnamed:
        agent["name"] = nats_server["name"]
    assert_same(agent, nats_server)
    await both.request(f"STREAM.DELETE.{stream}")


async def _pull_and_ack(both: SideBySide, stream: str, name: str, *, acks: bool) -> None:
    """Up to two messages pulled and the first acknowledged (where the consumer takes acks),
    on each server."""

    async def pull(nc: nats.NATS) -> None:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}"
        await nc.publish(subject, b'{"batch":2,"no_wait":true}', reply=inbox)
        got = []
        for _ in range(3):  # two messages, or fewer and a status
            msg = await sub.next_msg(timeout=5)
            if not msg.reply:
                break
            got.append(msg)
            if len(got) == 2:
                break
        if got and acks:
            await nc.request(got[0].reply, b"", timeout=5)
        await sub.unsubscribe()

    await both.each(pull)
