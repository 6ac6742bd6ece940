"""Object Store with nats-py, unmodified, against an agent and against nats-server.

Put and get (large objects in many chunks, the digest checked by the client), info, list,
watch, delete, a put that replaces an object, meta updates, seal and status. nats.js's object
store (links too, which nats-py lacks) runs in test_objstore_js.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import ObjectMeta, ObjectMetaOptions
from nats.js.errors import NotFoundError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from support.servers import Server

MIB = 1024 * 1024


async def store(js: JetStreamContext, name: str = "OB", **kw: object) -> ObjectStore:
    return await js.create_object_store(name, **kw)


async def test_put_and_get_a_large_object_in_many_chunks(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=20)
    obs = await store(js)
    data = os.urandom(5 * MIB + 12345)
    info = await obs.put("big.bin", data)
    # nats-py's chunks are 128 KiB.
    assert (info.size, info.chunks) == (len(data), 41)
    got = await obs.get("big.bin")
    assert got.data == data
    assert got.info.digest == info.digest
    assert hashlib.sha256(got.data).digest() == hashlib.sha256(data).digest()
    # Into a file-like object too.
    sink = io.BytesIO()
    await obs.get("big.bin", writeinto=sink)
    assert sink.getvalue() == data


async def test_small_empty_and_custom_chunked_objects(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    obs = await store(js)
    await obs.put("empty", b"")
    assert (await obs.get("empty")).data == b""
    await obs.put("text", "a string")
    assert (await obs.get("text")).data == b"a string"
    meta = ObjectMeta(
        name="chunky",
        description="small chunks",
        headers={"k": ["v"]},
        options=ObjectMetaOptions(max_chunk_size=1000),
    )
    data = os.urandom(10_500)
    info = await obs.put("chunky", data, meta=meta)
    assert (info.chunks, info.size) == (11, 10_500)
    got = await obs.get("chunky")
    assert got.data == data
    assert (got.info.description, got.info.headers) == ("small chunks", {"k": ["v"]})


async def test_info_list_and_delete(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    obs = await store(js, description="my objects")
    with pytest.raises(NotFoundError):
        await obs.list()
    for name in ("one", "two", "three"):
        await obs.put(name, name.encode() * 1000)
    info = await obs.get_info("two")
    assert (info.name, info.bucket, info.size, info.deleted) == ("two", "OB", 3000, False)
    assert sorted(i.name for i in await obs.list()) == ["one", "three", "two"]
    await obs.delete("two")
    with pytest.raises(ObjectNotFoundError):
        await obs.get_info("two")
    deleted = await obs.get_info("two", show_deleted=True)
    assert (deleted.deleted, deleted.size, deleted.chunks) == (True, 0, 0)
    assert sorted(i.name for i in await obs.list(ignore_deletes=True)) == ["one", "three"]
    assert sorted(i.name for i in await obs.list()) == ["one", "three", "two"]
    # The deleted object's chunks are gone from the stream.
    status = await obs.status()
    assert (status.bucket, status.description, status.sealed) == ("OB", "my objects", False)
    assert status.stream_info.state.messages == 1 + 1 + 3  # chunks of one and three, 3 metas


async def test_a_put_replaces_the_object_and_its_chunks(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    obs = await store(js)
    await obs.put("o", os.urandom(300_000))
    first = (await js.stream_info("OBJ_OB")).state.messages
    assert first == 3 + 1
    new = os.urandom(200_000)
    await obs.put("o", new)
    assert (await obs.get("o")).data == new
    assert (await js.stream_info("OBJ_OB")).state.messages == 2 + 1


async def test_update_meta(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    obs = await store(js)
    await obs.put("o", b"content")
    await obs.update_meta("o", ObjectMeta(name="o", description="described", headers={"h": ["1"]}))
    got = await obs.get("o")
    assert (got.data, got.info.description, got.info.headers) == (
        b"content",
        "described",
        {"h": ["1"]},
    )
    # nats-py renames only onto a name whose object was deleted.
    await obs.put("other", b"x")
    with pytest.raises(nats.js.errors.ObjectAlreadyExists):
        await obs.update_meta("o", ObjectMeta(name="other"))


async def test_watch_sees_current_objects_then_changes(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    obs = await store(js)
    await obs.put("a", b"1")
    watcher = await obs.watch()
    first = await watcher.updates(timeout=10)
    assert first.name == "a"
    assert await watcher.updates(timeout=10) is None
    await obs.put("b", b"2")
    await obs.delete("a")
    seen = [await watcher.updates(timeout=10) for _ in range(2)]
    assert [(i.name, i.deleted) for i in seen] == [("b", False), ("a", True)]
    await watcher.stop()


async def test_seal_refuses_further_changes(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    obs = await store(js)
    await obs.put("kept", b"x")
    await obs.seal()
    assert (await obs.status()).sealed is True
    with pytest.raises(nats.js.errors.APIError):
        await obs.put("more", b"y")
    assert (await obs.get("kept")).data == b"x"


async def test_a_get_carries_on_across_a_server_restart(server: Server) -> None:
    reconnected = asyncio.Event()

    async def on_reconnect() -> None:
        reconnected.set()

    nc = await nats.connect(
        server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2, reconnected_cb=on_reconnect
    )
    try:
        js = nc.jetstream(timeout=20)
        obs = await store(js)
        data = os.urandom(2 * MIB)
        await obs.put("o", data)
        server.restart()
        await asyncio.wait_for(reconnected.wait(), 30)
        assert (await obs.get("o")).data == data
    finally:
        await nc.close()
