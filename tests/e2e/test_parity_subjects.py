"""Subjects stay subjects, side by side with nats-server.

- `$JS.API.>` is a subject like any other: a client subscribed to it sees the API requests
  other clients send, and the requester still gets its answer (nats-server's JetStream is one
  subscriber among others).
- `Nats-Rollup: sub` published on a subject with wildcards (nats-server does not refuse a
  publish subject for them) purges what nats-server's purge with that filter purges.
- A config nats-server refuses gets its error code and text, before anything InfiniStream
  itself does not serve is refused.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from nats.aio.client import Client

from support.sidebyside import SideBySide, assert_same
from support.written import written

_names = itertools.count(1)


async def test_a_subscriber_on_the_api_sees_other_clients_requests(both: SideBySide) -> None:
    async def watch(nc: Client) -> tuple[list[tuple[str, bytes]], dict[str, Any]]:
        # The watcher is a client of its own; `nc` is the requester.
        import nats

        url = f"nats://{nc.connected_url.hostname}:{nc.connected_url.port}"  # type: ignore[union-attr]
        watcher = await nats.connect(url)
        seen = await watcher.subscribe("$JS.API.>")
        await written(watcher)
        answer = await nc.request("$JS.API.STREAM.NAMES", b'{"offset":0}', timeout=10)
        await nc.request("$JS.API.STREAM.INFO.NOPE", b"", timeout=10)
        # Other clients of the same servers (the fixture's own, a test before this one
        # cleaning up) may send API requests too: keep the ones this test sent.
        asked = {"$JS.API.STREAM.NAMES", "$JS.API.STREAM.INFO.NOPE"}
        got: list[tuple[str, bytes]] = []
        while len(got) < len(asked):
            m = await seen.next_msg(timeout=5)
            if m.subject in asked:
                got.append((m.subject, m.data))
        await watcher.close()
        return got, json.loads(answer.data)

    agent, nats_server = await both.each(watch)
    assert (
        agent[0]
        == nats_server[0]
        == [
            ("$JS.API.STREAM.NAMES", b'{"offset":0}'),
            ("$JS.API.STREAM.INFO.NOPE", b""),
        ]
    )
    assert_same(agent[1], nats_server[1])


async def test_rollup_on_a_subject_with_wildcards_purges_what_nats_server_purges(
    both: SideBySide,
) -> None:
    name = f"R{next(_names)}"

    async def run(nc: Client) -> tuple[Any, list[tuple[str, int]]]:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name=name, subjects=[f"{name}.>"], allow_rollup_hdrs=True)
        for subject in ("a", "b", "a.x", "c.y", "b"):
            await js.publish(f"{name}.{subject}", b"v")
        rollup = await nc.request(
            f"{name}.*", b"rolled", timeout=10, headers={"Nats-Rollup": "sub"}
        )
        left = []
        for seq in range(1, 8):
            got = await nc.request(
                f"$JS.API.STREAM.MSG.GET.{name}", json.dumps({"seq": seq}).encode(), timeout=10
            )
            message = json.loads(got.data).get("message")
            if message:
                left.append((message["subject"], message["seq"]))
        return json.loads(rollup.data), left

    agent, nats_server = await both.each(run)
    assert agent == nats_server
    assert_same(*await both.request(f"STREAM.INFO.{name}"))


# Configs nats-server refuses: each gets nats-server's code and text from the agent too.
REFUSED_STREAMS: list[str] = [
    '{"name":"{n}","subjects":["{n}"],"mirror_direct":true}',
    '{"name":"{n}","subjects":["{n}"],"mirror":{"name":"X"}}',
    '{"name":"{n}","mirror":{"name":"{n}"}}',
    '{"name":"{n}","mirror":{"name":"X"},"first_seq":5}',
    '{"name":"{n}","mirror":{"name":"X"},"sources":[{"name":"Y"}]}',
    '{"name":"{n}","sources":[{"name":"Y"},{"name":"Y"}]}',
    '{"name":"{n}","sources":[{"name":"{n}"}]}',
    '{"name":"{n}","sources":[{"name":"a.b"}]}',
    '{"name":"{n}","subjects":["{n}"],"max_msgs_per_subject":1,"discard_new_per_subject":true}',
    '{"name":"{n}","subjects":["{n}.>"],"republish":{"src":">","dest":"{n}.x"}}',
    '{"name":"{n}","subjects":["{n}"],"subject_transform":{"src":"a b","dest":"x"}}',
    '{"name":"{n}","subjects":["{n}"],"placement":{"preferred":"s1"}}',
    '{"name":"{n}","subjects":["{n}"],"allow_msg_counter":true,"discard":"new"}',
    '{"name":"{n}","subjects":["{n}"],"max_age":-5}',
    '{"name":"{n}","subjects":["{n}"],"duplicate_window":1000000000,"max_age":100}',
    '{"name":"{n}","subjects":["{n}"],"num_replicas":6}',
    '{"name":"{n}","subjects":["{n}"],"storage":"disk"}',
    '{"name":"{n}","subjects":["{n}"],"retention":"forever"}',
    '{"name":"{n}","subjects":["$JS.API.>"]}',
    '{"name":"{n}","subjects":["{n}",""]}',
    '{"name":"{n}","subjects":["{n}.*.>","{n}.a.b"]}',
    '{"name":"{n}","subjects":["{n}"],"sealed":true}',
    '{"name":"{n}","subjects":["{n}"],"compression":"lz4"}',
    '{"name":"{n}","subjects":["{n}"],"persist_mode":"sometimes"}',
]


@pytest.mark.parametrize("config", REFUSED_STREAMS)
async def test_refused_stream_configs_get_nats_servers_error(both: SideBySide, config: str) -> None:
    name = f"F{next(_names)}"
    body = config.replace("{n}", name).encode()
    agent, nats_server = await both.request(f"STREAM.CREATE.{name}", body)
    assert "error" in nats_server, nats_server
    assert_same(agent, nats_server)


REFUSED_CONSUMERS: list[str] = [
    '{"durable_name":"{n}","deliver_policy":"by_start_sequence"}',
    '{"durable_name":"{n}","deliver_policy":"all","opt_start_seq":3}',
    '{"durable_name":"{n}","deliver_policy":"by_start_time"}',
    '{"durable_name":"{n}","filter_subject":"{s}.a","filter_subjects":["{s}.b"]}',
    '{"durable_name":"{n}","filter_subjects":["{s}.a","{s}.>"]}',
    '{"durable_name":"{n}","deliver_subject":"x","max_waiting":5}',
    '{"durable_name":"{n}","flow_control":true}',
    '{"durable_name":"{n}","idle_heartbeat":1000000}',
    '{"durable_name":"{n}","deliver_subject":"x","idle_heartbeat":1000}',
    '{"durable_name":"{n}","deliver_policy":"last_per_subject"}',
    '{"durable_name":"{n}","ack_policy":"bogus"}',
    '{"durable_name":"{n}","priority_policy":"pinned_client"}',
    '{"durable_name":"{n}","priority_groups":["bad name!"],"priority_policy":"overflow"}',
    '{"durable_name":"a.b"}',
]


@pytest.mark.parametrize("config", REFUSED_CONSUMERS)
async def test_refused_consumer_configs_get_nats_servers_error(
    both: SideBySide, config: str
) -> None:
    stream = f"G{next(_names)}"
    name = f"D{next(_names)}"
    create = json.dumps({"name": stream, "subjects": [f"{stream}.>"]}).encode()
    await both.request(f"STREAM.CREATE.{stream}", create)
    filled = config.replace("{n}", name).replace("{s}", stream)
    body = f'{{"stream_name":"{stream}","config":{filled}}}'.encode()
    agent, nats_server = await both.request(f"CONSUMER.CREATE.{stream}.{name}", body)
    assert "error" in nats_server, nats_server
    assert_same(agent, nats_server)
    await both.request(f"STREAM.DELETE.{stream}")


# Updates of stream {n} (subjects {n}.>, file storage, limits retention, max_msgs 10) that
# nats-server refuses, or answers as it does.
UPDATES: list[str] = [
    '{"name":"{n}","subjects":["{n}.>"],"storage":"memory"}',
    '{"name":"{n}","subjects":["{n}.>"],"retention":"workqueue"}',
    '{"name":"{n}","subjects":["{n}.>"],"max_msgs":10,"sealed":true,"deny_delete":false}',
    '{"name":"{n}","subjects":["{n}.>"],"max_msgs":10,"deny_delete":true}',
    '{"name":"{n}","subjects":["{n}.>"],"max_msgs":10,"allow_msg_ttl":false}',
    '{"name":"{n}","subjects":["{n}.>"],"max_msgs":10,"first_seq":9}',
    '{"name":"{n}","subjects":["{n}.>"],"max_msgs":10,"first_seq":0}',
    '{"name":"{n}","subjects":["{n}.>"],"max_msgs":10,"allow_atomic":true}',
    '{"name":"{n}","subjects":["{n}.>"],"max_msgs":10,"mirror_direct":true}',
    '{"name":"{n}","subjects":["{n}.>"],"max_msgs":10,"compression":"s2"}',
    '{"name":"{n}","subjects":["{n}.>"],"max_msgs":10,"max_consumers":1}',
    '{"name":"{n}","subjects":["{n}.>"],"max_msgs":10,"description":"new"}',
    '{"name":"other","subjects":["{n}.>"]}',
    '{"name":"{n}","subjects":["{n}.>"],"max_msgs":10,"subject_delete_marker_ttl":5000000000}',
]


@pytest.mark.parametrize("config", UPDATES)
async def test_stream_updates_are_answered_as_nats_server_answers(
    both: SideBySide, config: str
) -> None:
    name = f"U{next(_names)}"
    create = json.dumps({"name": name, "subjects": [f"{name}.>"], "max_msgs": 10})
    assert "error" not in (await both.request(f"STREAM.CREATE.{name}", create.encode()))[1]
    body = config.replace("{n}", name).encode()
    assert_same(*await both.request(f"STREAM.UPDATE.{name}", body))
    assert_same(*await both.request(f"STREAM.INFO.{name}"))
    await both.request(f"STREAM.DELETE.{name}")


# Updates of a durable pull consumer {n} (explicit acks, filter {s}.a, max_deliver 5) on
# stream {s}, each answered as nats-server answers it.
CONSUMER_UPDATES: list[str] = [
    '{"durable_name":"{n}","ack_policy":"explicit","filter_subject":"{s}.b","max_deliver":5}',
    '{"durable_name":"{n}","ack_policy":"none","filter_subject":"{s}.a","max_deliver":5}',
    '{"durable_name":"{n}","ack_policy":"explicit","filter_subject":"{s}.a","max_deliver":5,'
    '"deliver_policy":"new"}',
    '{"durable_name":"{n}","ack_policy":"explicit","filter_subject":"{s}.a","max_deliver":7,'
    '"description":"d","ack_wait":5000000000,"max_ack_pending":3,"metadata":{"a":"b"}}',
    '{"durable_name":"{n}","ack_policy":"explicit","filter_subject":"{s}.a","max_deliver":5,'
    '"deliver_subject":"push.{n}"}',
    '{"durable_name":"{n}","ack_policy":"explicit","filter_subject":"{s}.a","max_deliver":5,'
    '"mem_storage":true}',
    '{"durable_name":"{n}","ack_policy":"explicit","filter_subject":"{s}.a","max_deliver":5,'
    '"replay_policy":"original"}',
    '{"durable_name":"{n}","ack_policy":"explicit","filter_subject":"{s}.a","max_deliver":5,'
    '"headers_only":true}',
    '{"durable_name":"{n}","ack_policy":"explicit","filter_subjects":["{s}.a","{s}.c"],'
    '"max_deliver":5}',
    '{"durable_name":"{n}","ack_policy":"explicit","filter_subject":"{s}.a","max_deliver":5,'
    '"opt_start_seq":3,"deliver_policy":"by_start_sequence"}',
    '{"durable_name":"{n}","ack_policy":"explicit","filter_subject":"{s}.a","max_deliver":5,'
    '"max_waiting":9}',
]


@pytest.mark.parametrize("config", CONSUMER_UPDATES)
@pytest.mark.parametrize("action", ["", "update"])
async def test_consumer_updates_are_answered_as_nats_server_answers(
    both: SideBySide, config: str, action: str
) -> None:
    stream = f"V{next(_names)}"
    name = f"W{next(_names)}"
    create = json.dumps({"name": stream, "subjects": [f"{stream}.>"]}).encode()
    await both.request(f"STREAM.CREATE.{stream}", create)
    first = (
        f'{{"stream_name":"{stream}","config":{{"durable_name":"{name}",'
        f'"ack_policy":"explicit","filter_subject":"{stream}.a","max_deliver":5}}}}'
    )
    created = await both.request(f"CONSUMER.CREATE.{stream}.{name}", first.encode())
    assert "error" not in created[1], created[1]
    filled = config.replace("{n}", name).replace("{s}", stream)
    extra = f',"action":"{action}"' if action else ""
    body = f'{{"stream_name":"{stream}","config":{filled}{extra}}}'.encode()
    assert_same(*await both.request(f"CONSUMER.CREATE.{stream}.{name}", body))
    assert_same(*await both.request(f"CONSUMER.INFO.{stream}.{name}"))
    await both.request(f"STREAM.DELETE.{stream}")
