"""The blocks a cache agent owns: aligned ranges of objects, each read with one GET and kept in
memory and on local disk within size limits.

A block is ``[index * block_bytes, (index + 1) * block_bytes)`` of an object, cut at its end: an
L0 object (a write buffer flush, at most batch_bytes plus its index) is one block, read whole
with one GET; a large compacted object is several. Objects are write-once (invariant 3), so a
cached block never goes stale: there is eviction, never invalidation, except that a GDPR erase
`evict`s the blocks of the objects that held the erased bytes, from memory and from disk, and
keeps them out until `readmit` (until the janitor deletes the object it can still be read:
its ranges are then served straight from the store, never kept).

Readers of one block at once share one GET. Memory holds the most recently used blocks; disk
holds more, and a block evicted from memory is read back from disk rather than from the store.
The disk directory is this process's alone (`claim_directory` locks it) and starts empty: an
agent holds nothing that cannot be rebuilt.

Memory holds the blocks the zone's other agents asked for, not those the agent read for itself
(`read_range(..., own=True)`): what it reads it keeps in its section cache and index cache,
so a block in memory too would be a second copy of the same bytes, outside their budgets. Its
own blocks go to disk, which saves the GETs (another stream's section in the same object is
read from the file); with no disk, to memory, the only place that can save them.

Nothing here is trusted beyond what the object store returned: readers check every record.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import logging
import os
import shutil
from collections import OrderedDict
from pathlib import Path
from typing import IO, Any

from .cache import SectionCache
from .cachestats import ZoneCacheStats
from .objects import ObjectStore

__all__ = ["DEFAULT_BLOCK_BYTES", "BlockStore", "claim_directory"]

log = logging.getLogger(__name__)

DEFAULT_BLOCK_BYTES = 8 * 1024 * 1024
"""Larger than an L0 object (batch_bytes, 4 MB by default, plus its index), so an uncompacted
object is one block and one GET; small enough that a single message read from a large
compacted object does not pull much more than the reader's own window (4 MB) with it. Every
agent of a pool must use the same size: readers split ranges at the owners' block bounds."""

BlockKey = tuple[str, int]


def claim_directory(root: Path) -> tuple[Path, IO[bytes]]:
    """A directory under ``root`` that no other live process uses, emptied, and the open lock
    file that keeps it ours while this process lives (the lock goes with the process, kill -9
    included, so the next agent can take the directory over)."""
    root.mkdir(parents=True, exist_ok=True)
    n = 0
    while True:
        path = root / str(n)
        path.mkdir(exist_ok=True)
        lock = open(path / "lock", "wb")  # noqa: SIM115 - held open for the process's life
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            n += 1
            continue
        for entry in path.iterdir():
            if entry.name != "lock":
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        return path, lock


