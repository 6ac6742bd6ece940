"""Writing objects into pack files: one thread, one fdatasync for every write it has in hand.

A put hands its object to the writer thread and waits. The thread takes every put waiting,
appends each to the pack being written in its key's directory (one `pwritev` of head and data),
then makes them durable with one `fdatasync` per pack, and answers them all: a group commit, so
concurrent flushes share the disk's flush. A pack is allocated ahead of use (its blocks
reserved), so an append changes neither the file's size nor its block map and `fdatasync`
writes the data alone: no journal commit, no directory fsync. Only creating a pack costs those,
and each time its reservation doubles (from `_FIRST_EXTENT` up to `pack_bytes`: a handful of
times per pack), so that a small store does not hold `pack_bytes` of disk per directory.

A sealed pack leaves the page cache: every page the kernel must find for an append costs
more than the copy into it, several microseconds where the machine is a VM whose free memory
goes back to its host (free page reporting), against under one for a page just given back, and
the pages of the pack sealed last are what the next appends get. Writing 4 KiB messages, that
was a third of the agent's CPU. The writer thread drops them: for a full pack that takes
milliseconds, which a seal on the loop's thread (a flush that fills its pack) would hold the
loop for. The pack being written stays cached (its readers and the retirement of its commit
records read it); the agent keeps recent sections in a cache of its own, and what readers ask
of sealed packs they read from the disk.

A flush's object is staged rather than put: appended on the caller's thread, not synced, so
that the one `fdatasync` after its commit record makes both durable (`stage`, `complete`).
The appended pages of a large one are handed to the disk at once (`sync_file_range`, start
only), so that by the time its commit is planned and recorded the sync has only the record's
page and the disk's flush left to wait for.

An object larger than `max_packed` (compaction output; every object, for a writer that packs
nothing: `max_packed` -1) goes to a file of its own, written under
a temporary name, fsynced, linked to its key (link(2) refuses an existing name: write-once) and
its directory fsynced.

When a pack has no room for the next object the thread starts another and seals the full one:
it appends the pack's index (`packformat`), makes it durable and cuts the file at its end, so
readers find every object of the pack with one read. A pack whose writer died is sealed by the
next writer of its directory (its lock, an flock held while a pack is written, tells which
packs have no writer), after the last whole entry: what a crash cut short was never
acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import fcntl
import logging
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from .checksum import crc32
from .fileid import FileId, file_id, file_id_at
from .libc import libc_function
from .packcommits import retire_commits_at
from .packformat import (
    PACK_PREFIX,
    IndexItem,
    encode_commit,
    encode_entry_head,
    encode_pack_header,
    encode_seal,
)
from .packindex import Entry, Pack, PackDirectory, PackIndex

__all__ = ["DEFAULT_MAX_PACKED", "DEFAULT_PACK_BYTES", "PackWriter", "Staged", "WriteOutcome"]

log = logging.getLogger(__name__)

DEFAULT_PACK_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_PACKED = 16 * 1024 * 1024
# A pack takes at most this share of the file system's free space when it is allocated.
_FREE_SHARE = 4
_MIN_PACK = 1024 * 1024
# A new pack reserves this much (or its first object), and doubles its reservation as it fills.
_FIRST_EXTENT = 1024 * 1024
# The writer thread ends after this long without work (a new put starts it again).
_IDLE_SECONDS = 10.0

# Buffers one pwritev takes (Linux: 1024); an object in more parts is joined first.
_IOV_MAX = 1000

# A staged object whose whole pages come to this much has them written back at once (see the
# module's docstring); a smaller one goes with its record in the sync's one write.
_EARLY_WRITEBACK_BYTES = 16 * 1024
_PAGE = os.sysconf("SC_PAGE_SIZE")
_SYNC_FILE_RANGE_WRITE = 2  # start writeback, wait for nothing
_sync_file_range = libc_function(
    "sync_file_range", [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint], ctypes.c_int
)

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC


class ExistsError(Exception):
    """The key is taken: objects are write-once."""


@dataclass(slots=True)
class WriteOutcome:
    """What became of one put: None, or the error it met."""

    error: BaseException | None = None


@dataclass(slots=True, eq=False)
class _Job:
    rel: str
    name: str
    key: str
    # The object: the concatenation of these, `size` bytes.
    parts: list[bytes | bytearray | memoryview]
    size: int
    done: Callable[[BaseException | None], None]
    # The caller vouches that no other writer can have made the key (`PackWriter.stage`).
    fresh: bool = False


@dataclass(slots=True, eq=False)
class _Active:
    """A pack this thread is appending to."""

    directory: PackDirectory
    pack: Pack
    fd: int  # read-write, holds the pack's flock
    end: int
    # Appends up to here go into the pack (its reserved blocks, or as far as it may grow).
    limit: int
    id: FileId  # of the file `fd` is open on, to tell it from one at the pack's path
    items: list[IndexItem] = field(default_factory=list)
    # Given up after a failed write or sync: what it holds may never reach the disk.
    failed: bool = False


@dataclass(slots=True, eq=False)
class Staged:
    """An object appended to a pack and not yet durable (`PackWriter.stage`)."""

    rel: str
    active: _Active


@dataclass(slots=True, frozen=True)
class _Record:
    """A commit record this writer wrote: the commit's revision, and where its entry is."""

    revision: int
    path: str
    offset: int


