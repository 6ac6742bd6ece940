"""Key-Value with nats-py, unmodified, against an agent and against nats-server.

Every operation of nats-py's KeyValue: buckets made the way nats-py 2.16 makes them (with
allow_msg_ttl) and the way 2.12 did (without), put/get/create/update/delete/purge, revisions,
keys with filters, history, watch with its options, purge_deletes, per-key TTLs, limit markers
and bucket status. nats.js's KV runs in test_kv_js.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import StreamConfig
from nats.js.errors import (
    KeyDeletedError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoKeysError,
)
from nats.js.kv import KeyValue

from support.servers import Server


async def bucket(js: JetStreamContext, name: str = "B", **kw: Any) -> KeyValue:
    return await js.create_key_value(bucket=name, **kw)


async def updates(watcher: Any, n: int, timeout: float = 10) -> list[Any]:
    return [await watcher.updates(timeout=timeout) for _ in range(n)]


def ops(entries: list[Any]) -> list[tuple[str, bytes | None, str | None]]:
    return [(e.key, e.value, e.operation) for e in entries]


# -- buckets -----------------------------------------------------------------------------------


async def test_a_bucket_as_nats_py_2_16_makes_it(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    kv = await bucket(js, history=5, ttl=3600, max_value_size=1024, description="d")
    info = await js.stream_info("KV_B")
    cfg = info.config
    assert cfg.subjects == ["$KV.B.>"]
    assert (cfg.allow_msg_ttl, cfg.allow_rollup_hdrs, cfg.deny_delete) == (True, True, True)
    assert (cfg.max_msgs_per_subject, cfg.max_age, cfg.max_msg_size) == (5, 3600.0, 1024)
    assert cfg.discard == "new"
    status = await kv.status()
    assert (status.bucket, status.values, status.history, status.ttl) == ("B", 0, 5, 3600.0)


async def test_a_bucket_as_nats_py_2_12_made_it(server_nc: Client) -> None:
    # nats-py before 2.13 sent no allow_msg_ttl: the same stream otherwise.
    js = server_nc.jetstream(timeout=10)
    await js.add_stream(
        StreamConfig(
            name="KV_OLD",
            subjects=["$KV.OLD.>"],
            allow_rollup_hdrs=True,
            deny_delete=True,
            discard="new",
            duplicate_window=120,
            max_msgs_per_subject=1,
            max_msgs=-1,
            max_consumers=-1,
            num_replicas=1,
        )
    )
    kv = await js.key_value("OLD")
    await kv.put("k", b"v")
    assert (await kv.get("k")).value == b"v"
    assert await kv.keys() == ["k"]


async def test_delete_bucket(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await bucket(js)
    assert await js.delete_key_value("B")
    with pytest.raises(nats.js.errors.BucketNotFoundError):
        await js.key_value("B")


# -- values -------------------------------------------------------------------------------------


async def test_put_get_revisions_and_history(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    kv = await bucket(js, history=3)
    assert await kv.put("a", b"1") == 1
    assert await kv.put("b", b"x") == 2
    assert await kv.put("a", b"2") == 3
    entry = await kv.get("a")
    assert (entry.key, entry.value, entry.revision) == ("a", b"2", 3)
    assert (await kv.get("a", revision=1)).value == b"1"
    with pytest.raises(KeyNotFoundError):
        await kv.get("a", revision=2)  # revision 2 is another key's
    with pytest.raises(KeyNotFoundError):
        await kv.get("missing")
    for value in (b"3", b"4"):
        await kv.put("a", value)
    history = await kv.history("a")
    # History 3: the oldest went.
    assert [(e.value, e.revision) for e in history] == [(b"2", 3), (b"3", 4), (b"4", 5)]
    assert [e.delta for e in history] == [2, 1, 0]


async def test_create_update_and_optimistic_concurrency(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    kv = await bucket(js)
    assert await kv.create("k", b"1") == 1
    with pytest.raises(KeyWrongLastSequenceError):
        await kv.create("k", b"again")
    assert await kv.update("k", b"2", last=1) == 2
    with pytest.raises(KeyWrongLastSequenceError):
        await kv.update("k", b"3", last=1)
    # Created again after a delete: the delete marker's revision is the one to follow.
    await kv.delete("k")
    assert await kv.create("k", b"back") == 4
    assert (await kv.get("k")).value == b"back"


async def test_delete_and_purge(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    kv = await bucket(js, history=10)
    for value in (b"1", b"2", b"3"):
        await kv.put("d", value)
        await kv.put("p", value)
    await kv.delete("d")
    with pytest.raises(KeyNotFoundError) as info:
        await kv.get("d")
    assert info.value.op == "DEL"
    # A delete keeps the history, a purge does not.
    assert [e.operation for e in await kv.history("d")] == [None, None, None, "DEL"]
    await kv.purge("p")
    assert ops(await kv.history("p")) == [("p", b"", "PURGE")]
    with pytest.raises(KeyNotFoundError):
        await kv.get("p")
    # A delete with the wrong last revision is refused.
    await kv.put("x", b"1")
    with pytest.raises(nats.js.errors.APIError):
        await kv.delete("x", last=1)
    assert (await kv.get("x")).value == b"1"
    status = await kv.status()
    assert status.values == 3 + 1 + 1 + 1


async def test_keys_with_and_without_filters(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    kv = await bucket(js)
    with pytest.raises(NoKeysError):
        await kv.keys()
    for key in ("users.ann", "users.bob", "orders.1", "gone"):
        await kv.put(key, b"v")
    await kv.delete("gone")
    assert sorted(await kv.keys()) == ["orders.1", "users.ann", "users.bob"]
    assert sorted(await kv.keys(filters=["users"])) == ["users.ann", "users.bob"]


async def test_purge_deletes_keeps_recent_markers_unless_told(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    kv = await bucket(js, history=5)
    await kv.put("a", b"1")
    await kv.put("a", b"2")
    await kv.delete("a")
    await kv.put("b", b"1")
    await kv.purge("b")
    await kv.put("c", b"kept")
    # Markers younger than 30 minutes stay (with nothing before them).
    await kv.purge_deletes()
    assert ops(await kv.history("a")) == [("a", b"", "DEL")]
    assert (await kv.status()).values == 3
    await kv.purge_deletes(olderthan=-1)
    with pytest.raises(NoKeysError):
        await kv.history("a")
    assert await kv.keys() == ["c"]
    assert (await kv.status()).values == 1


# -- watch ------------------------------------------------------------------------------------


async def test_watch_last_values_then_updates(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    kv = await bucket(js, history=5)
    await kv.put("a", b"1")
    await kv.put("a", b"2")
    await kv.put("b", b"1")
    watcher = await kv.watchall()
    first = await updates(watcher, 3)
    assert ops(first[:2]) == [("a", b"2", None), ("b", b"1", None)]
    assert first[2] is None  # the initial values are done
    await kv.put("c", b"new")
    await kv.delete("a")
    await kv.purge("b")
    later = await updates(watcher, 3)
    assert ops(later) == [("c", b"new", None), ("a", b"", "DEL"), ("b", b"", "PURGE")]
    assert [e.revision for e in later] == [4, 5, 6]
    await watcher.stop()


async def test_watch_an_empty_bucket_says_so_first(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    kv = await bucket(js)
    watcher = await kv.watchall()
    assert await watcher.updates(timeout=10) is None
    await kv.put("k", b"v")
    assert ops([await watcher.updates(timeout=10)]) == [("k", b"v", None)]
    await watcher.stop()


async def test_watch_options(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    kv = await bucket(js, history=5)
    await kv.put("users.ann", b"1")
    await kv.put("users.ann", b"2")
    await kv.put("users.bob", b"1")
    await kv.put("orders.1", b"1")
    await kv.delete("users.bob")
    # A filtered key, with history.
    watcher = await kv.watch("users.*", include_history=True)
    got = await updates(watcher, 5)
    assert ops(got[:4]) == [
        ("users.ann", b"1", None),
        ("users.ann", b"2", None),
        ("users.bob", b"1", None),
        ("users.bob", b"", "DEL"),
    ]
    assert got[4] is None
    await watcher.stop()
    # Deletes ignored, headers only.
    watcher = await kv.watch(">", ignore_deletes=True, meta_only=True)
    got = await updates(watcher, 3)
    assert [(e.key, e.value) for e in got[:2]] == [("users.ann", b""), ("orders.1", b"")]
    assert got[2] is None
    await watcher.stop()


async def test_many_watchers_see_each_update(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    kv = await bucket(js)
    watchers = [await kv.watch(f"k.{i % 3}") for i in range(12)]
    for watcher in watchers:
        assert await watcher.updates(timeout=10) is None
    for i in range(3):
        await kv.put(f"k.{i}", b"%d" % i)
    for i, watcher in enumerate(watchers):
        entry = await watcher.updates(timeout=10)
        assert (entry.key, entry.value) == (f"k.{i % 3}", b"%d" % (i % 3))
        await watcher.stop()


# -- TTLs and markers --------------------------------------------------------------------------


async def test_a_key_with_a_ttl_goes(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    kv = await bucket(js)
    await kv.create("short", b"v", msg_ttl=1)
    await kv.put("long", b"v")
    assert (await kv.get("short")).value == b"v"
    for _ in range(100):
        await asyncio.sleep(0.1)
        try:
            await kv.get("short")
        except KeyNotFoundError:
            break
    with pytest.raises(KeyNotFoundError):
        await kv.get("short")
    assert (await kv.get("long")).value == b"v"


async def test_a_purge_with_a_ttl_leaves_a_marker_that_goes(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    kv = await bucket(js)
    await kv.put("k", b"v")
    await kv.purge("k", msg_ttl=1)
    assert ops(await kv.history("k")) == [("k", b"", "PURGE")]
    for _ in range(100):
        await asyncio.sleep(0.1)
        if (await kv.status()).values == 0:
            break
    assert (await kv.status()).values == 0


async def test_limit_markers_tell_watchers_a_key_aged_out(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    kv = await bucket(js, ttl=1, limit_marker_ttl=1)
    status = await kv.status()
    assert (status.ttl, status.marker_ttl) == (1.0, 1.0)
    watcher = await kv.watchall()
    assert await watcher.updates(timeout=10) is None
    await kv.put("k", b"v")
    assert ops([await watcher.updates(timeout=10)]) == [("k", b"v", None)]
    # Aged out: the marker tells the watcher it is gone, as a purge.
    marker = await watcher.updates(timeout=10)
    assert (marker.key, marker.operation, marker.value) == ("k", "PURGE", b"")
    await watcher.stop()


async def test_get_of_a_deleted_key_says_so(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    kv = await bucket(js)
    await kv.put("k", b"v")
    await kv.delete("k")
    with pytest.raises(KeyDeletedError):
        await kv._get("k")


async def test_a_watch_carries_on_across_a_server_restart(server: Server) -> None:
    nc = await nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        js = nc.jetstream(timeout=10)
        kv = await bucket(js)
        watcher = await kv.watchall()
        assert await watcher.updates(timeout=10) is None
        await kv.put("before", b"1")
        assert ops([await watcher.updates(timeout=10)]) == [("before", b"1", None)]
        server.restart()
        for _ in range(100):
            try:
                await kv.put("after", b"2")
                break
            except (TimeoutError, nats.errors.Error):
                await asyncio.sleep(0.2)
        entry = await watcher.updates(timeout=30)
        assert (entry.key, entry.value) == ("after", b"2")
        await watcher.stop()
    finally:
        await nc.close()
