"""The local object store's pack files: what each process sees, sealing, deletes, old stores.

Every test works on a real directory; a second `LocalObjects` on the same root stands for
another process (an agent, a pipeline job) reading what the first wrote, and a subprocess
killed mid-life for a writer that died.
"""

from __future__ import annotations

import asyncio
import ctypes
import mmap
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from infinistream.storage import ObjectNotFoundError, ObjectStore, packwriter
from infinistream.storage.libc import libc_function
from infinistream.storage.localstore import STAGE_BYTES, ExistsError, LocalObjects
from infinistream.storage.packformat import FOOTER_SIZE, is_pack_name, parse_footer

MIB = 1024 * 1024


def packs(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if is_pack_name(p.name))


def sealed(pack: Path) -> bool:
    data = pack.read_bytes()
    return len(data) >= FOOTER_SIZE and parse_footer(data[-FOOTER_SIZE:]) is not None


async def put_all(store: LocalObjects, objects: dict[str, bytes]) -> None:
    for key, data in objects.items():
        await store.put(key, data)


def read_all(store: LocalObjects) -> dict[str, bytes]:
    return {item.key: store.read(item.key)[0] for item in store.list_all()}


async def test_another_process_reads_what_a_writer_is_still_writing(tmp_path: Path) -> None:
    writer = LocalObjects(str(tmp_path))
    reader = LocalObjects(str(tmp_path))
    try:
        first = {f"g/l0/a{i}": os.urandom(100 + i) for i in range(10)}
        await put_all(writer, first)
        assert read_all(reader) == first
        # More while the reader knows the pack already: it reads on from where it stopped.
        second = {f"g/l0/b{i}": os.urandom(5000) for i in range(10)}
        await put_all(writer, second)
        for key, data in second.items():
            assert reader.read(key)[0] == data
        assert reader.read("g/l0/b3", 10, 20)[0] == second["g/l0/b3"][10:20]
        assert reader.stat("g/l0/b3").size == 5000
        (pack,) = packs(tmp_path / "g" / "l0")
        assert not sealed(pack)
    finally:
        writer.close()
        reader.close()


