"""Counter streams (`allow_msg_counter`, ADR-49) against an agent and nats-server: values as
big integers, the stored body and the PubAck's `val`, every refusal with its code, the
config rules, and nats.js. tests/e2e/test_counters_agents.py increments from many agents.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nats.aio.client import Client

from support.jsapi import api, error
from support.jsclient import run_js
from support.servers import Server

BIG = 123456789012345678901234567890


async def add_stream(nc: Client, **config: Any) -> dict[str, Any]:
    return await api(nc, f"STREAM.CREATE.{config['name']}", config)


async def incr(
    nc: Client, subject: str, by: str, data: bytes = b"", **headers: str
) -> dict[str, Any]:
    """The PubAck (or refusal) of a publish with `Nats-Incr: by` and `headers`."""
    msg = await nc.request(subject, data, headers={"Nats-Incr": by, **headers}, timeout=10)
    return json.loads(msg.data)  # type: ignore[no-any-return]


async def test_increments_add_up_as_big_integers(server_nc: Client) -> None:
    created = await add_stream(server_nc, name="C", subjects=["c.>"], allow_msg_counter=True)
    assert created["config"]["allow_msg_counter"] is True
    acks = [
        await incr(server_nc, "c.hits", "+1"),
        await incr(server_nc, "c.hits", "2"),
        await incr(server_nc, "c.other", "-10"),
        await incr(server_nc, "c.hits", f"+{BIG}"),
        await incr(server_nc, "c.hits", "0"),
        await incr(server_nc, "c.other", f"-{BIG * BIG}"),
    ]
    assert acks == [
        {"stream": "C", "seq": 1, "val": "1"},
        {"stream": "C", "seq": 2, "val": "3"},
        {"stream": "C", "seq": 3, "val": "-10"},
        {"stream": "C", "seq": 4, "val": str(BIG + 3)},
        {"stream": "C", "seq": 5, "val": str(BIG + 3)},
        {"stream": "C", "seq": 6, "val": str(-10 - BIG * BIG)},
    ]
    js = server_nc.jetstream(timeout=10)
    last = await js.get_last_msg("C", "c.hits")
    assert (last.seq, last.data) == (5, b'{"val":"%d"}' % (BIG + 3))
    assert last.headers is not None and last.headers["Nats-Incr"] == "0"
    first = await js.get_msg("C", 1)
    assert first.data == b'{"val":"1"}'
    assert first.headers is not None and first.headers["Nats-Incr"] == "+1"


async def test_a_purged_subject_counts_from_zero(server_nc: Client) -> None:
    await add_stream(server_nc, name="C", subjects=["c.>"], allow_msg_counter=True)
    await incr(server_nc, "c.a", "+5")
    await incr(server_nc, "c.b", "+7")
    purged = await api(server_nc, "STREAM.PURGE.C", {"filter": "c.a"})
    assert purged["success"] is True
    assert (await incr(server_nc, "c.a", "+1"))["val"] == "1"
    assert (await incr(server_nc, "c.b", "+1"))["val"] == "8"


async def test_a_msg_id_is_allowed_and_deduplicates(server_nc: Client) -> None:
    await add_stream(server_nc, name="C", subjects=["c.>"], allow_msg_counter=True)
    first = await incr(server_nc, "c.a", "+5", **{"Nats-Msg-Id": "one"})
    again = await incr(server_nc, "c.a", "+5", **{"Nats-Msg-Id": "one"})
    assert first == {"stream": "C", "seq": 1, "val": "5"}
    assert again["seq"] == 1 and again.get("duplicate") is True
    assert (await incr(server_nc, "c.a", "+1"))["val"] == "6"


async def test_refused_increments(server_nc: Client) -> None:
    await add_stream(server_nc, name="C", subjects=["c.>"], allow_msg_counter=True)
    await add_stream(server_nc, name="PLAIN", subjects=["p.>"])
    invalid = (400, 10171, "message counter increment is invalid")
    refusals = [
        (
            await incr(server_nc, "c.a", "+1", data=b"x"),
            (400, 10170, "message counter has payload"),
        ),
        (await incr(server_nc, "c.a", "one"), invalid),
        (await incr(server_nc, "c.a", "1.5"), invalid),
        (await incr(server_nc, "c.a", "+"), invalid),
        (await incr(server_nc, "c.a", "1_000"), invalid),
        (await incr(server_nc, "c.a", "+1", **{"Nats-Expected-Last-Sequence": "0"}), invalid),
        (
            await incr(server_nc, "c.a", "+1", **{"Nats-Expected-Last-Subject-Sequence": "0"}),
            invalid,
        ),
        (await incr(server_nc, "c.a", "+1", **{"Nats-Expected-Stream": "C"}), invalid),
        (await incr(server_nc, "c.a", "+1", **{"Nats-Expected-Last-Msg-Id": "x"}), invalid),
        (await incr(server_nc, "c.a", "+1", **{"Nats-Rollup": "sub"}), invalid),
        (
            await incr(server_nc, "c.a", "+1", **{"Nats-Stream-Source": "O 1 c.a c.a c.a"}),
            (400, 10227, "message stream source header is not allowed"),
        ),
        (await incr(server_nc, "p.a", "+1"), (400, 10168, "message counters is disabled")),
        (await incr(server_nc, "p.a", "x"), invalid),
    ]
    assert [error(resp) for resp, _ in refusals] == [expected for _, expected in refusals]
    missing = json.loads((await server_nc.request("c.a", b"", timeout=10)).data)
    assert error(missing) == (400, 10169, "message counter increment is missing")
    # A run of plain publishes to a counter stream: each refused, none stored.
    inbox = server_nc.new_inbox()
    sub = await server_nc.subscribe(inbox)
    for _ in range(3):
        await server_nc.publish("c.b", b"", reply=inbox)
    answers = [json.loads((await sub.next_msg(timeout=10)).data) for _ in range(3)]
    assert [error(a)[1] for a in answers] == [10169] * 3
    info = await api(server_nc, "STREAM.INFO.C")
    assert info["state"]["messages"] == 0
    # An empty Nats-Incr is no increment: a plain stream stores it as it is.
    plain = await incr(server_nc, "p.a", "")
    assert plain == {"stream": "PLAIN", "seq": 1}


CONFIG_REFUSALS: list[tuple[dict[str, Any], str]] = [
    ({"discard": "new", "max_msgs": 10}, "counter stream cannot use discard new"),
    ({"allow_msg_ttl": True}, "counter stream cannot use message TTLs"),
    ({"allow_msg_schedules": True}, "counter stream cannot use message schedules"),
    ({"retention": "interest"}, "counter stream can only use limits retention"),
    ({"retention": "workqueue"}, "counter stream can only use limits retention"),
]


async def test_counter_config_rules(server_nc: Client) -> None:
    answers = []
    for extra, _ in CONFIG_REFUSALS:
        resp = await add_stream(
            server_nc, name="BAD", subjects=["bad.>"], allow_msg_counter=True, **extra
        )
        answers.append(error(resp))
    assert answers == [(500, 10052, text) for _, text in CONFIG_REFUSALS]
    unchangeable = "stream configuration update can not change message counter setting"
    await add_stream(server_nc, name="C", subjects=["c.>"], allow_msg_counter=True)
    off = await api(server_nc, "STREAM.UPDATE.C", {"name": "C", "subjects": ["c.>"]})
    assert error(off) == (500, 10052, unchangeable)
    await add_stream(server_nc, name="P", subjects=["p.>"])
    on = {"name": "P", "subjects": ["p.>"], "allow_msg_counter": True}
    assert error(await api(server_nc, "STREAM.UPDATE.P", on)) == (500, 10052, unchangeable)
    # Republish and a subject transform go with counters.
    both = await add_stream(
        server_nc,
        name="CT",
        subjects=["ct.*"],
        allow_msg_counter=True,
        subject_transform={"src": "ct.*", "dest": "count.$1"},
        republish={"src": "count.>", "dest": "seen.>"},
    )
    assert "error" not in both, both
    sub = await server_nc.subscribe("seen.>")
    assert (await incr(server_nc, "ct.x", "+4"))["val"] == "4"
    assert (await incr(server_nc, "ct.x", "+4"))["val"] == "8"
    seen = [await sub.next_msg(timeout=10) for _ in range(2)]
    assert [(m.subject, m.data) for m in seen] == [
        ("seen.x", b'{"val":"4"}'),
        ("seen.x", b'{"val":"8"}'),
    ]


async def test_nats_js_counter(server: Server) -> None:
    run = await run_js("counters_client.mjs", server.url, server_log=server.log)
    assert run.steps == ["connect", "increments", "refused"]


async def test_a_counter_sources_other_counters_and_sums_them(server_nc: Client) -> None:
    # Two regions count hits; a global counter sources both: its value for a subject is the
    # sum of the origins' totals, each origin's last total kept in Nats-Counter-Sources.
    for region in ("EU", "US"):
        await add_stream(
            server_nc, name=region, subjects=[f"{region.lower()}.>"], allow_msg_counter=True
        )
    await incr(server_nc, "eu.hits", "+2")
    await incr(server_nc, "us.hits", "+5")
    await incr(server_nc, "eu.hits", "+3")
    created = await add_stream(
        server_nc,
        name="GLOBAL",
        allow_msg_counter=True,
        sources=[
            # Both origins' subject renamed to one: the global total.
            {"name": "EU", "subject_transforms": [{"src": "eu.hits", "dest": "all.hits"}]},
            {"name": "US", "subject_transforms": [{"src": "us.hits", "dest": "all.hits"}]},
        ],
    )
    assert "error" not in created, created
    js = server_nc.jetstream(timeout=10)

    async def total() -> bytes:
        try:
            return (await js.get_last_msg("GLOBAL", "all.hits")).data or b""
        except Exception:
            return b""

    async def settles_on(value: int) -> None:
        for _ in range(400):
            if await total() == b'{"val":"%d"}' % value:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(await total())

    await settles_on(10)
    await incr(server_nc, "us.hits", "-1")
    await settles_on(9)
    last = await js.get_last_msg("GLOBAL", "all.hits")
    assert last.headers is not None
    sources = json.loads(last.headers["Nats-Counter-Sources"])
    assert sources == {"EU": {"eu.hits": "5"}, "US": {"us.hits": "4"}}
