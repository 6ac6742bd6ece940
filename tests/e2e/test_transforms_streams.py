"""A stream's `subject_transform`, against an agent and nats-server: the stored subject is the
mapped one (for lone publishes, runs of publishes, atomic batches and nats.js), and a bad
mapping is refused with nats-server's error code and text.
"""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client

from support.jsapi import api, error
from support.jsclient import run_js
from support.servers import Server


async def add_stream(nc: Client, **config: Any) -> dict[str, Any]:
    return await api(nc, f"STREAM.CREATE.{config['name']}", config)


async def test_messages_are_stored_under_the_mapped_subject(server_nc: Client) -> None:
    created = await add_stream(
        server_nc,
        name="T",
        subjects=["orders.>"],
        subject_transform={"src": "orders.*.*", "dest": "o.$2.{{wildcard(1)}}"},
    )
    assert created["config"]["subject_transform"] == {
        "src": "orders.*.*",
        "dest": "o.$2.{{wildcard(1)}}",
    }
    js = server_nc.jetstream(timeout=10)
    ack = await js.publish("orders.eu.42", b"one")
    assert (ack.stream, ack.seq) == ("T", 1)
    # A run of plain publishes, as one PUB after another.
    for n in range(3):
        await server_nc.publish("orders.us.7", str(n).encode())
    await server_nc.flush()
    # Not matched by the transform's source: stored as published.
    await js.publish("orders.eu.42.extra", b"two")
    stored = []
    for seq in range(1, 6):
        msg = await js.get_msg("T", seq)
        stored.append((msg.subject, msg.data))
    assert stored == [
        ("o.42.eu", b"one"),
        ("o.7.us", b"0"),
        ("o.7.us", b"1"),
        ("o.7.us", b"2"),
        ("orders.eu.42.extra", b"two"),
    ]
    # Filters and per-subject state see the mapped subject.
    info = await api(server_nc, "STREAM.INFO.T", {"subjects_filter": ">"})
    assert info["state"]["subjects"] == {"o.42.eu": 1, "o.7.us": 3, "orders.eu.42.extra": 1}
    last = await js.get_last_msg("T", "o.7.us")
    assert (last.seq, last.data) == (4, b"2")
    sub = await js.pull_subscribe("o.*.eu", durable="EU", stream="T")
    got = await sub.fetch(1, timeout=10)
    assert [(m.subject, m.data) for m in got] == [("o.42.eu", b"one")]


async def test_expected_last_subject_sequence_is_of_the_mapped_subject(
    server_nc: Client,
) -> None:
    await add_stream(
        server_nc,
        name="T",
        subjects=["in.*"],
        subject_transform={"src": "in.*", "dest": "kept.{{partition(2,1)}}"},
    )
    js = server_nc.jetstream(timeout=10)
    first = await js.publish("in.a", b"1")
    resp = await server_nc.request(
        "in.a", b"2", headers={"Nats-Expected-Last-Subject-Sequence": str(first.seq)}
    )
    assert b'"seq":2' in resp.data
    msg = await js.get_msg("T", 2)
    assert msg.subject == (await js.get_msg("T", 1)).subject


async def test_a_transform_can_be_added_and_changed_by_an_update(server_nc: Client) -> None:
    await add_stream(server_nc, name="T", subjects=["u.*"])
    js = server_nc.jetstream(timeout=10)
    await js.publish("u.a", b"")
    updated = await api(
        server_nc,
        "STREAM.UPDATE.T",
        {"name": "T", "subjects": ["u.*"], "subject_transform": {"src": "u.*", "dest": "v.$1"}},
    )
    assert "error" not in updated, updated
    await js.publish("u.b", b"")
    assert [(await js.get_msg("T", s)).subject for s in (1, 2)] == ["u.a", "v.b"]


