"""Republish (ADR-28) against an agent and nats-server: what a committed message is
republished as, which messages are, headers only, KV buckets with republish (nats-py and
nats.js), and the config rules with nats-server's errors.
tests/e2e/test_republish_agents.py runs subscribers on two agents.
"""

from __future__ import annotations

import re
from typing import Any

import nats.js.api
from nats.aio.client import Client
from nats.aio.msg import Msg

from support.jsapi import api, error
from support.jsclient import run_js
from support.servers import Server

GO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z")


async def add_stream(nc: Client, **config: Any) -> dict[str, Any]:
    return await api(nc, f"STREAM.CREATE.{config['name']}", config)


def origin(msg: Msg) -> tuple[str, str, str, str, str]:
    """(subject, Nats-Stream, Nats-Subject, Nats-Sequence, Nats-Last-Sequence)."""
    h = msg.headers or {}
    return (
        msg.subject,
        h.get("Nats-Stream", ""),
        h.get("Nats-Subject", ""),
        h.get("Nats-Sequence", ""),
        h.get("Nats-Last-Sequence", ""),
    )


async def test_committed_messages_are_republished_with_their_origin(server_nc: Client) -> None:
    created = await add_stream(
        server_nc, name="RP", subjects=["rp.>"], republish={"src": "rp.>", "dest": "out.>"}
    )
    assert created["config"]["republish"] == {"src": "rp.>", "dest": "out.>"}
    sub = await server_nc.subscribe("out.>")
    js = server_nc.jetstream(timeout=10)
    await js.publish("rp.a", b"1")
    await js.publish("rp.b", b"2", headers={"X-Custom": "kept"})
    await js.publish("rp.a", b"3")
    got = [await sub.next_msg(timeout=10) for _ in range(3)]
    assert [origin(m) for m in got] == [
        ("out.a", "RP", "rp.a", "1", "0"),
        ("out.b", "RP", "rp.b", "2", "0"),
        ("out.a", "RP", "rp.a", "3", "1"),
    ]
    assert [m.data for m in got] == [b"1", b"2", b"3"]
    assert got[1].headers is not None and got[1].headers["X-Custom"] == "kept"
    for msg in got:
        assert msg.headers is not None
        assert GO_TIME.fullmatch(msg.headers["Nats-Time-Stamp"]), msg.headers
        assert "Nats-Msg-Size" not in msg.headers


async def test_headers_only_and_a_source_filter(server_nc: Client) -> None:
    await add_stream(
        server_nc,
        name="HO",
        subjects=["h.>"],
        republish={"src": "h.yes.*", "dest": "ho.{{wildcard(1)}}", "headers_only": True},
    )
    sub = await server_nc.subscribe("ho.>")
    js = server_nc.jetstream(timeout=10)
    await js.publish("h.yes.x", b"hello")
    await js.publish("h.no.x", b"not republished")
    await js.publish("h.yes.y", b"hi")
    got = [await sub.next_msg(timeout=10) for _ in range(2)]
    assert [origin(m) for m in got] == [
        ("ho.x", "HO", "h.yes.x", "1", "0"),
        ("ho.y", "HO", "h.yes.y", "3", "0"),
    ]
    assert [(m.data, (m.headers or {}).get("Nats-Msg-Size")) for m in got] == [
        (b"", "5"),
        (b"", "2"),
    ]


async def test_the_transformed_subject_is_what_is_republished(server_nc: Client) -> None:
    # republish `>` to `>` of a stream of one subject with a transform: implicit republish of
    # the transform's destination.
    created = await add_stream(
        server_nc,
        name="IMP",
        subjects=["imp"],
        subject_transform={"src": "imp", "dest": "stored"},
        republish={"src": ">", "dest": ">"},
    )
    assert created["config"]["republish"] == {"src": "stored", "dest": "stored"}
    sub = await server_nc.subscribe("stored")
    await server_nc.jetstream(timeout=10).publish("imp", b"x")
    msg = await sub.next_msg(timeout=10)
    assert origin(msg) == ("stored", "IMP", "stored", "1", "0")


async def test_an_update_turns_republish_on_and_off(server_nc: Client) -> None:
    await add_stream(server_nc, name="UP", subjects=["up.*"])
    sub = await server_nc.subscribe("seen.>")
    js = server_nc.jetstream(timeout=10)
    await js.publish("up.before", b"")
    on = {"name": "UP", "subjects": ["up.*"], "republish": {"dest": "seen.>"}}
    assert "error" not in await api(server_nc, "STREAM.UPDATE.UP", on)
    await js.publish("up.on", b"")
    assert origin(await sub.next_msg(timeout=10))[:4] == ("seen.up.on", "UP", "up.on", "2")
    off = {"name": "UP", "subjects": ["up.*"]}
    assert "error" not in await api(server_nc, "STREAM.UPDATE.UP", off)
    await js.publish("up.off", b"")
    # A republished message of the next stream proves the one of up.off would have come.
    created = await add_stream(
        server_nc, name="NEXT", subjects=["next"], republish={"src": "next", "dest": "seen.next"}
    )
    assert "error" not in created, created
    await js.publish("next", b"")
    assert (await sub.next_msg(timeout=10)).subject == "seen.next"


