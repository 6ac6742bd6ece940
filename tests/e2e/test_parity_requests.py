"""API requests decoded as nats-server decodes them: the same raw JSON to an agent and to
nats-server, the same answer back.

nats-server reads every JetStream API request with Go's encoding/json: a `null` leaves a field at
its zero value at any depth, a number must fit the field's Go type (no fraction for an integer,
no sign for an unsigned one), a string is no number and no Duration, keys match without regard
to case, and its strict decoder refuses unknown fields. The newest official Python client
(`nats-jetstream`, `nats-key-value`) sends `null` for every optional field it does not set:
`STREAM_INFO`, `STREAM_NAMES` and `STREAM_MSG_GET` below are its requests as its source writes
them (nats-jetstream/src/nats/jetstream/__init__.py and stream.py), the rest probe Go's rules
one by one. nats-server's answer is the expected one (tests/support/sidebyside.py); only
creation times and server identities are blanked.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import nats
import pytest

from support.servers import Server
from support.sidebyside import (
    SideBySide,
    assert_same,
    connected_side_by_side,
    running_side_by_side,
)

STREAM = "S"


async def _fill(url: str) -> None:
    """Stream S on s.> with five messages on s.0 and s.1, durable consumer C, allow_direct."""
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=10)
    await js.add_stream(name=STREAM, subjects=["s.>"], allow_direct=True)
    for i in range(5):
        await js.publish(f"s.{i % 2}", f"m{i}".encode(), headers={"K": str(i)})
    await js.add_consumer(STREAM, durable_name="C", ack_policy="explicit")
    await nc.close()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    with running_side_by_side(tmp_path_factory.mktemp("parity")) as pair:
        for server in pair:
            asyncio.run(_fill(server.url))
        yield pair


@pytest.fixture
async def both(servers: tuple[Server, Server]) -> AsyncIterator[SideBySide]:
    async with connected_side_by_side(servers) as pair:
        yield pair


# The newest official Python client's requests, with the nulls it sends.
NEW_CLIENT = [
    ("STREAM.INFO.S", {"deleted_details": False, "subjects_filter": None, "offset": None}),
    ("STREAM.INFO.S", {"deleted_details": True, "subjects_filter": None, "offset": None}),
    ("STREAM.INFO.S", {"deleted_details": False, "subjects_filter": "s.*", "offset": None}),
    ("STREAM.NAMES", {"offset": 0, "subject": None}),
    ("STREAM.NAMES", {"offset": 0, "subject": "s.1"}),
    ("STREAM.LIST", {"offset": 0}),
    ("STREAM.MSG.GET.S", {"seq": 2, "last_by_subj": None}),
    ("STREAM.MSG.GET.S", {"seq": None, "last_by_subj": "s.1"}),
    ("STREAM.MSG.GET.S", {"seq": None, "last_by_subj": "s.9"}),
    ("CONSUMER.NAMES.S", {"offset": 0}),
    ("CONSUMER.LIST.S", {"offset": 0}),
]

# Go's rules, one by one, on requests that change nothing.
GO_RULES: list[tuple[str, bytes]] = [
    ("STREAM.INFO.S", b"null"),
    ("STREAM.INFO.S", b""),
    ("STREAM.INFO.S", b"  "),
    ("STREAM.INFO.S", b"[]"),
    ("STREAM.INFO.S", b'"x"'),
    ("STREAM.INFO.S", b'{"deleted_details":null,"subjects_filter":null}'),
    ("STREAM.INFO.S", b'{"Subjects_Filter":">"}'),
    ("STREAM.INFO.S", b'{"SUBJECTS_FILTER":null}'),
    ("STREAM.INFO.S", b'{"offset":1.5,"subjects_filter":">"}'),
    ("STREAM.INFO.S", b'{"offset":1.0,"subjects_filter":">"}'),
    ("STREAM.INFO.S", b'{"offset":1e0,"subjects_filter":">"}'),
    ("STREAM.INFO.S", b'{"offset":-1,"subjects_filter":">"}'),
    ("STREAM.INFO.S", b'{"offset":"1"}'),
    ("STREAM.INFO.S", b'{"offset":99999999999999999999}'),
    ("STREAM.INFO.S", b'{"deleted_details":"true"}'),
    ("STREAM.INFO.S", b'{"deleted_details":1}'),
    ("STREAM.INFO.S", b'{"subjects_filter":5}'),
    ("STREAM.INFO.S", b'{"subjects_filter":["s.1"]}'),
    ("STREAM.INFO.S", b'{"subjects_filter":{}}'),
    ("STREAM.INFO.S", b'{"offset":0} {"offset":null}'),
    ("STREAM.INFO.S", b'{"offset":0'),
    ("STREAM.INFO.S", b'{"offset":0,}'),
    ("STREAM.INFO.S", b'{"subjects_filter":"\\u0073.1"}'),
    ("STREAM.INFO.S", b'{"offset":-0}'),
    ("STREAM.NAMES", b'{"offset":null,"subject":null}'),
    ("STREAM.NAMES", b"null"),
    ("STREAM.NAMES", b'{"offset":2.5}'),
    ("STREAM.NAMES", b'{"offset":-3}'),
    ("STREAM.NAMES", b'{"subject":null,"offset":9223372036854775808}'),
    ("STREAM.NAMES", b'{"subject":true}'),
    ("STREAM.LIST", b'{"offset":null,"subject":null}'),
    ("STREAM.MSG.GET.S", b'{"seq":null,"last_by_subj":null}'),
    ("STREAM.MSG.GET.S", b'{"seq":null,"next_by_subj":"s.1"}'),
    ("STREAM.MSG.GET.S", b'{"seq":1,"next_by_subj":null,"batch":null,"max_bytes":null}'),
    ("STREAM.MSG.GET.S", b'{"seq":2.0}'),
    ("STREAM.MSG.GET.S", b'{"seq":2.5}'),
    ("STREAM.MSG.GET.S", b'{"seq":-1}'),
    ("STREAM.MSG.GET.S", b'{"seq":"2"}'),
    ("STREAM.MSG.GET.S", b'{"seq":1e1}'),
    ("STREAM.MSG.GET.S", b'{"seq":18446744073709551616}'),
    ("STREAM.MSG.GET.S", b'{"SEQ":3}'),
    ("STREAM.MSG.GET.S", b'{"last_by_subj":"s.0","up_to_seq":null,"up_to_time":null}'),
    ("STREAM.MSG.GET.S", b'{"last_by_subj":"s.0","up_to_time":"2000-01-01T00:00:00Z"}'),
    ("STREAM.MSG.GET.S", b'{"last_by_subj":"s.0","up_to_time":"yesterday"}'),
    ("STREAM.MSG.GET.S", b'{"seq":1,"start_time":null}'),
    ("STREAM.MSG.DELETE.S", b'{"seq":null}'),
    ("STREAM.MSG.DELETE.S", b'{"seq":99,"no_erase":null}'),
    ("CONSUMER.INFO.S.C", b""),
    ("CONSUMER.INFO.S.C", b"null"),
    ("CONSUMER.INFO.S.C", b"{}"),
    ("CONSUMER.NAMES.S", b'{"offset":null}'),
    ("CONSUMER.NAMES.S", b"null"),
    ("CONSUMER.LIST.S", b'{"offset":null}'),
    ("CONSUMER.PAUSE.S.C", b'{"pause_until":"yesterday"}'),
    ("CONSUMER.PAUSE.S.C", b'{"pause_until":5}'),
    ("CONSUMER.PAUSE.S.C", b'{"pause_until":null}'),
    ("CONSUMER.PAUSE.S.C", b"null"),
    ("CONSUMER.DELETE.S.NOPE", b"null"),
    ("CONSUMER.DELETE.S.NOPE", b"{}"),
    ("STREAM.DELETE.NOPE", b"null"),
    ("STREAM.DELETE.NOPE", b'{"x":1}'),
    (
        "STREAM.UPDATE.S",
        b'{"name":"S","subjects":["s.>"],"allow_direct":true,"max_age":null,'
        b'"metadata":null,"placement":null,"consumer_limits":{"max_ack_pending":null}}',
    ),
    ("STREAM.UPDATE.S", b'{"name":"S","subjects":["s.>"],"allow_direct":true,"max_age":"1h"}'),
    ("STREAM.UPDATE.S", b'{"name":null,"subjects":["s.>"]}'),
    ("STREAM.PURGE.NOPE", b'{"filter":null}'),
    ("INFO", b"null"),
    ("INFO", b"{}"),
]

_CASES = [(s, json.dumps(b).encode()) for s, b in NEW_CLIENT] + GO_RULES


@pytest.mark.parametrize(("subject", "body"), _CASES, ids=[f"{s} {b!r}" for s, b in _CASES])
async def test_read_request_is_answered_as_nats_server_answers(
    both: SideBySide, subject: str, body: bytes
) -> None:
    agent, nats_server = await both.request(subject, body)
    assert_same(agent, nats_server)
    # Reading changed nothing on either server.
    agent_after, nats_server_after = await both.request(f"STREAM.INFO.{STREAM}")
    assert_same(agent_after["state"], nats_server_after["state"])


_names = itertools.count(1)


# Stream configs: nulls at every depth, Go's numbers and Durations; {n} is a fresh name.
STREAM_CONFIGS: list[str] = [
    '{"name":"{n}","subjects":["{n}.>"],"placement":null,"sources":null,"mirror":null,'
    '"metadata":null,"max_age":null,"max_msgs":null,"duplicate_window":null,"republish":null,'
    '"subject_transform":null,"consumer_limits":null,"description":null}',
    '{"name":"{n}","subjects":null}',
    '{"name":"{n}","subjects":["{n}"],"max_msgs":10.0}',
    '{"name":"{n}","subjects":["{n}"],"max_msgs":10.5}',
    '{"name":"{n}","subjects":["{n}"],"max_age":"1h"}',
    '{"name":"{n}","subjects":["{n}"],"max_age":1.5e9}',
    '{"name":"{n}","subjects":["{n}"],"max_msg_size":4294967296}',
    '{"name":"{n}","subjects":["{n}"],"num_replicas":null}',
    '{"name":"{n}","subjects":["{n}"],"storage":null}',
    '{"name":"{n}","subjects":["{n}"],"retention":null}',
    '{"name":"{n}","subjects":["{n}"],"discard":null}',
    '{"name":"{n}","subjects":["{n}"],"compression":null}',
    '{"name":"{n}","subjects":["{n}"],"storage":"MEMORY"}',
    '{"name":"{n}","subjects":["{n}"],"consumer_limits":{"inactive_threshold":null,'
    '"max_ack_pending":null}}',
    '{"name":"{n}","subjects":["{n}"],"placement":{"cluster":null,"tags":null}}',
    '{"name":"{n}","subjects":["{n}"],"metadata":{"a":null}}',
    '{"name":"{n}","subjects":["{n}",null]}',
    '{"name":"{n}","subjects":["{n}"],"subject_transform":{"src":null,"dest":null}}',
    '{"name":"{n}","subjects":["{n}"],"mirror_direct":true}',
    '{"name":"{n}","Subjects":["{n}"],"MAX_MSGS":3}',
    '{"name":"{n}","subjects":["{n}"],"max_bytes":-1,"max_msgs_per_subject":null}',
]


@pytest.mark.parametrize("config", STREAM_CONFIGS)
async def test_stream_create_is_answered_as_nats_server_answers(
    both: SideBySide, config: str
) -> None:
    name = f"N{next(_names)}"
    body = config.replace("{n}", name).encode()
    agent, nats_server = await both.request(f"STREAM.CREATE.{name}", body)
    assert_same(agent, nats_server)
    if "error" not in nats_server:
        await both.request(f"STREAM.DELETE.{name}")


# Consumer configs on stream S: {n} is a fresh durable name.
CONSUMER_CONFIGS: list[str] = [
    '{"stream_name":"S","config":{"durable_name":"{n}","ack_policy":"explicit",'
    '"deliver_policy":"all","filter_subject":null,"filter_subjects":null,"backoff":null,'
    '"metadata":null,"max_deliver":null,"ack_wait":null,"description":null,'
    '"sample_freq":null,"inactive_threshold":null,"pause_until":null}}',
    '{"stream_name":"S","config":{"durable_name":"{n}","ack_policy":null}}',
    '{"stream_name":"S","config":{"durable_name":"{n}","deliver_policy":null}}',
    '{"stream_name":"S","config":{"durable_name":"{n}","replay_policy":null}}',
    '{"stream_name":"S","config":{"durable_name":"{n}","ack_wait":"30s"}}',
    '{"stream_name":"S","config":{"durable_name":"{n}","ack_wait":1.5e10}}',
    '{"stream_name":"S","config":{"durable_name":"{n}","ack_wait":2.5}}',
    '{"stream_name":"S","config":{"durable_name":"{n}","max_deliver":-1}}',
    '{"stream_name":"S","config":{"durable_name":"{n}","max_deliver":3.0}}',
    '{"stream_name":"S","config":{"durable_name":"{n}","opt_start_seq":-2,'
    '"deliver_policy":"by_start_sequence"}}',
    '{"stream_name":"S","config":{"durable_name":"{n}","backoff":[1000000000,null]}}',
    '{"stream_name":"S","config":{"durable_name":"{n}","opt_start_time":null}}',
    '{"stream_name":"S","config":{"durable_name":"{n}","deliver_policy":"by_start_time",'
    '"opt_start_time":"2020-01-01T00:00:00+02:00"}}',
    '{"stream_name":null,"config":{"durable_name":"{n}"}}',
    '{"stream_name":"S","config":null}',
    '{"stream_name":"S","config":{"durable_name":"{n}"},"action":null}',
    '{"stream_name":"S","config":{"durable_name":"{n}"},"pedantic":null}',
    '{"stream_name":"S","CONFIG":{"Durable_Name":"{n}","ACK_POLICY":"none"}}',
    '{"stream_name":"S","config":{"name":"{n}","mem_storage":null,"num_replicas":null,'
    '"headers_only":null,"flow_control":null,"idle_heartbeat":null}}',
]


@pytest.mark.parametrize("config", CONSUMER_CONFIGS)
async def test_consumer_create_is_answered_as_nats_server_answers(
    both: SideBySide, config: str
) -> None:
    name = f"D{next(_names)}"
    body = config.replace("{n}", name).encode()
    agent, nats_server = await both.request(f"CONSUMER.CREATE.S.{name}", body)
    assert_same(agent, nats_server)
    if "error" not in nats_server:
        await both.request(f"CONSUMER.DELETE.S.{name}")


# Purges with nulls, each on a fresh stream of four messages on p.a and p.b.
PURGES = [
    b'{"filter":null,"seq":null,"keep":null}',
    b'{"filter":"{n}.a","seq":null,"keep":null}',
    b'{"filter":null,"keep":1}',
    b'{"seq":3,"keep":null}',
    b'{"keep":1.5}',
    b'{"seq":-1}',
    b"null",
]


@pytest.mark.parametrize("body", PURGES)
async def test_purge_is_answered_and_done_as_nats_server_does(
    both: SideBySide, body: bytes
) -> None:
    name = f"P{next(_names)}"

    async def fill(nc: nats.NATS) -> None:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name=name, subjects=[f"{name}.*"])
        for subject in ("a", "b", "a", "b"):
            await js.publish(f"{name}.{subject}", b"x")

    await both.each(fill)
    agent, nats_server = await both.request(
        f"STREAM.PURGE.{name}", body.replace(b"{n}", name.encode())
    )
    assert agent == nats_server
    agent_info, nats_server_info = await both.request(f"STREAM.INFO.{name}")
    assert_same(agent_info["state"], nats_server_info["state"])


def _message(msg: Any) -> tuple[str, bytes, dict[str, str]]:
    headers = {k: v for k, v in (msg.headers or {}).items() if k != "Nats-Time-Stamp"}
    return msg.subject if not msg.subject.startswith("_INBOX") else "", msg.data, headers


# Direct gets and pull requests are read with json.Unmarshal: nulls and Go's numbers too.
DIRECT = [
    b'{"seq":2,"last_by_subj":null}',
    b'{"seq":null,"last_by_subj":"s.1"}',
    b'{"seq":null,"next_by_subj":"s.1","batch":null}',
    b'{"seq":1.0}',
    b'{"seq":1.5}',
    b'{"seq":"1"}',
    b"null",
    b'{"multi_last":null,"seq":3}',
]


@pytest.mark.parametrize("body", DIRECT)
async def test_direct_get_is_answered_as_nats_server_answers(both: SideBySide, body: bytes) -> None:
    async def get(nc: nats.NATS) -> tuple[str, bytes, dict[str, str]]:
        return _message(await nc.request(f"$JS.API.DIRECT.GET.{STREAM}", body, timeout=10))

    agent, nats_server = await both.each(get)
    assert agent == nats_server


NEXT = [
    b'{"batch":1,"expires":null,"no_wait":null,"idle_heartbeat":null}',
    b'{"batch":null,"no_wait":true}',
    b'{"batch":1.0,"no_wait":true}',
    b'{"batch":1.5,"no_wait":true}',
    b'{"batch":1,"expires":"1s"}',
    b'{"batch":1,"no_wait":true,"max_bytes":null,"min_pending":null}',
]


@pytest.mark.parametrize("body", NEXT)
async def test_pull_request_is_answered_as_nats_server_answers(
    both: SideBySide, body: bytes
) -> None:
    name = f"Q{next(_names)}"

    async def next_message(nc: nats.NATS) -> tuple[str, bytes, dict[str, str]]:
        js = nc.jetstream(timeout=10)
        await js.add_consumer(STREAM, durable_name=name, ack_policy="none")
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        try:
            subject = f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{name}"
            await nc.publish(subject, body, reply=inbox)
            return _message(await sub.next_msg(timeout=5))
        finally:
            await sub.unsubscribe()
            await js.delete_consumer(STREAM, name)

    agent, nats_server = await both.each(next_message)
    assert agent == nats_server