# (src, dest, published, stored): every function, and the edges where a careless mapping
# would differ from nats-server's.
MAPPED = [
    ("foo.*", "x.{{partition(-3,1)}}", "foo.abc", "x.440920331"),
    ("foo.*", "x.{{partition(-3)}}", "foo.abc", "x.416896901"),
    ("foo.*.*", "x.{{partition(7,2,1)}}", "foo.ab.cd", "x.4"),
    ("a.>", "x.{{partition(5)}}.>", "a.b.c", "x.1.b.c"),
    ("foo.*", "x.{{split(1,)}}", "foo.abc", "x.a.b.c"),
    ("foo.*", "x.{{split(1,-)}}", "foo.--abc", "x..abc"),
    ("foo.*", "x.$0", "foo.abc", "x.foo"),
    ("foo.*", "x.{{SliceFromLeft(1,2)}}", "foo.abcde", "x.ab.cd.e"),
    ("foo.*", "x.{{sliceFromRight(1,2)}}", "foo.abcde", "x.a.bc.de"),
    ("foo.*", "x.{{right(1,2)}}", "foo.abcde", "x.de"),
    ("foo.*", "x.{{left(1,0)}}", "foo.abc", "x.abc"),
    ("foo.*", "x.{{splitFromRight(1,2)}}", "foo.abcde", "x.abc.de"),
    ("foo.*", "x.{{splitFromLeft(1,2)}}", "foo.abcde", "x.ab.cde"),
    ("foo.*", "x.{{random(1)}}", "foo.abc", "x.0"),
]


async def test_every_mapping_function_maps_as_nats_server(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    stored = []
    for n, (src, dest, published, _) in enumerate(MAPPED):
        name = f"M{n}"
        mapping = {"src": src, "dest": dest}
        created = await add_stream(
            server_nc, name=name, subjects=[src.split(".")[0] + ".>"], subject_transform=mapping
        )
        assert "error" not in created, created
        await js.publish(published, b"")
        stored.append((await js.get_msg(name, 1)).subject)
        await js.delete_stream(name)
    assert stored == [expected for *_, expected in MAPPED]


# (config, (code, err_code, description)) as nats-server answers a stream create.
REFUSED = [
    (
        {"src": "foo..", "dest": "bar"},
        (400, 10155, "stream transform source: invalid subject foo.."),
    ),
    (
        {"src": "foo.*", "dest": "bar.$2"},
        (
            400,
            10156,
            "stream transform: invalid mapping destination: wildcard index out of range in $2: [2]",
        ),
    ),
    (
        {"src": "foo.*", "dest": "bar.{{unknown(1)}}"},
        (
            400,
            10156,
            "stream transform: invalid mapping destination: unknown function in {{unknown(1)}}",
        ),
    ),
    (
        {"src": "foo.*", "dest": "bar.{{wildcard()}}"},
        (
            400,
            10156,
            "stream transform: invalid mapping destination: not enough arguments passed to the"
            " function in {{wildcard()}}",
        ),
    ),
    (
        {"src": "foo.*", "dest": "bar.{{wildcard(1,2)}}"},
        (
            400,
            10156,
            "stream transform: invalid mapping destination: too many arguments passed to the"
            " function in {{wildcard(1,2)}}",
        ),
    ),
    (
        {"src": "foo.*", "dest": "bar.{{partition(x)}}"},
        (
            400,
            10156,
            "stream transform: invalid mapping destination: function argument is invalid or in"
            " the wrong format in {{partition(x)}}",
        ),
    ),
    (
        {"src": "foo.*", "dest": "bar.{{split(1,a b)}}"},
        (
            400,
            10156,
            "stream transform: invalid mapping destination: function argument is invalid or in"
            " the wrong format in {{split(1,a b)}}",
        ),
    ),
    (
        {"src": "foo", "dest": "bar.{{wildcard(1)}}"},
        (
            400,
            10156,
            "stream transform: invalid mapping destination: wildcard index out of range in"
            " {{wildcard(1)}}",
        ),
    ),
    ({"src": "foo.*", "dest": "bar.*"}, (400, 10156, "stream transform: invalid subject")),
    ({"src": "foo.>", "dest": "bar"}, (400, 10156, "stream transform: invalid subject")),
    (
        {"src": "foo.*", "dest": "bar..$1"},
        (400, 10156, "stream transform: invalid mapping destination: invalid transform"),
    ),
    (
        {"src": "foo.*", "dest": "b ar.$1"},
        (400, 10156, "stream transform: invalid mapping destination: invalid transform"),
    ),
]


async def test_bad_mappings_are_refused_as_nats_server_refuses_them(server_nc: Client) -> None:
    answers = []
    for mapping, _ in REFUSED:
        resp = await add_stream(server_nc, name="T", subjects=["foo.>"], subject_transform=mapping)
        answers.append(error(resp))
    assert answers == [expected for _, expected in REFUSED]
    names = await api(server_nc, "STREAM.NAMES")
    assert names["streams"] is None or names["streams"] == []


async def test_nats_js_stores_under_the_mapped_subject(server: Server) -> None:
    run = await run_js("transforms_client.mjs", server.url, server_log=server.log)
    assert run.steps == ["connect", "stream with a transform", "mapped subjects"]