async def test_kv_republish(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    kv = await js.create_key_value(
        bucket="KVRP", republish=nats.js.api.RePublish(src=">", dest="bar.>")
    )
    sub = await server_nc.subscribe("bar.>")
    await kv.put("hello.world", b"Hello World!")
    msg = await sub.next_msg(timeout=10)
    assert (msg.subject, msg.data) == ("bar.$KV.KVRP.hello.world", b"Hello World!")
    assert msg.headers is not None and "Nats-Msg-Size" not in msg.headers
    # A history of one: the key's previous revision is gone, and still named.
    await kv.put("hello.world", b"again")
    msg = await sub.next_msg(timeout=10)
    assert msg.headers is not None
    assert (msg.headers["Nats-Sequence"], msg.headers["Nats-Last-Sequence"]) == ("2", "1")
    kv = await js.create_key_value(
        bucket="KVHO",
        republish=nats.js.api.RePublish(src=">", dest="quux.>", headers_only=True),
    )
    sub = await server_nc.subscribe("quux.>")
    await kv.put("hello.world", b"Hello World!")
    msg = await sub.next_msg(timeout=10)
    assert msg.data == b""
    assert msg.headers is not None
    assert [msg.headers[k] for k in ("Nats-Sequence", "Nats-Msg-Size", "Nats-Stream")] == [
        "1",
        "12",
        "KV_KVHO",
    ]


# (subjects, republish, the config's republish as answered, or the refusal).
CONFIGS: list[tuple[list[str], dict[str, Any], Any]] = [
    (["c1.>"], {"dest": "b1.>"}, {"src": ">", "dest": "b1.>"}),
    (["c2.>"], {"src": "c2.>", "dest": ""}, {"src": "c2.>", "dest": ""}),
    (["c3.>"], {"src": "", "dest": ""}, {"src": ">", "dest": ""}),
    (
        ["c4.>"],
        {"src": "x.>", "dest": "b4.>", "headers_only": True},
        {"src": "x.>", "dest": "b4.>", "headers_only": True},
    ),
    (
        ["c5.>"],
        {"src": "c5.*", "dest": "b5.{{left(1,1)}}"},
        {"src": "c5.*", "dest": "b5.{{left(1,1)}}"},
    ),
    (
        ["c6.>"],
        {"src": ">", "dest": "c6.b"},
        (500, 10052, "stream configuration for republish destination forms a cycle"),
    ),
    (
        ["c7.*"],
        {"src": ">", "dest": ">"},
        (500, 10052, "stream configuration for republish destination forms a cycle"),
    ),
    (
        ["c8.>"],
        {"src": "c8.*", "dest": "b8.$2"},
        (
            500,
            10052,
            "stream configuration for republish with transform from 'c8.*' to 'b8.$2' not valid",
        ),
    ),
    (
        ["c9.>"],
        {"src": "c9.*", "dest": "b9.*"},
        (
            500,
            10052,
            "stream configuration for republish with transform from 'c9.*' to 'b9.*' not valid",
        ),
    ),
    (
        ["c10.>"],
        {"src": "c10..b", "dest": "b10"},
        (
            500,
            10052,
            "stream configuration for republish with transform from 'c10..b' to 'b10' not valid",
        ),
    ),
    (
        ["c11.>"],
        {"src": "c11.*", "dest": "b11.{{foo(1)}}"},
        (
            500,
            10052,
            "stream configuration for republish with transform from 'c11.*' to"
            " 'b11.{{foo(1)}}' not valid",
        ),
    ),
]


async def test_republish_configs_as_nats_server_takes_them(server_nc: Client) -> None:
    answers = []
    for n, (subjects, republish, _) in enumerate(CONFIGS):
        resp = await add_stream(server_nc, name=f"C{n}", subjects=subjects, republish=republish)
        answers.append(error(resp) if "error" in resp else resp["config"]["republish"])
    assert answers == [expected for *_, expected in CONFIGS]


async def test_nats_js_republish_and_kv_republish(server: Server) -> None:
    run = await run_js("republish_client.mjs", server.url, server_log=server.log)
    assert run.steps == ["connect", "stream republish", "kv republish"]