class BlockStore:
    def __init__(
        self,
        objects: ObjectStore,
        *,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        memory_bytes: int,
        disk_bytes: int,
        directory: Path | None,
        stats: ZoneCacheStats,
    ) -> None:
        if block_bytes <= 0:
            raise ValueError(f"block_bytes must be positive, got {block_bytes}")
        self.objects = objects
        self.block_bytes = block_bytes
        self.memory: SectionCache[bytes] = SectionCache(memory_bytes)
        self.disk_limit = disk_bytes if directory is not None else 0
        self.directory = directory
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
        self._disk: OrderedDict[BlockKey, int] = OrderedDict()  # block -> bytes on disk
        # Blocks whose file is being written: read from here until it is there.
        self._writing: dict[BlockKey, bytes] = {}
        self.stats = stats
        self._inflight: dict[BlockKey, asyncio.Task[bytes]] = {}
        self._writes: set[asyncio.Task[Any]] = set()

    async def get(self, key: str, index: int, *, own: bool = False) -> bytes:
        """Block ``index`` of object ``key`` (shorter than block_bytes at the object's end);
        kept in memory unless `own` (this agent's read, see the module docstring) and there is
        a disk to keep it. Raises the store's error (ObjectNotFoundError, ...) when the GET
        fails, a block past the end included; a failed GET is not kept."""
        data = self.memory.get(key, index)
        if data is not None:
            self.stats.memory_hits += 1
            return data
        block = (key, index)
        load = self._inflight.get(block)
        if load is None:
            # A task of its own, so that a reader that gives up (a peer's request that timed
            # out) does not cancel the GET the others wait on.
            memory = not own or self.disk_limit == 0
            load = asyncio.get_running_loop().create_task(self._load(key, index, memory))
            self._inflight[block] = load
            load.add_done_callback(lambda done: self._loaded(block, done))
        return await asyncio.shield(load)

    def _loaded(self, block: BlockKey, load: asyncio.Task[bytes]) -> None:
        del self._inflight[block]
        if not load.cancelled():
            load.exception()  # retrieved, even when every reader has gone

    async def _load(self, key: str, index: int, memory: bool) -> bytes:
        block = (key, index)
        writing = self._writing.get(block)
        if writing is not None:
            self.stats.disk_hits += 1
            if memory:
                self._keep_in_memory(block, writing)
            return writing
        if block in self._disk:
            try:
                data = await asyncio.to_thread(self._path(block).read_bytes)
            except OSError:
                self._forget(block)
            else:
                self._disk.move_to_end(block)
                self.stats.disk_hits += 1
                if memory:
                    self._keep_in_memory(block, data)
                return data
        start = index * self.block_bytes
        data, _ = await self.objects.get_block(key, start, self.block_bytes)
        self.stats.block_gets += 1
        self.stats.block_bytes_got += len(data)
        if not self.memory.refuses(key):
            if memory:
                self._keep_in_memory(block, data)
            self._keep_on_disk(block, data)
        return data

    async def read_range(self, key: str, start: int, end: int, *, own: bool = False) -> bytes:
        """Bytes [start, end) of `key`, within one block (fewer at the object's end); `own`
        as for `get`."""
        index = start // self.block_bytes
        if not 0 <= start < end or (end - 1) // self.block_bytes != index:
            raise ValueError(f"range [{start}, {end}) is not within one block")
        base = index * self.block_bytes
        block = (key, index)
        if own and block in self._disk and block not in self.memory and block not in self._writing:
            # Only the range, not the whole block: nothing keeps the rest (a compacted
            # object's block is 8 MB, the reader's window about 1 MB).
            try:
                data = await asyncio.to_thread(
                    _read_file_range, self._path(block), start - base, end - start
                )
            except OSError:
                self._forget(block)
            else:
                self._disk.move_to_end(block)
                self.stats.disk_hits += 1
                return data
        data = await self.get(key, index, own=own)
        return data[start - base : end - base]

    def _keep_in_memory(self, block: BlockKey, data: bytes) -> None:
        self.memory.put(block[0], block[1], data)
        self.stats.memory_bytes = self.memory.size_bytes

    # --- disk ------------------------------------------------------------------------------

    def _path(self, block: BlockKey) -> Path:
        assert self.directory is not None
        name = hashlib.blake2b(block[0].encode(), digest_size=16).hexdigest()
        return self.directory / f"{name}.{block[1]}"

    def _keep_on_disk(self, block: BlockKey, data: bytes) -> None:
        if not data or len(data) > self.disk_limit or block in self._disk:
            return
        self._disk[block] = len(data)
        self.stats.disk_bytes += len(data)
        evicted: list[BlockKey] = []
        while self.stats.disk_bytes > self.disk_limit:
            old, size = self._disk.popitem(last=False)
            self.stats.disk_bytes -= size
            evicted.append(old)
        gone = [self._path(b) for b in evicted]
        self._writing[block] = data
        task = asyncio.get_running_loop().create_task(
            asyncio.to_thread(self._write, self._path(block), data, gone)
        )
        self._writes.add(task)
        task.add_done_callback(self._written(block))

    def _written(self, block: BlockKey) -> Any:
        def done(task: asyncio.Task[None]) -> None:
            self._writes.discard(task)
            self._writing.pop(block, None)
            if task.cancelled() or task.exception() is not None:
                if not task.cancelled():
                    log.warning("cache block not written to disk: %s", task.exception())
                self._forget(block)
            elif block not in self._disk or self.memory.refuses(block[0]):
                # Evicted while being written, by the disk's limit or by `evict`: writes run
                # on threads of their own, in any order, so the file may have come after the
                # unlink that was meant for it.
                self._forget(block)
                self._path(block).unlink(missing_ok=True)

        return done

    def evict(self, key: str) -> int:
        """Drop every block of object `key`, from memory and from disk (the files unlinked),
        and keep none until `readmit`; how many blocks went."""
        gone = self.memory.evict(key)
        self.stats.memory_bytes = self.memory.size_bytes
        for block in [b for b in self._writing if b[0] == key]:
            del self._writing[block]
        for block in [b for b in self._disk if b[0] == key]:
            self._forget(block)
            # A few files, rarely (an erase): unlinked here rather than on a thread, so the
            # bytes are gone from disk when this returns.
            self._path(block).unlink(missing_ok=True)
            gone += 1
        return gone

    def readmit(self, key: str) -> None:
        self.memory.readmit(key)

    def _forget(self, block: BlockKey) -> None:
        size = self._disk.pop(block, None)
        if size is not None:
            self.stats.disk_bytes -= size

    @staticmethod
    def _write(path: Path, data: bytes, evicted: list[Path]) -> None:
        for old in evicted:
            old.unlink(missing_ok=True)
        # Written aside and renamed, so a reader never sees half a block. No fsync: a block
        # lost in a crash is read from the store again.
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    async def drain(self) -> None:
        """Wait for the disk writes under way."""
        while self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)


def _read_file_range(path: Path, offset: int, size: int) -> bytes:
    with open(path, "rb") as f:
        return os.pread(f.fileno(), size, offset)
