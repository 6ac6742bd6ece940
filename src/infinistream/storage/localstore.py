"""Objects in a local directory: appended to pack files, or each in a file of its own.

The embedded default keeps objects on the agent's disk. New objects are appended to pack files
(`packwriter`): a put costs one `fdatasync` of a file whose blocks are already reserved, where a
file per object costs an fsync of the file and one of its directory, each a journal commit.
Objects larger than `max_packed`, and every object of a store written before packs existed, are
files named by their keys; a store may hold both, and every operation here serves both.

Reading an object of a pack is a `pread` at the offset its entry gives (`packindex`), then a
look at the entry's state byte, so an object deleted meanwhile reads as missing, never as the
zeros its deletion left. Deleting one marks its entry deleted, punches its data out of the
pack (the blocks are freed; a file system that cannot punch gets zeros written instead) and
fsyncs the pack: the bytes are gone from the disk as with a file's unlink, which is what erase
needs. A sealed pack whose objects are all deleted is removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import weakref
from collections.abc import Callable, Iterator
from typing import NamedTuple

from .packcommits import commit_records, retire_commit_records
from .packformat import STATE_DELETED, STATE_LIVE, STATE_OFFSET, is_pack_name
from .packindex import DEFAULT_BUDGET, Entry, Pack, PackDirectory, PackIndex, read_state
from .packwriter import (
    DEFAULT_MAX_PACKED,
    DEFAULT_PACK_BYTES,
    ExistsError,
    PackWriter,
    Staged,
    fsync_directory,
)
from .punch import punch

__all__ = ["ExistsError", "Listed", "LocalObjects"]

# A put this small is written on the caller's thread when the writer thread is idle: a batch
# of a few messages, which a loop with little to do flushes (a busy one flushes larger ones).
INLINE_BYTES = 16 * 1024
# An object up to this size may be staged (appended on the caller's thread, made durable with
# its commit record by one sync). A larger one, which only a loop too busy to flush sooner
# lets a batch grow to (`--batch-bytes` is 4 MiB), is put: the writer thread copies it into
# the pack beside the loop, which is worth the second sync there. With 4 KiB messages and
# flushes of 4 MiB, eight connections of 500 in flight: 138,816-148,480 msg/s put against
# 125,712-135,882 staged (four alternating runs); one of 4,000: 129,352-146,160 against
# 115,589-137,929 (eight). With 512 in flight (flushes of 2.1 MB) staging gains a quarter.
STAGE_BYTES = 3 * 1024 * 1024


class Listed(NamedTuple):
    key: str
    size: int
    modified_ns: int


class LocalObjects:
    """The local directory `root` as an object store; see the module docstring.

    Reads, deletes and listings are plain calls (the caller picks the thread); a put goes to
    the store's writer thread and returns a future.
    """

    def __init__(
        self,
        root: str,
        *,
        pack_bytes: int = DEFAULT_PACK_BYTES,
        max_packed: int = DEFAULT_MAX_PACKED,
        index_budget: int = DEFAULT_BUDGET,
    ) -> None:
        self.root = root
        self.index = PackIndex(root, index_budget)
        self.writer = PackWriter(
            root, self.index, pack_bytes=pack_bytes, max_packed=max_packed, exists=self._exists
        )
        self._closer = weakref.finalize(self, _close, self.writer, self.index)

    def close(self) -> None:
        """Seal the packs being written and release every file this store holds."""
        self._closer()

    # -- writes ---------------------------------------------------------------------------

    def put(
        self,
        key: str,
        data: bytes | bytearray | memoryview | list[bytes],
        *,
        fresh: bool = False,
    ) -> asyncio.Future[None]:
        """Store the object (or the concatenation of a list of parts); the future is done once
        it is durable. A small one is written on the caller's thread when the writer thread
        has nothing in hand (see PackWriter.put; `fresh` as for `PackWriter.stage`)."""
        rel, _, name = key.rpartition("/")
        parts: list[bytes | bytearray | memoryview] = (
            list(data) if isinstance(data, list) else [data]
        )
        size = sum(map(len, parts))
        return self.writer.put(
            rel, name, key, parts, size, inline=size <= INLINE_BYTES, fresh=fresh
        )

    def stage(self, key: str, parts: list[bytes], *, fresh: bool = False) -> Staged | None:
        """Append an object of up to STAGE_BYTES to its pack without making it durable
        (`PackWriter.stage`, `fresh` as there); None when it must be `put` instead."""
        size = sum(map(len, parts))
        if size > STAGE_BYTES:
            return None
        rel, _, name = key.rpartition("/")
        return self.writer.stage(rel, name, key, list(parts), size, fresh=fresh)

    def complete(self, staged: Staged, record: bytes | None, revision: int = 0) -> None:
        """Make a staged object durable, with the commit record that refers to it if any (of
        the commit that took `revision`)."""
        self.writer.complete(staged, record, revision)

    def commit_records(self) -> Iterator[bytes]:
        """Every commit record the store's packs carry (`packcommits`)."""
        return commit_records(self.root)

    def retire_commit_records(self, needless: Callable[[bytes], bool]) -> int:
        """Retire the commit records `needless` says the metadata store needs no more
        (`packcommits`); how many."""
        return retire_commit_records(self.root, needless)

    def retire_own_records(self, settled: int) -> int:
        """Retire the commit records this store wrote for commits at or below revision
        `settled`, which the metadata store has made durable; how many."""
        return self.writer.retire_records(settled)

    def _exists(self, rel: str, key: str) -> bool:
        return self.index.find(rel, key, refresh=False) is not None or os.path.lexists(
            os.path.join(self.root, key)
        )

    def delete(self, key: str) -> None:
        """Delete the object; nothing to do if it is missing."""
        found = self._locate(key)
        if found is None:
            return
        if isinstance(found, str):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(found)
            return
        rel = key.rpartition("/")[0]
        self._delete_entry(self.index.directory(rel), key, found)

    def _delete_entry(self, d: PackDirectory, key: str, entry: Entry) -> None:
        pack = entry.pack
        try:
            fd = os.open(pack.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            self.index.forget(d, key, entry)
            return
        try:
            # Marked first: a reader that reads the data after the punch sees the mark too.
            # And durably: punched data whose mark a power loss took would read as a write cut
            # short, and end what recovery reads of its pack (`packcommits`).
            os.pwrite(fd, bytes([STATE_DELETED]), entry.offset + STATE_OFFSET)
            os.fdatasync(fd)
            punch(fd, entry.data_offset, entry.length)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.index.forget(d, key, entry)
        if pack.sealed and not pack.own and self.index.live(pack) <= 0:
            self._remove_if_empty(d, pack)

    def _remove_if_empty(self, d: PackDirectory, pack: Pack) -> None:
        """Remove a sealed pack once none of its entries is live (by any process's deletes)."""
        with self.index.lock:
            if any(e.pack is pack and read_state(e) == STATE_LIVE for e in d.entries.values()):
                return
            if pack.fd < 0 or not self.index.all_deleted(pack):
                return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(pack.path)
            fsync_directory(d.path)
        self.index.drop(d, pack)

    # -- reads ----------------------------------------------------------------------------

    def _locate(self, key: str) -> Entry | str | None:
        """The entry of `key` in a pack, the path of its own file, or None."""
        rel = key.rpartition("/")[0]
        entry = self.index.find(rel, key, refresh=False)
        if entry is not None:
            return entry
        path = os.path.join(self.root, key)
        if os.path.isfile(path):
            return path
        return self.index.find(rel, key)

    def _located(self, key: str) -> Entry | str:
        """`_locate`, for reads: FileNotFoundError if there is no such object."""
        found = self._locate(key)
        if found is None:
            raise _missing(key)
        return found

    def read(self, key: str, start: int = 0, end: int | None = None) -> tuple[bytes, int]:
        """Bytes [start, end) of the object (to its end if `end` is None, cut at its end if
        it is shorter), and its size. FileNotFoundError if there is no such object."""
        found = self._located(key)
        if isinstance(found, str):
            fd = os.open(found, os.O_RDONLY | os.O_CLOEXEC)
            try:
                size = os.fstat(fd).st_size
                stop = size if end is None else min(end, size)
                return (os.pread(fd, stop - start, start) if stop > start else b""), size
            finally:
                os.close(fd)
        size = found.length
        data = self.index.read(found, start, size if end is None else min(end, size))
        if data is None:
            rel = key.rpartition("/")[0]
            self.index.forget(self.index.directory(rel), key, found)
            raise _missing(key)
        return data, size

    def where(self, key: str) -> tuple[str, int, int]:
        """(file, offset of the object's first byte in it, length): where an object is on disk,
        for diagnostics and for tests that damage it there."""
        found = self._located(key)
        if isinstance(found, str):
            return found, 0, os.stat(found).st_size
        return found.pack.path, found.data_offset, found.length

    def stat(self, key: str) -> Listed:
        found = self._located(key)
        if isinstance(found, str):
            st = os.stat(found)
            return Listed(key, st.st_size, st.st_mtime_ns)
        if read_state(found) != STATE_LIVE:
            raise _missing(key)
        return Listed(key, found.length, found.written_ns)

    # -- listing --------------------------------------------------------------------------

    def list_all(self, prefix: str = "") -> list[Listed]:
        """Every object under `prefix` (whole path segments), in no particular order."""
        out: list[Listed] = []
        self._walk(os.path.join(self.root, prefix) if prefix else self.root, prefix, out)
        return out

    def list_with_delimiter(self, prefix: str = "") -> tuple[list[str], list[Listed]]:
        """The sub-prefixes directly under `prefix`, and the objects directly in it."""
        path = os.path.join(self.root, prefix) if prefix else self.root
        prefixes: list[str] = []
        objects: list[Listed] = []
        for name, kind, listed in self._scan(path, prefix):
            if kind == "dir":
                prefixes.append(f"{prefix}/{name}" if prefix else name)
            elif listed is not None:
                objects.append(listed)
        return prefixes, objects

    def _walk(self, path: str, rel: str, out: list[Listed]) -> None:
        for name, kind, listed in self._scan(path, rel):
            if kind == "dir":
                self._walk(os.path.join(path, name), f"{rel}/{name}" if rel else name, out)
            elif listed is not None:
                out.append(listed)

    def _scan(self, path: str, rel: str) -> Iterator[tuple[str, str, Listed | None]]:
        """(name, "dir" or "object", the object) of each thing in one directory."""
        try:
            it = os.scandir(path)
        except (FileNotFoundError, NotADirectoryError):
            return
        packed = False
        with it:
            for e in it:
                name = e.name
                if "#" in name:
                    packed = packed or is_pack_name(name)
                    continue  # a pack, or a file of its own still being written
                if e.is_dir(follow_symlinks=False):
                    yield name, "dir", None
                elif e.is_file(follow_symlinks=False):
                    try:
                        st = e.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    key = f"{rel}/{name}" if rel else name
                    yield name, "object", Listed(key, st.st_size, st.st_mtime_ns)
        if packed:
            for key, entry in self.index.live_entries(self.index.directory(rel)):
                yield key.rpartition("/")[2], "object", Listed(key, entry.length, entry.written_ns)


def _close(writer: PackWriter, index: PackIndex) -> None:
    writer.close()
    index.close()


def _missing(key: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, "no such object", key)