async def test_a_full_pack_is_sealed_and_read_from_its_seal(tmp_path: Path) -> None:
    writer = LocalObjects(str(tmp_path), pack_bytes=MIB, max_packed=MIB // 2)
    objects = {f"g/l0/o{i:03d}": os.urandom(50_000) for i in range(60)}  # about 3 packs
    await put_all(writer, objects)
    level = tmp_path / "g" / "l0"
    full = packs(level)
    assert len(full) >= 3
    assert sum(sealed(p) for p in full) == len(full) - 1  # all but the one being written
    for pack in full:
        if sealed(pack):
            # Cut to its end: the space allocated beyond it is given back.
            assert pack.stat().st_size < MIB + 100_000
    writer.close()
    assert all(sealed(p) for p in packs(level))  # closing seals the last one
    reader = LocalObjects(str(tmp_path))
    try:
        assert read_all(reader) == objects
        directory = reader.index.directory("g/l0")
        assert all(pack.sealed for pack in directory.packs.values())
    finally:
        reader.close()


async def test_puts_written_together_across_a_full_pack_all_succeed(tmp_path: Path) -> None:
    # Puts that reach the writer thread together are appended and then synced pack by pack;
    # a pack the later ones filled was sealed (and synced, and its file let go) meanwhile. Its
    # puts are durable: none may fail for the pack no longer being open.
    writer = LocalObjects(str(tmp_path), pack_bytes=MIB, max_packed=MIB // 2)
    objects = {f"g/l0/t{i:03d}": os.urandom(50_000) for i in range(80)}  # about 4 packs
    try:
        await asyncio.gather(*(writer.put(key, data) for key, data in objects.items()))
        assert len(packs(tmp_path / "g" / "l0")) >= 4
        assert read_all(writer) == objects
    finally:
        writer.close()


async def test_a_time_named_key_is_found_in_the_seals_nearest_it(tmp_path: Path) -> None:
    # Objects named as the layout names them (a time first): a new store's first read of one
    # reads the seal of the pack written about then, not the seal of every pack.
    writer = LocalObjects(str(tmp_path), pack_bytes=MIB, max_packed=MIB // 2)
    objects = {}
    for i in range(100):  # about 5 packs
        key = f"g/l0/{time.time_ns():020d}-a-{i:08d}.iso"
        objects[key] = os.urandom(50_000)
        await writer.put(key, objects[key])
    writer.close()
    level = tmp_path / "g" / "l0"
    assert len(packs(level)) >= 5
    for key in (min(objects), sorted(objects)[50], max(objects)):
        reader = LocalObjects(str(tmp_path))
        try:
            assert reader.read(key)[0] == objects[key]
            directory = reader.index.directory("g/l0")
            assert sum(pack.sealed for pack in directory.packs.values()) <= 2
            # Listing reads every seal.
            assert read_all(reader) == objects
            assert all(pack.sealed for pack in directory.packs.values())
        finally:
            reader.close()


async def test_a_pack_reserves_a_little_and_doubles_as_it_fills(tmp_path: Path) -> None:
    # A small store must not hold pack_bytes of disk per directory: a new pack reserves about
    # one MiB, and doubles its reservation as objects arrive, up to pack_bytes.
    writer = LocalObjects(str(tmp_path), pack_bytes=8 * MIB, max_packed=MIB)
    try:
        await writer.put("g/l0/first", b"x" * 100)
        (pack,) = packs(tmp_path / "g" / "l0")
        assert pack.stat().st_size <= MIB + 4096
        objects = {f"g/l0/o{i:03d}": os.urandom(100_000) for i in range(30)}  # about 3 MiB
        await put_all(writer, objects)
        (pack,) = packs(tmp_path / "g" / "l0")  # grown in place, not a second pack
        assert 3 * MIB <= pack.stat().st_size <= 4 * MIB + 4096
        reader = LocalObjects(str(tmp_path))
        try:
            assert {k: reader.read(k)[0] for k in objects} == objects
        finally:
            reader.close()
    finally:
        writer.close()


def cached_pages(path: Path) -> list[bool]:
    """For each page of the file, whether the page cache holds it (mincore(2) on a mapping,
    which maps nothing in by itself)."""
    mincore = libc_function(
        "mincore", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p], ctypes.c_int
    )
    assert mincore is not None
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = ctypes.create_string_buffer(pages)
    with path.open("rb") as f:
        # A private mapping: ctypes wants a writable buffer for its address; nothing writes.
        mapped = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
        start = ctypes.c_char.from_buffer(mapped)
        try:
            result = mincore(ctypes.addressof(start), size, vec)
        finally:
            del start  # the mapping closes only once nothing points into it
            mapped.close()
    assert result == 0, os.strerror(ctypes.get_errno())
    return [bool(b & 1) for b in vec.raw]


async def test_a_sealed_pack_leaves_the_page_cache(tmp_path: Path) -> None:
    # Appends need fresh pages; those of the pack sealed last are what the next appends get,
    # rather than ones the kernel must find (packwriter's docstring).
    writer = LocalObjects(str(tmp_path))
    try:
        await put_all(writer, {f"g/l0/o{i:02d}": os.urandom(MIB) for i in range(12)})
        (pack,) = packs(tmp_path / "g" / "l0")
        written = cached_pages(pack)[: 12 * MIB // mmap.PAGESIZE]
        assert sum(written) >= 0.9 * len(written), "the pack being written left the cache"
        writer.close()
        assert not any(cached_pages(pack)), "the sealed pack stayed cached"
        assert sealed(pack)  # (which reads it back into the cache)
    finally:
        writer.close()


def test_a_pack_filled_on_the_callers_thread_leaves_the_cache_from_the_writers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Dropping a full pack's pages takes milliseconds: a stage that fills a pack on the
    # event loop's thread seals it there, and leaves the drop to the writer thread.
    dropped: list[tuple[str, int]] = []
    real = os.posix_fadvise

    def record(fd: int, offset: int, length: int, advice: int) -> None:
        real(fd, offset, length, advice)
        dropped.append((threading.current_thread().name, os.fstat(fd).st_ino))

    monkeypatch.setattr(os, "posix_fadvise", record)
    store = LocalObjects(str(tmp_path), pack_bytes=MIB, max_packed=MIB // 2)
    objects = {f"g/l0/o{i}": os.urandom(300_000) for i in range(6)}
    try:
        for key, data in objects.items():
            staged = store.stage(key, [data])
            assert staged is not None
            store.complete(staged, None)
        first, second = packs(tmp_path / "g" / "l0")
        deadline = time.monotonic() + 10
        while not dropped and time.monotonic() < deadline:
            time.sleep(0.01)
        assert dropped == [("objects-pack-writer", first.stat().st_ino)]
        assert not any(cached_pages(first)), "the sealed pack stayed cached"
        assert sealed(first) and not sealed(second)
        assert read_all(store) == objects
    finally:
        store.close()
    # The pack being written is sealed by the close, and dropped there.
    assert [name for name, _ in dropped] == ["objects-pack-writer", "MainThread"]


async def test_objects_larger_than_a_pack_takes_are_files_of_their_own(tmp_path: Path) -> None:
    store = ObjectStore(None, tmp_path.as_uri(), local=LocalObjects(str(tmp_path), max_packed=1000))
    big, small = os.urandom(5000), os.urandom(500)
    await store.put("g/l1/big", big)
    await store.put("g/l1/small", small)
    assert (tmp_path / "g" / "l1" / "big").read_bytes() == big
    assert not (tmp_path / "g" / "l1" / "small").exists()
    assert [i.key for i in await store.list("g")] == ["g/l1/big", "g/l1/small"]
    # Write-once, whichever way the object is kept.
    for key in ("g/l1/big", "g/l1/small"):
        with pytest.raises(Exception, match="already exists"):
            await store.put(key, b"again")
    # No staging file is left behind.
    assert sorted(p.name for p in (tmp_path / "g" / "l1").iterdir() if "#" in p.name) == [
        p.name for p in packs(tmp_path / "g" / "l1")
    ]
    store.close()


async def test_a_store_written_as_a_file_per_object_stays_readable(tmp_path: Path) -> None:
    # What earlier builds wrote: every object a file named by its key.
    old = {"g/objects/l0/old1.iso": b"first old", "g/objects/l0/old2.iso": b"second old"}
    for key, data in old.items():
        path = tmp_path / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    store = ObjectStore.from_url(tmp_path.as_uri())
    await store.put("g/objects/l0/new.iso", b"packed")
    listed = await store.list("g")
    assert [i.key for i in listed] == sorted([*old, "g/objects/l0/new.iso"])
    assert {i.key: i.size for i in listed}["g/objects/l0/old1.iso"] == len(b"first old")
    assert await store.get("g/objects/l0/old2.iso") == b"second old"
    assert await store.get_range("g/objects/l0/old1.iso", 6, 9) == b"old"
    assert (await store.head("g/objects/l0/new.iso")).size == len(b"packed")
    prefixes, objects = await store.list_with_delimiter("g/objects")
    assert (prefixes, objects) == (["g/objects/l0"], [])
    await store.delete("g/objects/l0/old1.iso")
    assert not (tmp_path / "g/objects/l0/old1.iso").exists()
    with pytest.raises(ObjectNotFoundError):
        await store.get("g/objects/l0/old1.iso")
    store.close()


async def test_a_delete_takes_the_bytes_off_the_disk(tmp_path: Path) -> None:
    marker = b"erase-me-" * 100
    writer = LocalObjects(str(tmp_path))
    other = LocalObjects(str(tmp_path))
    try:
        await writer.put("g/l0/keep", b"k" * 3000)
        await writer.put("g/l0/gone", marker)
        await writer.put("g/l0/also", b"a" * 3000)
        assert other.read("g/l0/gone")[0] == marker  # the other process knows it now
        (pack,) = packs(tmp_path / "g" / "l0")
        assert marker in pack.read_bytes()
        writer.delete("g/l0/gone")
        assert marker not in pack.read_bytes()
        assert b"erase-me" not in pack.read_bytes()
        # Missing for every process, including one that had found it before.
        for store in (writer, other):
            with pytest.raises(FileNotFoundError):
                store.read("g/l0/gone")
            assert sorted(i.key for i in store.list_all("g")) == ["g/l0/also", "g/l0/keep"]
        assert other.read("g/l0/also")[0] == b"a" * 3000
        writer.delete("g/l0/gone")  # deleting a missing object is not an error
    finally:
        writer.close()
        other.close()


async def test_a_sealed_pack_with_nothing_live_is_removed(tmp_path: Path) -> None:
    store = LocalObjects(str(tmp_path), pack_bytes=MIB, max_packed=MIB // 2)
    keys = [f"g/l0/o{i}" for i in range(30)]
    for key in keys:
        await store.put(key, os.urandom(100_000))
    level = tmp_path / "g" / "l0"
    first = packs(level)[0]
    assert sealed(first)
    in_first = []
    for key in keys:
        entry = store.index.find("g/l0", key)
        assert entry is not None
        if entry.pack.path == str(first):
            in_first.append(key)
    for key in in_first:
        store.delete(key)
    assert not first.exists()
    assert sorted(i.key for i in store.list_all("g")) == sorted(set(keys) - set(in_first))
    store.close()


WRITER = textwrap.dedent(
    """
    import asyncio, os, sys
    from infinistream.storage.localstore import LocalObjects

    async def main() -> None:
        store = LocalObjects(sys.argv[1])
        for i in range(int(sys.argv[2])):
            await store.put(f"g/l0/d{i}", b"%d" % i * 100)
        print("written", flush=True)
        os._exit(9)  # dies holding its pack, as kill -9 leaves it

    asyncio.run(main())
    """
)


async def test_the_pack_of_a_writer_that_died_is_read_and_then_sealed(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", WRITER, str(tmp_path), "25"], capture_output=True, timeout=60
    )
    assert proc.stdout == b"written\n", proc.stderr
    level = tmp_path / "g" / "l0"
    (orphan,) = packs(level)
    assert not sealed(orphan)
    expected = {f"g/l0/d{i}": b"%d" % i * 100 for i in range(25)}
    reader = LocalObjects(str(tmp_path))
    assert read_all(reader) == expected
    # The next writer of the directory seals it (its writer holds no lock on it any more).
    writer = LocalObjects(str(tmp_path))
    await writer.put("g/l0/next", b"after")
    assert sealed(orphan)
    assert orphan.stat().st_size < 64 * 1024  # the allocated rest given back
    fresh = LocalObjects(str(tmp_path))
    assert read_all(fresh) == {**expected, "g/l0/next": b"after"}
    for store in (reader, writer, fresh):
        store.close()


async def test_a_live_writer_keeps_its_pack(tmp_path: Path) -> None:
    first = LocalObjects(str(tmp_path))
    await first.put("g/l0/x", b"x")
    (pack,) = packs(tmp_path / "g" / "l0")
    second = LocalObjects(str(tmp_path))
    await second.put("g/l0/y", b"y")  # its own pack; the first one's is not sealed under it
    assert not sealed(pack)
    await first.put("g/l0/z", b"z")
    assert read_all(LocalObjects(str(tmp_path))) == {
        "g/l0/x": b"x",
        "g/l0/y": b"y",
        "g/l0/z": b"z",
    }
    first.close()
    second.close()


async def test_close_seals_what_was_written(tmp_path: Path) -> None:
    store = LocalObjects(str(tmp_path))
    objects = {f"g/l0/{i}": os.urandom(40_000) for i in range(5)}
    await asyncio.gather(*(store.put(k, v) for k, v in objects.items()))
    store.close()
    assert all(sealed(p) for p in packs(tmp_path / "g" / "l0"))
    reader = LocalObjects(str(tmp_path))
    assert read_all(reader) == objects
    reader.close()


def test_a_staged_key_is_never_one_already_stored(tmp_path: Path) -> None:
    store = LocalObjects(str(tmp_path))
    try:
        staged = store.stage("g/l0/packed", [b"first"])
        assert staged is not None
        store.complete(staged, None)
        loose = tmp_path / "g" / "l0" / "loose"
        loose.write_bytes(b"a file of its own")
        with pytest.raises(ExistsError):
            store.stage("g/l0/loose", [b"second"])
        # A fresh key (one its maker made unique) is still checked against the store's own
        # index; only the lookup of a file of its name is left out.
        for fresh in (False, True):
            with pytest.raises(ExistsError):
                store.stage("g/l0/packed", [b"again"], fresh=fresh)
        staged = store.stage("g/l0/new", [b"third"], fresh=True)
        assert staged is not None
        store.complete(staged, None)
        assert store.read("g/l0/new")[0] == b"third"
        assert loose.read_bytes() == b"a file of its own"
    finally:
        store.close()


def test_a_large_staged_object_goes_to_the_disk_before_its_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its whole pages are handed to the disk as it is staged, so that the sync after its
    # commit has only the last page (shared with the commit record) left to write; a small
    # one waits for the sync whole.
    started: list[tuple[int, int, int]] = []
    real = packwriter._sync_file_range
    assert real is not None  # Linux's C library has it

    def record(fd: int, offset: int, nbytes: int, flags: int) -> int:
        started.append((offset, nbytes, flags))
        return real(fd, offset, nbytes, flags)

    monkeypatch.setattr(packwriter, "_sync_file_range", record)
    store = LocalObjects(str(tmp_path))
    big = os.urandom(MIB + 100)
    try:
        small = store.stage("g/l0/small", [os.urandom(10_000)])
        assert small is not None
        store.complete(small, None)
        assert started == []
        staged = store.stage("g/l0/big", [big[:1000], big[1000:]])
        assert staged is not None
        entry = store.index.find("g/l0", "g/l0/big")
        assert entry is not None
        [(offset, nbytes, flags)] = started
        end = offset + nbytes
        assert offset == entry.offset  # the entry's head and all
        assert end % mmap.PAGESIZE == 0
        assert entry.data_offset + len(big) - mmap.PAGESIZE < end <= entry.data_offset + len(big)
        assert flags == 2  # SYNC_FILE_RANGE_WRITE: a start, no wait (the sync reports errors)
        store.complete(staged, None)
        reader = LocalObjects(str(tmp_path))
        assert reader.read("g/l0/big")[0] == big
        reader.close()
    finally:
        store.close()


def test_an_object_larger_than_a_staged_one_is_left_to_a_put(tmp_path: Path) -> None:
    # Its copy into the pack is the writer thread's, beside the caller's (see STAGE_BYTES).
    store = LocalObjects(str(tmp_path))
    try:
        assert store.stage("g/l0/big", [b"x" * (STAGE_BYTES + 1)]) is None
        assert store.list_all() == []
        staged = store.stage("g/l0/fits", [b"x" * STAGE_BYTES])
        assert staged is not None
        store.complete(staged, None)
    finally:
        store.close()


async def test_a_put_key_is_never_one_already_stored(tmp_path: Path) -> None:
    # The same rule for an object the writer thread takes (a put too large to write inline).
    store = LocalObjects(str(tmp_path))
    big = os.urandom(64 * 1024)
    try:
        await store.put("g/l0/packed", big)
        loose = tmp_path / "g" / "l0" / "loose"
        loose.write_bytes(b"a file of its own")
        with pytest.raises(ExistsError):
            await store.put("g/l0/loose", big)
        for fresh in (False, True):
            with pytest.raises(ExistsError):
                await store.put("g/l0/packed", big, fresh=fresh)
        await store.put("g/l0/new", big, fresh=True)
        assert store.read("g/l0/new")[0] == big
        assert loose.read_bytes() == b"a file of its own"
    finally:
        store.close()