def _unanswered(_: BaseException | None) -> None:
    pass


def _release(fd: int, *, drop: bool) -> None:
    """Close a sealed pack's descriptor; with `drop`, its pages leave the cache first: all of
    it is synced, and they are the next appends' (see the module's docstring). Advice only: a
    refusal changes nothing written."""
    if drop:
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def fsync_directory(path: str) -> None:
    fd = os.open(path, _DIR_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(eq=False)
class PackWriter:
    """The writer thread of one local store."""

    root: str
    index: PackIndex
    _: KW_ONLY
    pack_bytes: int = DEFAULT_PACK_BYTES
    max_packed: int = DEFAULT_MAX_PACKED
    # Whether a key is already stored (packed or as a file of its own).
    exists: Callable[[str, str], bool]
    _jobs: deque[_Job] = field(init=False, default_factory=deque)
    _cond: threading.Condition = field(init=False, default_factory=threading.Condition)
    # Held while writing: by the thread, or by a caller writing inline.
    _io: threading.Lock = field(init=False, default_factory=threading.Lock)
    _thread: threading.Thread | None = field(init=False, default=None)
    _closing: bool = field(init=False, default=False)
    _active: dict[str, _Active] = field(init=False, default_factory=dict)
    # Directories whose entry in their parent is known to be durable.
    _durable_dirs: set[str] = field(init=False)
    # Directories whose packs without a writer have been sealed by this store.
    _swept: set[str] = field(init=False, default_factory=set)
    # Descriptors of sealed packs, for the thread to drop their pages and close
    # (`_release_later`).
    _to_release: deque[int] = field(init=False, default_factory=deque)
    # The commit records written and not yet retired, oldest first.
    _records: deque[_Record] = field(init=False, default_factory=deque)
    _records_lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._durable_dirs = {self.root}

    # -- the caller's side ----------------------------------------------------------------

    def put(
        self,
        rel: str,
        name: str,
        key: str,
        parts: list[bytes | bytearray | memoryview],
        size: int,
        *,
        inline: bool = False,
        fresh: bool = False,
    ) -> asyncio.Future[None]:
        """Store the concatenation of `parts` (`size` bytes) under `key` (`name` in directory
        `rel`); the future is done when it is durable, or fails with the OSError or
        ExistsError met.

        With `inline`, and the writer thread idle, the write and its fdatasync are made here,
        on the caller's thread, and the future is done on return: for a small object with
        nothing else to write, the hop to the thread and back costs more than the write (two
        wake-ups, each a wait for a core on a busy machine), and the caller has nothing to do
        meanwhile. Otherwise the writer thread takes it. `fresh` as for `stage`.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def settle(error: BaseException | None) -> None:
            if not future.done():
                if error is None:
                    future.set_result(None)
                else:
                    future.set_exception(error)

        if inline and not self._jobs and self._io.acquire(blocking=False):
            outcome: list[BaseException | None] = []
            try:
                self._write([_Job(rel, name, key, parts, size, outcome.append, fresh)])
            finally:
                self._io.release()
            settle(outcome[0])
            return future

        def done(error: BaseException | None) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(settle, error)

        self.submit(_Job(rel, name, key, parts, size, done, fresh))
        return future

    def stage(
        self,
        rel: str,
        name: str,
        key: str,
        parts: list[bytes | bytearray | memoryview],
        size: int,
        *,
        fresh: bool = False,
    ) -> Staged | None:
        """Append the object to its pack on the caller's thread, without making it durable:
        `complete` does, with a commit record after it (a large object's pages are handed to
        the disk meanwhile: `_write_back`). None, with nothing written, when the writer thread
        has work in hand or the object goes to a file of its own (the caller then uses `put`).
        Raises the OSError or ExistsError met.

        With `fresh` the caller vouches that no other writer can have made `key` (a flush's
        object key names its agent's random id, a counter and a nonce: `layout.l0_key`), and
        only the keys this store indexes are asked: looking for a file of a name never seen
        is a directory lookup of a cold name, about 20 µs on every flush."""
        if size > self.max_packed or self._jobs or not self._io.acquire(blocking=False):
            return None
        try:
            if self._taken(rel, key, fresh):
                raise ExistsError(key)
            active = self._append(_Job(rel, name, key, parts, size, _unanswered))
            self._write_back(active, active.items[-1].offset)
            # What `complete` checks before its sync, checked before the commit too: a pack no
            # reader would find fails the flush here, with nothing committed.
            try:
                self._check_in_place(active)
            except OSError:
                self._abandon(active)
                raise
        finally:
            self._io.release()
        return Staged(rel, active)

    @staticmethod
    def _write_back(active: _Active, start: int) -> None:
        """Start writing back the whole pages appended from `start`, waiting for nothing. The
        last page, which the commit record will share, stays for the sync: a page under
        writeback makes an append to it wait, and the sync would write it again. Only a
        start: the sync after is what makes the object durable, and what reports an I/O error
        (a `sync_file_range` that waited would take that report from it). Advice, so its
        refusal changes nothing."""
        end = active.end & -_PAGE
        if _sync_file_range is None or end - start < _EARLY_WRITEBACK_BYTES:
            return
        _sync_file_range(active.fd, start, end - start, _SYNC_FILE_RANGE_WRITE)

    def complete(self, staged: Staged, record: bytes | None, revision: int = 0) -> None:
        """Make the staged object durable, on the caller's thread, with `record` (a commit
        record, of the commit that took `revision`) appended after it: one fdatasync covers
        both. An OSError means the object's durability is unknown: its pack was given up after
        a failed write or sync. The record is kept in mind until `retire_records`."""
        with self._io:
            if staged.active.failed:
                raise OSError(errno.EIO, f"writing to {staged.active.pack.path} failed")
            at = 0  # where the record's entry starts
            if record is None:
                if staged.active.pack.sealed:
                    return  # sealing synced it
                active = staged.active
            else:
                # Sealing the object's pack to make room syncs the object.
                entry = encode_commit(record, time.time_ns())
                active = self._active_for(staged.rel, len(entry))
                if staged.active.failed:
                    raise OSError(errno.EIO, f"sealing {staged.active.pack.path} failed")
                at = active.end
                try:
                    if os.pwrite(active.fd, entry, at) != len(entry):
                        raise OSError(errno.EIO, f"short write to {active.pack.path}")
                except OSError:
                    self._abandon(active)
                    raise
                active.end = at + len(entry)
            try:
                self._check_in_place(active)
                os.fdatasync(active.fd)
            except OSError:
                self._abandon(active)
                raise
            if record is not None:
                with self._records_lock:
                    self._records.append(_Record(revision, active.pack.path, at))

    def retire_records(self, settled: int) -> int:
        """Retire the commit records this writer wrote for commits at or below revision
        `settled` (`packcommits.retire_commits_at`); how many. On any thread but the loop's:
        it syncs each pack it retires records of."""
        by_pack: dict[str, list[int]] = {}
        with self._records_lock:
            # One store's commits land in revision order: so do their records.
            while self._records and self._records[0].revision <= settled:
                record = self._records.popleft()
                by_pack.setdefault(record.path, []).append(record.offset)
        return sum(retire_commits_at(path, offsets) for path, offsets in by_pack.items())

    def submit(self, job: _Job) -> None:
        with self._cond:
            if self._closing:
                raise RuntimeError("the object store is closed")
            self._jobs.append(job)
            self._wake()

    def close(self) -> None:
        """Finish the puts in hand, seal the packs being written, and stop the thread."""
        with self._cond:
            self._closing = True
            thread = self._thread
            self._cond.notify()
        if thread is not None:
            thread.join()
        for active in list(self._active.values()):
            self._finish(active, release_now=True)
        self._active.clear()

    # -- the thread -----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._jobs and not self._to_release and not self._closing:
                    self._cond.wait(_IDLE_SECONDS)
                if not self._jobs and not self._to_release:
                    # Idle (or closing): the thread ends; the next put starts another.
                    self._thread = None
                    return
                jobs = list(self._jobs)
                self._jobs.clear()
                released = list(self._to_release)
                self._to_release.clear()
            if jobs:
                self._write_all(jobs)
            # After the puts in hand: they wait on the disk, the cache can wait on them.
            for fd in released:
                _release(fd, drop=True)

    def _write_all(self, jobs: list[_Job]) -> None:
        with self._io:
            try:
                self._write(jobs)
            except BaseException as exc:
                # Not an I/O error (those are each put's answer): a bug. Every put in hand is
                # answered with it, and the thread goes on, rather than leave them waiting for
                # ever.
                log.exception("pack writer failed")
                for job in jobs:
                    job.done(exc)
                for active in list(self._active.values()):
                    self._abandon(active)

    def _write(self, jobs: list[_Job]) -> None:
        outcomes: list[tuple[_Job, BaseException | None]] = []
        written: dict[int, tuple[_Active, list[_Job]]] = {}
        for job in jobs:
            try:
                if self._taken(job.rel, job.key, job.fresh):
                    raise ExistsError(job.key)
                if job.size > self.max_packed:
                    self._write_file(job)
                    outcomes.append((job, None))
                    continue
                active = self._append(job)
            except (OSError, ExistsError) as exc:
                outcomes.append((job, exc))
                continue
            written.setdefault(id(active), (active, []))[1].append(job)
        for active, appended in written.values():
            error: OSError | None = None
            if active.pack.sealed:
                # Filled by a later job of these and sealed then: the seal synced what was
                # appended (`_finish`) and let its descriptor go, whose number another file
                # may hold by now. Only a seal that failed leaves the appends unknown.
                if active.failed:
                    error = OSError(errno.EIO, f"sealing {active.pack.path} failed")
                outcomes += [(job, error) for job in appended]
                continue
            try:
                self._check_in_place(active)
                os.fdatasync(active.fd)
            except OSError as exc:
                # What the failed sync covered is in an unknown state: never sync this pack
                # again (its pages may be marked clean), start another.
                log.error("writing to %s failed: %s", active.pack.path, exc)
                error = exc
                self._abandon(active)
            outcomes += [(job, error) for job in appended]
        for job, err in outcomes:
            job.done(err)

    def _taken(self, rel: str, key: str, fresh: bool) -> bool:
        """Whether `key` is stored already: of a `fresh` key, only this store's index is
        asked (see `stage`)."""
        if fresh:
            return self.index.find(rel, key, refresh=False) is not None
        return self.exists(rel, key)

    @staticmethod
    def _check_in_place(active: _Active) -> None:
        """The pack must still be where readers look for it: appends to a pack whose file was
        moved or removed (its directory replaced, say) would be durable and unreadable."""
        try:
            here = file_id_at(active.pack.path)  # not os.stat: see storage.fileid
        except OSError as exc:
            raise OSError(exc.errno, f"pack {active.pack.path} is gone: {exc.strerror}") from exc
        if here != active.id:
            raise OSError(errno.ESTALE, f"pack {active.pack.path} was replaced")

    def _append(self, job: _Job) -> _Active:
        parts = job.parts
        length = job.size
        key = job.key.encode()
        now = time.time_ns()
        crc = 0
        for part in parts:
            crc = crc32(part, crc)
        head = encode_entry_head(key, length, now, crc)
        active = self._active_for(job.rel, len(head) + length)
        at = active.end
        if len(parts) >= _IOV_MAX:
            parts = [b"".join(parts)]
        try:
            n = os.pwritev(active.fd, [head, *parts], at)
        except OSError:
            self._abandon(active)
            raise
        if n != len(head) + length:
            self._abandon(active)
            raise OSError(errno.EIO, f"short write to {active.pack.path}")
        active.end = at + n
        active.items.append(IndexItem(at, job.key, length, now))
        self.index.add(
            active.directory,
            active.pack,
            job.key,
            Entry(active.pack, at, at + len(head), length, now),
        )
        return active

    def _active_for(self, rel: str, size: int) -> _Active:
        active = self._active.get(rel)
        if active is not None and active.end + size <= active.limit:
            return active
        if active is not None and active.end + size <= self.pack_bytes:
            self._grow(active, size)
            return active
        fresh = self._start_pack(rel, size)
        self._active[rel] = fresh
        if active is not None:
            self._finish(active)
        return fresh

    # -- packs ----------------------------------------------------------------------------

    def _start_pack(self, rel: str, first: int) -> _Active:
        directory = self.index.directory(rel)
        path = directory.path
        self._make_dirs(path)
        if rel not in self._swept:
            self._swept.add(rel)
            self._seal_orphans(directory)
        name = f"{PACK_PREFIX}{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}"
        full = os.path.join(path, name)
        fd = os.open(full, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            ident = file_id(fd)
            header = encode_pack_header(time.time_ns())
            os.pwrite(fd, header, 0)
            wanted = max(min(self.pack_bytes, _FIRST_EXTENT), first + len(header))
            allocated = self._allocate(fd, path, wanted)
            os.fsync(fd)
            fsync_directory(path)
            read_fd = os.open(full, os.O_RDONLY | os.O_CLOEXEC)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(full)
            raise
        pack = Pack(name, full, read_fd, own=True)
        self.index.adopt(directory, pack)
        limit = allocated or self.pack_bytes
        return _Active(directory, pack, fd, len(header), limit, ident)

    def _grow(self, active: _Active, size: int) -> None:
        """Double the pack's reservation (at least to fit `size` more, at most `pack_bytes`).
        The next fdatasync commits the new size with the data; without room to reserve, the
        appends grow the file themselves, as when a pack could reserve nothing."""
        wanted = min(self.pack_bytes, max(active.limit * 2, active.end + size))
        try:
            os.posix_fallocate(active.fd, active.limit, wanted - active.limit)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EOPNOTSUPP, errno.EINVAL):
                raise
        active.limit = wanted

    def _allocate(self, fd: int, path: str, wanted: int) -> int:
        """Reserve the pack's blocks; with little room left, fewer; with none, none (appends
        then grow the file, and their fdatasync commits the new size too)."""
        stat = os.statvfs(path)
        room = stat.f_bavail * stat.f_frsize // _FREE_SHARE
        size = max(min(wanted, room), _MIN_PACK)
        while size >= _MIN_PACK:
            try:
                os.posix_fallocate(fd, 0, size)
                return size
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EOPNOTSUPP, errno.EINVAL):
                    raise
            size //= 2
        return 0

    def _make_dirs(self, path: str) -> None:
        """Create the directory chain of `path`, each new link durable."""
        if path in self._durable_dirs:
            return
        missing = []
        d = path
        while d not in self._durable_dirs and not os.path.isdir(d):
            missing.append(d)
            d = os.path.dirname(d)
        os.makedirs(path, exist_ok=True)
        for created in reversed(missing):
            fsync_directory(os.path.dirname(created))
        if not missing:
            fsync_directory(os.path.dirname(path))
        self._durable_dirs.add(path)

    def _finish(self, active: _Active, *, release_now: bool = False) -> None:
        """Seal a full pack and let it go: its pages and descriptor on the thread, unless
        `release_now`."""
        try:
            self._seal(active.fd, active.end, active.items)
        except OSError as exc:
            log.warning("sealing %s failed: %s (readers scan it instead)", active.pack.path, exc)
            active.failed = True
        active.pack.own = False
        active.pack.sealed = True
        active.pack.scanned_to = active.end
        if active.failed or release_now:
            _release(active.fd, drop=not active.failed)
        else:
            self._release_later(active.fd)

    def _release_later(self, fd: int) -> None:
        """Hand a sealed pack's descriptor to the thread, which drops its pages from the cache
        and closes it: dropping a full pack's pages takes milliseconds (about 6 for 64 MiB),
        which a flush that fills a pack on the loop's thread would otherwise wait out."""
        with self._cond:
            if self._closing and self._thread is None:
                _release(fd, drop=True)
                return
            self._to_release.append(fd)
            self._wake()

    def _wake(self) -> None:
        """Start the thread, or wake it, for what was just handed to it (holding `_cond`)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="objects-pack-writer", daemon=True
            )
            self._thread.start()
        else:
            self._cond.notify()

    def _abandon(self, active: _Active) -> None:
        """Stop writing to a pack after an error; readers scan it up to its last whole entry."""
        for rel, a in list(self._active.items()):
            if a is active:
                del self._active[rel]
        active.failed = True
        active.pack.own = False
        active.pack.scanned_to = active.end
        with contextlib.suppress(OSError):
            os.close(active.fd)

    @staticmethod
    def _seal(fd: int, end: int, items: list[IndexItem]) -> None:
        seal = encode_seal(items, end, time.time_ns())
        os.pwrite(fd, seal, end)
        os.fdatasync(fd)
        os.ftruncate(fd, end + len(seal))
        os.fsync(fd)

    def _seal_orphans(self, directory: PackDirectory) -> None:
        """Seal the packs of `directory` whose writer is gone (none holds its lock)."""
        self.index.refresh(directory)
        for pack in list(directory.packs.values()):
            if pack.sealed or pack.own or pack.foreign:
                continue
            try:
                fd = os.open(pack.path, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # its writer is alive
                self.index.refresh(directory)  # read on to its last whole entry, under lock
                if pack.sealed:
                    continue
                items = [
                    IndexItem(e.offset, key, e.length, e.written_ns)
                    for key, e in directory.entries.items()
                    if e.pack is pack
                ]
                items.sort(key=lambda i: i.offset)
                self._seal(fd, pack.scanned_to, items)
                pack.sealed = True
                log.info("sealed %s after its writer stopped (%d objects)", pack.path, len(items))
            except OSError as exc:
                log.warning("sealing %s failed: %s", pack.path, exc)
            finally:
                os.close(fd)

    # -- objects of their own -------------------------------------------------------------

    def _write_file(self, job: _Job) -> None:
        path = os.path.join(self.root, job.rel)
        self._make_dirs(path)
        final = os.path.join(path, job.name)
        staging = f"{final}#{secrets.token_hex(6)}"
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            for part in job.parts:
                view = memoryview(part)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(staging, final)
        except FileExistsError:
            raise ExistsError(job.key) from None
        finally:
            os.unlink(staging)
        fsync_directory(path)
