"""ObjectStore against real backends: a local directory, memory, and S3 (moto server)."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from infinistream.storage import (
    ObjectExistsError,
    ObjectNotFoundError,
    ObjectStore,
    ObjectStoreError,
    check_key,
    join_key,
)
from infinistream.storage.localstore import INLINE_BYTES
from infinistream.storage.objects import local_root
from support.s3server import S3Server

# --- put / get / write-once ----------------------------------------------------------------


async def test_put_get_round_trip(store: ObjectStore) -> None:
    await store.put("g/s/one", b"hello world")
    await store.put("g/s/two", memoryview(b"from a memoryview"))
    assert await store.get("g/s/one") == b"hello world"
    assert await store.get("g/s/two") == b"from a memoryview"
    assert store.stats.puts == 2
    assert store.stats.bytes_put == len(b"hello world") + len(b"from a memoryview")
    assert store.stats.gets == 2
    assert store.stats.bytes_got == store.stats.bytes_put


async def test_put_empty_object(store: ObjectStore) -> None:
    await store.put("g/empty", b"")
    assert await store.get("g/empty") == b""
    assert (await store.head("g/empty")).size == 0


async def test_write_once(store: ObjectStore) -> None:
    await store.put("g/obj", b"first")
    with pytest.raises(ObjectExistsError) as err:
        await store.put("g/obj", b"second, must not land")
    assert "g/obj" in str(err.value)
    assert store.url in str(err.value)
    assert await store.get("g/obj") == b"first"
    assert store.stats.puts == 2
    assert store.stats.bytes_put == len(b"first")


@pytest.mark.parametrize("backend", ["file", "memory"])
async def test_write_once_under_concurrency(
    backend: str, make_store: Callable[[str], ObjectStore]
) -> None:
    # obstore's local store creates with link(2) and its memory store checks under a lock, so
    # exactly one of many racing creates wins. Not run on moto: its server checks
    # If-None-Match and then stores without a lock (atomic in practice under the GIL, but not
    # by design), so a race there would test moto. Real S3 evaluates the condition atomically.
    store = make_store(backend)
    for i in range(20):
        payloads = [f"writer {w}".encode() for w in range(8)]
        results = await asyncio.gather(
            *(store.put(f"race/{i}", p) for p in payloads), return_exceptions=True
        )
        winners = [p for p, r in zip(payloads, results, strict=True) if r is None]
        assert len(winners) == 1, results
        assert all(isinstance(r, ObjectExistsError) for r in results if r is not None)
        assert await store.get(f"race/{i}") == winners[0]


async def test_write_once_on_s3_uses_conditional_put(s3_server: S3Server) -> None:
    # A second writer with its own client (another agent) is refused by the server itself,
    # not by a client-side check.
    url = f"{s3_server.url}/t-{uuid.uuid4().hex}"
    a = ObjectStore.from_url(url, **s3_server.store_options())
    b = ObjectStore.from_url(url, **s3_server.store_options())
    await a.put("k", b"from a")
    with pytest.raises(ObjectExistsError):
        await b.put("k", b"from b")
    assert b.stats.heads == 0 and b.stats.gets == 0  # no HEAD-then-PUT emulation
    assert await b.get("k") == b"from a"


async def test_probe_write_once(store: ObjectStore) -> None:
    assert await store.probe_write_once("probe/write-once")
    assert await store.list("probe") == []  # the probe cleans up after itself


# --- missing objects and errors ------------------------------------------------------------


async def test_missing_object(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFoundError) as err:
        await store.get("g/nope")
    assert err.value.key == "g/nope"
    assert "g/nope" in str(err.value) and store.url in str(err.value)
    with pytest.raises(ObjectNotFoundError):
        await store.get_range("g/nope", 0, 10)
    with pytest.raises(ObjectNotFoundError):
        await store.get_suffix("g/nope", 10)
    with pytest.raises(ObjectNotFoundError):
        await store.head("g/nope")
    # ObjectNotFoundError is an ObjectStoreError: one except clause catches all store errors.
    with pytest.raises(ObjectStoreError):
        await store.get("g/nope")


async def test_delete(store: ObjectStore) -> None:
    await store.put("g/d", b"x")
    await store.delete("g/d")
    with pytest.raises(ObjectNotFoundError):
        await store.get("g/d")
    await store.delete("g/d")  # idempotent, as on S3
    assert store.stats.deletes == 2
    # A deleted key can be created again (only the janitor deletes, and keys are unique).
    await store.put("g/d", b"y")
    assert await store.get("g/d") == b"y"


async def test_backend_error_names_url_and_key(tmp_path: Path) -> None:
    store = ObjectStore.from_url((tmp_path / "o").as_uri())
    # An object stored as a file of its own (as every object was before pack files) where a
    # directory is needed: the file system refuses.
    (tmp_path / "o" / "a").write_bytes(b"a file")
    with pytest.raises(ObjectStoreError) as err:
        await store.put("a/b", b"its parent is a file")  # ENOTDIR from the filesystem
    assert not isinstance(err.value, ObjectExistsError | ObjectNotFoundError)
    assert "'a/b'" in str(err.value) and store.url in str(err.value)
    assert err.value.url == store.url and err.value.key == "a/b"


@pytest.mark.parametrize("bad", ["", "/a", "a/", "a//b", "a/./b", "a/../b", "a\\b", "a#1", "a\nb"])
async def test_invalid_keys_rejected(bad: str) -> None:
    store = ObjectStore.from_url("memory://")
    with pytest.raises(ValueError):
        await store.put(bad, b"x")
    with pytest.raises(ValueError):
        check_key(bad)


def test_join_key() -> None:
    assert join_key("group", "stream", "L0", "obj") == "group/stream/L0/obj"
    with pytest.raises(ValueError):
        join_key("group", "a/b")
    with pytest.raises(ValueError):
        join_key("group", "")


# --- ranges --------------------------------------------------------------------------------

BLOB = bytes(range(256)) * 64  # 16 KiB


async def test_get_range(store: ObjectStore) -> None:
    await store.put("r", BLOB)
    before = store.stats.snapshot()
    assert await store.get_range("r", 0, 1) == BLOB[:1]
    assert await store.get_range("r", 100, 5000) == BLOB[100:5000]
    assert await store.get_range("r", len(BLOB) - 7, len(BLOB)) == BLOB[-7:]
    delta = store.stats - before
    assert delta.gets == 3  # one GET per ranged read
    assert delta.bytes_got == 1 + 4900 + 7
    assert await store.get_range("r", 10, 10) == b""
    assert (store.stats - before).gets == 3  # an empty range costs no request


async def test_get_range_past_end_is_an_error(store: ObjectStore) -> None:
    await store.put("r", BLOB)
    with pytest.raises(ObjectStoreError) as err:
        await store.get_range("r", len(BLOB) - 10, len(BLOB) + 10)
    assert "'r'" in str(err.value)
    with pytest.raises(ObjectStoreError):
        await store.get_range("r", len(BLOB) + 10, len(BLOB) + 20)
    with pytest.raises(ValueError):
        await store.get_range("r", 5, 4)


async def test_get_suffix(store: ObjectStore) -> None:
    await store.put("r", BLOB)
    data, size = await store.get_suffix("r", 100)
    assert (data, size) == (BLOB[-100:], len(BLOB))
    data, size = await store.get_suffix("r", 10 * len(BLOB))  # longer than the object
    assert (data, size) == (BLOB, len(BLOB))
    assert store.stats.gets == 2


async def test_get_ranges_order_and_coalescing(store: ObjectStore) -> None:
    await store.put("r", BLOB)
    ranges = [(9000, 9100), (0, 10), (20, 30), (5, 25), (16000, 16384), (40, 40)]
    before = store.stats.snapshot()
    got = await store.get_ranges("r", ranges, coalesce=0)
    assert got == [BLOB[s:e] for s, e in ranges]
    # (0,10) (5,25) (20,30) overlap into one GET; the others are one each; empty costs none.
    assert (store.stats - before).gets == 3

    before = store.stats.snapshot()
    got = await store.get_ranges("r", ranges, coalesce=len(BLOB))
    assert got == [BLOB[s:e] for s, e in ranges]
    assert (store.stats - before).gets == 1


async def test_head(store: ObjectStore) -> None:
    await store.put("g/h", BLOB)
    info = await store.head("g/h")
    assert info.key == "g/h"
    assert info.size == len(BLOB)
    assert isinstance(info.last_modified, datetime)
    assert info.last_modified.tzinfo is not None
    assert store.stats.heads == 1


# --- listing -------------------------------------------------------------------------------


async def test_list(store: ObjectStore) -> None:
    keys = ["g1/s1/a", "g1/s1/b", "g1/s2/a", "g1/s10/a", "g2/s1/a", "top"]
    for k in keys:
        await store.put(k, k.encode())
    assert [i.key for i in await store.list("")] == sorted(keys)
    assert [i.key for i in await store.list("g1")] == ["g1/s1/a", "g1/s1/b", "g1/s10/a", "g1/s2/a"]
    # Prefixes match whole path segments: "g1/s1" does not match "g1/s10/...".
    assert [i.key for i in await store.list("g1/s1")] == ["g1/s1/a", "g1/s1/b"]
    assert await store.list("nothing/here") == []
    sizes = {i.key: i.size for i in await store.list("g2")}
    assert sizes == {"g2/s1/a": len(b"g2/s1/a")}
    await store.delete("g1/s1/a")
    assert [i.key for i in await store.list("g1/s1")] == ["g1/s1/b"]
    assert store.stats.lists == 6
    streamed = [i.key async for i in store.iter_list("g1")]
    assert sorted(streamed) == ["g1/s1/b", "g1/s10/a", "g1/s2/a"]


async def test_list_many_pages(store: ObjectStore) -> None:
    # One more key than an S3 LIST page holds. Written 50 at a time: a thousand PUTs at once
    # queue in the single-threaded S3-compatible server past the client's request timeout.
    keys = [f"many/{i:05d}" for i in range(1001)]
    for at in range(0, len(keys), 50):
        await asyncio.gather(*(store.put(key, b"") for key in keys[at : at + 50]))
    listed = await store.list("many")
    assert [i.key for i in listed] == keys


# --- URLs ----------------------------------------------------------------------------------


async def test_file_url_creates_directory(tmp_path: Path) -> None:
    root = tmp_path / "deep" / "er" / "dir"
    store = ObjectStore.from_url(root.as_uri())
    assert root.is_dir()
    assert store.url == root.as_uri()
    await store.put("g/x", b"on disk")
    # In a pack file of its directory, not a file of its own.
    assert not (root / "g" / "x").exists()
    (pack,) = (root / "g").iterdir()
    assert pack.name.startswith("#pack-") and b"on disk" in pack.read_bytes()
    # A second store on the same directory sees the same objects (another agent process).
    assert await ObjectStore.from_url(str(root)).get("g/x") == b"on disk"


def test_local_root_names_the_directory_without_making_it(tmp_path: Path) -> None:
    root = tmp_path / "a b" / "objects"
    assert local_root(root.as_uri()) == root
    assert local_root(str(root)) == root
    assert local_root(f"file://localhost{root}/../objects") == root
    assert not root.exists()
    assert ObjectStore.from_url(root.as_uri()).url == root.as_uri()
    for elsewhere in ("s3://bucket/prefix", "memory://"):
        assert local_root(elsewhere) is None
    for bad in ("file://host/dir", "file:relative"):
        with pytest.raises(ValueError):
            local_root(bad)


def test_memory_stores_are_private() -> None:
    a = ObjectStore.from_url("memory://")
    b = ObjectStore.from_url("memory://")
    assert a.url == "memory://"

    async def go() -> None:
        await a.put("k", b"v")
        with pytest.raises(ObjectNotFoundError):
            await b.get("k")

    asyncio.run(go())


@pytest.mark.parametrize(
    "url", ["ftp://x/y", "file://host/dir", "file:relative", "s3:///no-bucket", "nonsense"]
)
def test_bad_urls(url: str) -> None:
    with pytest.raises(ValueError):
        ObjectStore.from_url(url)


async def test_s3_prefix_isolates_keys(s3_server: S3Server) -> None:
    base = f"{s3_server.url}/iso-{uuid.uuid4().hex}"
    a = ObjectStore.from_url(f"{base}/tenant-a", **s3_server.store_options())
    b = ObjectStore.from_url(f"{base}/tenant-b/", **s3_server.store_options())
    assert a.url == f"{base}/tenant-a" and b.url == f"{base}/tenant-b"
    await a.put("k", b"a")
    await b.put("k", b"b")
    assert await a.get("k") == b"a"
    assert [i.key for i in await b.list()] == ["k"]
    whole = ObjectStore.from_url(base, **s3_server.store_options())
    assert [i.key for i in await whole.list()] == ["tenant-a/k", "tenant-b/k"]


async def test_s3_options_from_environment(
    s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    store = ObjectStore.from_url(f"{s3_server.url}/env-{uuid.uuid4().hex}")
    await store.put("k", b"configured by AWS_* variables")
    assert await store.get("k") == b"configured by AWS_* variables"


# --- durability of the local store ---------------------------------------------------------


async def test_local_put_is_one_fdatasync_of_its_pack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "objects"
    store = ObjectStore.from_url(root.as_uri())
    synced: list[tuple[str, str, int]] = []  # (call, file, thread)
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def recording(name: str, real: Callable[[int], None]) -> Callable[[int], None]:
        def call(fd: int) -> None:
            synced.append((name, os.readlink(f"/proc/self/fd/{fd}"), threading.get_ident()))
            real(fd)

        return call

    monkeypatch.setattr(os, "fsync", recording("fsync", real_fsync))
    monkeypatch.setattr(os, "fdatasync", recording("fdatasync", real_fdatasync))
    await store.put("g/stream/L0/obj1", b"payload")
    level = root / "g" / "stream" / "L0"
    (pack,) = level.iterdir()
    assert pack.name.startswith("#pack-")
    # The first object of a directory starts a pack there: the pack (its reserved blocks) and
    # its name are made durable, and each directory the put had to create (each new
    # directory's entry lives in its parent); then the object's own fdatasync.
    files = [f for _, f, _ in synced]
    for path in (pack, level, level.parent, level.parent.parent, root):
        assert str(path) in files, (path, synced)
    assert synced[-1][:2] == ("fdatasync", str(pack))
    # A small object, with nothing else being written, is written on the caller's thread.
    assert {tid for _, _, tid in synced} == {threading.get_ident()}

    # The next object of the directory: one fdatasync of the pack, and nothing else.
    synced.clear()
    await store.put("g/stream/L0/obj2", b"payload")
    assert [s[:2] for s in synced] == [("fdatasync", str(pack))]

    # Larger ones go to the store's writer thread, and those in flight together share the
    # fdatasync of its turn.
    synced.clear()
    big = [bytes([i]) * (INLINE_BYTES + 1) for i in range(20)]
    await asyncio.gather(*(store.put(f"g/stream/L0/c{i}", big[i]) for i in range(20)))
    assert {s[:2] for s in synced} == {("fdatasync", str(pack))}
    assert len(synced) < 20
    assert threading.get_ident() not in {tid for _, _, tid in synced}
    for i in range(20):
        assert await store.get(f"g/stream/L0/c{i}") == big[i]


async def test_memory_and_s3_puts_do_not_fsync(
    monkeypatch: pytest.MonkeyPatch, make_store: Callable[[str], ObjectStore]
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(os, "fsync", calls.append)
    for backend in ("memory", "s3"):
        await make_store(backend).put("k", b"v")
    assert calls == []


async def test_a_store_that_packs_nothing_writes_files_of_their_own(tmp_path: Path) -> None:
    # A writer of a few objects that is then gone (a Spark task) would leave a pack for each,
    # and every reader of the directory one more file to open.
    with ObjectStore.from_url((tmp_path / "o").as_uri(), packed=False) as store:
        await store.put("l1/small", b"x" * 10)
        await store.put("l1/empty", b"")
    assert (tmp_path / "o" / "l1" / "small").read_bytes() == b"x" * 10
    assert (tmp_path / "o" / "l1" / "empty").read_bytes() == b""
    assert sorted(p.name for p in (tmp_path / "o" / "l1").iterdir()) == ["empty", "small"]
    with ObjectStore.from_url((tmp_path / "o").as_uri()) as reader:
        assert await reader.get("l1/small") == b"x" * 10
        await reader.put("l1/packed", b"y")  # packed by default
    assert not (tmp_path / "o" / "l1" / "packed").exists()
