"""Where each object of a local store's pack files is: an index kept by every process that reads,
within a budget.

Pack files (`packformat`) are written by several processes at once (agents, pipeline jobs), each
to packs of its own; any process reads any of them. Each store keeps, per directory, a short
row for every pack it knows (its name, when it was created and sealed, where its seal is), the
entries of the packs it writes, and, for the other packs, what it has read of them. A sealed
pack is read from its seal, which is kept as its bytes (about 100 bytes an object, searched for
a key's bytes without decoding the rest); a key found there is kept as an entry. What is kept
of sealed packs this store does not write has a budget (`--pack-index`): past it, the seals and
entries of the packs least recently used are let go and read again from the seal, one read, when
a key of theirs is asked for. A pack still being written by another process (or whose writer
died) is read head by head, from where it stopped, up to the first head that is not whole
(zeros: nothing written there yet; a head that does not match its checksum: a write that a
crash cut short, or that is still being made). The data of an entry is not checked here: a
reader checks the object it reads (its records carry checksums), and an entry whose data a
crash cut short was never acknowledged, so nothing refers to it.

A key not known yet costs a bounded number of file operations when its name starts with a time
(the layout's objects do: `storage.layout`) and the directory was listed after that time: the
seals of the two packs created nearest that time (the pack a writer was writing when it named the
object, or the next one), one read each, and a read of the entry's head to confirm it; those
two are found by bisection in the packs kept by creation time, and a seal's count of objects is
made only when a delete asks, so a cold lookup costs the same in a directory of ten packs or
ten thousand. Only when they do not hold it is the directory listed again for new packs and
the others read, nearest first, until it is found.

An entry known here may since have been deleted by another process: every read checks the
entry's state byte after reading its data (a delete marks the entry before it punches the data
out), so a read sees the bytes as written or none at all.

Reads take no lock (a large one runs on a worker thread while the event loop reads small ones).
A pack removed from its directory is forgotten at once but its descriptor is closed only a
while later (`CLOSE_AFTER`), so that a read that took the descriptor just before can never
read another file that reused its number; letting a pack's seal go keeps its descriptor.
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_right, insort
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .packformat import (
    ENTRY_HEAD_SIZE,
    FOOTER_SIZE,
    KIND_OBJECT,
    KIND_SEAL,
    PACK_HEADER_SIZE,
    STATE_DELETED,
    STATE_LIVE,
    STATE_OFFSET,
    IndexItem,
    data_checks,
    decode_seal,
    is_pack_name,
    parse_entry_head,
    parse_footer,
    parse_pack_header,
    seal_candidates,
    seal_count,
)

__all__ = ["DEFAULT_BUDGET", "Entry", "Pack", "PackDirectory", "PackIndex", "read_state"]

# How long the descriptor of a removed pack stays open after the pack is forgotten.
CLOSE_AFTER = 60.0
# Bytes read at once while walking the entries of a pack that has no seal.
_SCAN_CHUNK = 256 * 1024
# Bytes read first where a pack without a seal is read on from.
_PEEK = 4096
# What the budget holds by default: the seals of about 20,000 objects (90 bytes an object).
DEFAULT_BUDGET = 2 * 1024 * 1024
# What an entry kept by key costs beyond its key's characters (its Entry, its four integers,
# the key's str and the dict's slot), and a pack's row (tracemalloc, CPython 3.11).
ENTRY_BYTES = 270
PACK_BYTES = 400
# Packs a lookup reads before it lists the directory again (see the module docstring).
_NEAR = 2
# Clocks of the processes writing one directory may disagree by this much.
_SKEW_NS = 1_000_000_000


@dataclass(slots=True, eq=False)
class Pack:
    """One pack file of a directory, as this store knows it."""

    name: str
    path: str
    fd: int  # read-only
    # Its seal was read here, or it was sealed by this store's writer.
    sealed: bool = False
    # Entries before this offset are indexed (a pack without a seal is read on from here).
    scanned_to: int = PACK_HEADER_SIZE
    # Written by this store now: its entries are indexed as they are written, never scanned.
    own: bool = False
    # Objects of it not known deleted here (see `PackIndex.live`).
    live: int = 0
    # Where the objects its seal lists that `live` does not count yet start (-1: none): a
    # seal is counted when a delete asks, not when it is first read, which a cold read of
    # each pack would pay for otherwise (a walk of every item of the seal).
    uncounted_from: int = -1
    # Not a pack this build reads (another version): ignored.
    foreign: bool = False
    # When its writer created it (from its header; 0 for a foreign pack).
    created_ns: int = 0
    # When it was sealed (its seal's head; 0 until read).
    sealed_ns: int = 0
    # Every entry of it is in its directory's `entries` (this store wrote it and let none go).
    complete: bool = False
    # Where its seal entry starts and ends (0 until read), to read it again in one read.
    seal_at: int = 0
    seal_end: int = 0
    # The seal's index while kept here.
    seal: bytes | None = None
    # The keys of its entries kept in `entries`, and the budget's bytes they and the seal take.
    keys: list[str] = field(default_factory=list)
    charge: int = 0


@dataclass(slots=True, eq=False)
class Entry:
    """One object in a pack: where its data is."""

    pack: Pack
    offset: int  # of the entry's head
    data_offset: int
    length: int
    written_ns: int


@dataclass(slots=True, eq=False)
class PackDirectory:
    path: str
    entries: dict[str, Entry] = field(default_factory=dict)
    packs: dict[str, Pack] = field(default_factory=dict)
    # The same packs but the foreign ones, by when they were created: a key's nearest packs are
    # found by bisection, at a cost that does not grow with the packs of the directory.
    by_time: list[Pack] = field(default_factory=list)
    # When it was last listed (wall clock, as keys are named; 0: never).
    listed_ns: int = 0

    def add(self, pack: Pack) -> None:
        self.packs[pack.name] = pack
        if not pack.foreign:
            insort(self.by_time, pack, key=_created)

    def remove(self, pack: Pack) -> bool:
        """Forget `pack`; False if it was not known."""
        known = self.packs.pop(pack.name, None)
        if known is None:
            return False
        at = bisect_right(self.by_time, known.created_ns, key=_created)
        # Packs created at the same time sit together, just before `at`.
        while at > 0 and self.by_time[at - 1].created_ns == known.created_ns:
            at -= 1
            if self.by_time[at] is known:
                del self.by_time[at]
                break
        return True


def read_state(entry: Entry) -> int:
    """The entry's state byte as it is on disk now (0 if its pack is gone)."""
    fd = entry.pack.fd
    if fd < 0:
        return 0
    try:
        b = os.pread(fd, 1, entry.offset + STATE_OFFSET)
    except OSError:
        return 0
    return b[0] if b else 0


class PackIndex:
    """The entries of the packs under one root, by key, for one store, within `budget` bytes
    for what it keeps of packs it does not write."""

    def __init__(self, root: str, budget: int = DEFAULT_BUDGET) -> None:
        self.root = root
        self.budget = budget
        # Bytes held (see ENTRY_BYTES), pack rows, seals and entries.
        self.used = 0
        self.lock = threading.Lock()
        self._dirs: dict[str, PackDirectory] = {}
        # Packs holding seals or entries, least recently used first.
        self._held: dict[Pack, PackDirectory] = {}
        # Descriptors of removed packs, closed once their time comes (see CLOSE_AFTER).
        self._closing: deque[tuple[float, int]] = deque()

    def directory(self, rel: str) -> PackDirectory:
        """The directory `rel` (a key's parent: "" for the root), known or new."""
        d = self._dirs.get(rel)
        if d is None:
            with self.lock:
                d = self._dirs.get(rel)
                if d is None:
                    d = self._dirs[rel] = PackDirectory(os.path.join(self.root, rel))
        return d

    def find(self, rel: str, key: str, *, refresh: bool = True) -> Entry | None:
        """The entry of `key` in directory `rel`, looking in the packs' seals, and for new
        packs and entries, if it is not kept (and `refresh`)."""
        d = self.directory(rel)
        entry = d.entries.get(key)
        if entry is None and refresh:
            with self.lock:
                entry = d.entries.get(key) or self._look(d, key)
        if entry is not None:
            # Last out (no lock: a pack let go meanwhile is not put back).
            held = self._held.pop(entry.pack, None)
            if held is not None:
                self._held[entry.pack] = held
        return entry

    def read(self, entry: Entry, start: int, stop: int) -> bytes | None:
        """Bytes [start, stop) of the entry's data, or None if it is deleted (or its pack
        gone)."""
        fd = entry.pack.fd
        if fd < 0:
            return None
        data = os.pread(fd, stop - start, entry.data_offset + start) if stop > start else b""
        if read_state(entry) != STATE_LIVE:
            return None
        return data

    def add(self, d: PackDirectory, pack: Pack, key: str, entry: Entry) -> None:
        """Index an entry this store wrote."""
        with self.lock:
            self._keep(d, pack, key, entry)
            pack.live += 1

    def forget(self, d: PackDirectory, key: str, entry: Entry) -> None:
        """Drop an entry found deleted (by this store or another)."""
        with self.lock:
            if d.entries.get(key) is entry:
                del d.entries[key]
                entry.pack.live -= 1

    def adopt(self, d: PackDirectory, pack: Pack) -> None:
        """A pack this store has just created in `d`."""
        with self.lock:
            d.add(pack)
            pack.complete = True
            self.used += PACK_BYTES

    def close(self) -> None:
        with self.lock:
            while self._closing:
                os.close(self._closing.popleft()[1])
            for d in self._dirs.values():
                for pack in d.packs.values():
                    if pack.fd >= 0:
                        os.close(pack.fd)
                        pack.fd = -1
            self._dirs.clear()
            self._held.clear()
            self.used = 0

    # -- looking a key up -----------------------------------------------------------------

    def _look(self, d: PackDirectory, key: str) -> Entry | None:
        """Find a key not kept (lock held): in the packs nearest its time if the directory
        was listed after it, then in every pack after listing it again."""
        written_ns = key_time(key)
        tried: set[Pack] = set()
        if written_ns is not None and written_ns < d.listed_ns - _SKEW_NS:
            for pack in _nearest(d.by_time, written_ns, _may_hold(written_ns)):
                tried.add(pack)
                entry = self._look_in(d, pack, key)
                if entry is not None:
                    return entry
                if len(tried) == _NEAR:
                    break
        self._list(d)
        packs: Iterator[Pack] | list[Pack]
        if written_ns is None:
            packs = _searchable(d, None)
        else:
            packs = _nearest(d.by_time, written_ns, _may_hold(None))
        for pack in packs:
            if pack not in tried:
                entry = self._look_in(d, pack, key)
                if entry is not None:
                    return entry
        return None

    def _look_in(self, d: PackDirectory, pack: Pack, key: str) -> Entry | None:
        if not pack.sealed:
            self._read_on(d, pack)
            entry = d.entries.get(key)
            if entry is not None or not pack.sealed:
                return entry
        seal = pack.seal if pack.seal is not None else self._read_seal_again(d, pack)
        if seal is None:
            return None
        for item in seal_candidates(seal, key):
            if _head_lists(pack, item):
                entry = Entry(pack, item.offset, item.data_offset, item.length, item.written_ns)
                self._keep(d, pack, key, entry)
                return entry
        return None

    def _keep(self, d: PackDirectory, pack: Pack, key: str, entry: Entry) -> None:
        d.entries[key] = entry
        pack.keys.append(key)
        self._charge(d, pack, ENTRY_BYTES + len(key))

    def _charge(self, d: PackDirectory, pack: Pack, size: int) -> None:
        pack.charge += size
        self.used += size
        self._held.pop(pack, None)
        self._held[pack] = d
        if self.used > self.budget:
            self._let_go(pack)

    def _let_go(self, keep: Pack) -> None:
        """Let go of what is kept of the sealed packs least recently used, down to the
        budget."""
        # The victims first, from the least recently used end, then released: no copy of
        # every pack held (a lookup at the budget would cost as many steps as there are packs).
        over = self.used - self.budget
        victims = []
        for pack, d in self._held.items():
            if over <= 0:
                break
            if pack is not keep and pack.sealed and not pack.own:
                victims.append((pack, d))
                over -= pack.charge
        for pack, d in victims:
            self._release(d, pack)

    def _release(self, d: PackDirectory, pack: Pack) -> None:
        for key in pack.keys:
            entry = d.entries.get(key)
            if entry is not None and entry.pack is pack:
                del d.entries[key]
        pack.keys = []
        pack.seal = None
        pack.complete = False
        self.used -= pack.charge
        pack.charge = 0
        self._held.pop(pack, None)

    # -- reading the directory ------------------------------------------------------------

    def refresh(self, d: PackDirectory) -> None:
        """List the directory for new packs and read on in those without a seal."""
        with self.lock:
            self._list(d)
            for pack in _searchable(d, None):
                if not pack.sealed:
                    self._read_on(d, pack)

    def _list(self, d: PackDirectory) -> None:
        """Open the directory's new packs and forget the removed ones (lock held)."""
        listed_ns = time.time_ns()
        try:
            names = os.listdir(d.path)
        except (FileNotFoundError, NotADirectoryError):
            return
        present = set()
        for name in names:
            if is_pack_name(name):
                present.add(name)
                if name not in d.packs:
                    pack = _open_pack(d.path, name)
                    if pack is not None:
                        d.add(pack)
                        self.used += PACK_BYTES
        for name, pack in list(d.packs.items()):
            if name not in present and not pack.own:
                self._drop(d, pack)  # removed: every object of it was deleted
        d.listed_ns = listed_ns

    def _read_on(self, d: PackDirectory, pack: Pack) -> None:
        """Index what was added to `pack` since it was last read (lock held)."""
        fd = pack.fd
        size = os.fstat(fd).st_size
        if size >= PACK_HEADER_SIZE + FOOTER_SIZE:
            seal_at = parse_footer(os.pread(fd, FOOTER_SIZE, size - FOOTER_SIZE))
            if seal_at is not None and self._read_seal(d, pack, seal_at, size - FOOTER_SIZE):
                return
        pos = pack.scanned_to
        # A little first: most often nothing was added (zeros, the space the pack reserved).
        buf, buf_at = os.pread(fd, _PEEK, pos), pos
        at_eof = len(buf) < _PEEK
        while True:
            rel = pos - buf_at
            head = parse_entry_head(buf, rel)
            if head is None and not at_eof and _cut_short(buf, rel):
                buf, buf_at = os.pread(fd, _SCAN_CHUNK, pos), pos
                at_eof = len(buf) < _SCAN_CHUNK
                head = parse_entry_head(buf)
            if head is None or head.kind == KIND_SEAL:
                break  # zeros (nothing more written yet), a head cut short, or the seal
            if head.state == STATE_LIVE and head.kind == KIND_OBJECT:
                entry = Entry(pack, pos, pos + head.data_start, head.length, head.written_ns)
                self._keep(d, pack, head.key, entry)
                pack.live += 1
            pos += head.size
        pack.scanned_to = pos

    def _read_seal(self, d: PackDirectory, pack: Pack, seal_at: int, seal_end: int) -> bool:
        """Keep the seal of a pack first found sealed (lock held); False if it is damaged."""
        data = _seal_data(pack, seal_at, seal_end)
        if data is None:
            return False
        pack.uncounted_from = pack.scanned_to
        pack.sealed = True
        pack.scanned_to = seal_at
        pack.seal_at, pack.seal_end = seal_at, seal_end
        pack.seal = data
        self._charge(d, pack, len(data))
        return True

    def _read_seal_again(self, d: PackDirectory, pack: Pack) -> bytes | None:
        """The seal of a pack whose seal was let go, or that this store's writer sealed."""
        if not pack.seal_at:
            size = os.fstat(pack.fd).st_size
            if size < PACK_HEADER_SIZE + FOOTER_SIZE:
                return None
            seal_at = parse_footer(os.pread(pack.fd, FOOTER_SIZE, size - FOOTER_SIZE))
            if seal_at is None:
                return None
            pack.seal_at, pack.seal_end = seal_at, size - FOOTER_SIZE
        data = _seal_data(pack, pack.seal_at, pack.seal_end)
        if data is not None:
            pack.seal = data
            self._charge(d, pack, len(data))
        return data

    def live(self, pack: Pack) -> int:
        """How many objects of `pack` are not known deleted here (its seal counted now if it
        was not yet; if the seal no longer reads, what is known without it)."""
        with self.lock:
            if pack.uncounted_from >= 0 and pack.fd >= 0:
                data = pack.seal
                if data is None:
                    data = _seal_data(pack, pack.seal_at, pack.seal_end)
                if data is not None:
                    pack.live += seal_count(data, pack.uncounted_from)
                    pack.uncounted_from = -1
            return pack.live

    def drop(self, d: PackDirectory, pack: Pack) -> None:
        """Forget a pack that was removed, and its entries."""
        with self.lock:
            self._drop(d, pack)

    def _drop(self, d: PackDirectory, pack: Pack) -> None:
        if d.remove(pack):
            self.used -= PACK_BYTES
        self._release(d, pack)
        if pack.fd >= 0:
            self._closing.append((time.monotonic() + CLOSE_AFTER, pack.fd))
            pack.fd = -1
        now = time.monotonic()
        while self._closing and self._closing[0][0] <= now:
            os.close(self._closing.popleft()[1])

    def all_deleted(self, pack: Pack) -> bool:
        """Whether every object the seal of `pack` lists is deleted on disk."""
        items = self._seal_items(pack)
        if items is None:
            return False
        fd = pack.fd
        return all(
            os.pread(fd, 1, item.offset + STATE_OFFSET) == bytes([STATE_DELETED]) for item in items
        )

    def _seal_items(self, pack: Pack) -> list[IndexItem] | None:
        """Every object the seal of `pack` lists (its seal read again if not kept)."""
        data = pack.seal
        if data is None:
            fd = pack.fd
            size = os.fstat(fd).st_size
            seal_at = parse_footer(os.pread(fd, FOOTER_SIZE, max(size - FOOTER_SIZE, 0)))
            if seal_at is None:
                return None
            data = _seal_data(pack, seal_at, size - FOOTER_SIZE)
        return decode_seal(data) if data is not None else None

    # -- listing --------------------------------------------------------------------------

    def live_entries(self, d: PackDirectory) -> list[tuple[str, Entry]]:
        """Every entry of the directory's packs that is live on disk now (the sealed packs'
        read from their seals, and not kept)."""
        self.refresh(d)
        with self.lock:
            known = list(d.entries.items())
            sealed = [p for p in d.packs.values() if p.sealed and not p.complete]
        out = []
        seen = set()
        for key, entry in known:
            if read_state(entry) == STATE_LIVE:
                out.append((key, entry))
                seen.add(key)
            else:
                self.forget(d, key, entry)
        for pack in sealed:
            with self.lock:
                items = self._seal_items(pack) if pack.fd >= 0 else None
            for item in items or ():
                if item.key not in seen:
                    entry = Entry(pack, item.offset, item.data_offset, item.length, item.written_ns)
                    if read_state(entry) == STATE_LIVE:
                        out.append((item.key, entry))
                        seen.add(item.key)
        return out


def _searchable(d: PackDirectory, written_ns: int | None) -> list[Pack]:
    """The packs of `d` a key not kept may be in (see `_may_hold`)."""
    may_hold = _may_hold(written_ns)
    return [p for p in d.packs.values() if not p.foreign and may_hold(p)]


def _may_hold(written_ns: int | None) -> Callable[[Pack], bool]:
    """Whether a pack may hold a key not kept: not written here now, nor whole in `entries`,
    and, for a key named at `written_ns`, not sealed before it."""
    earliest = written_ns - _SKEW_NS if written_ns is not None else 0

    def may_hold(p: Pack) -> bool:
        return not (p.own or p.complete) and (p.sealed_ns or earliest) >= earliest

    return may_hold


def _cut_short(buf: bytes, at: int) -> bool:
    """Whether what `buf` holds from `at` may be the start of an entry it holds only part of
    (not zeros: nothing was written there yet)."""
    return (
        len(buf) - at < ENTRY_HEAD_SIZE or buf.count(0, at, at + ENTRY_HEAD_SIZE) < ENTRY_HEAD_SIZE
    )


def _seal_data(pack: Pack, seal_at: int, seal_end: int) -> bytes | None:
    """The checked data of the seal entry at [seal_at, seal_end) of a pack; None if damaged."""
    tail = os.pread(pack.fd, seal_end - seal_at, seal_at)
    head = parse_entry_head(tail)
    if head is None or head.kind != KIND_SEAL:
        return None
    data = memoryview(tail)[head.data_start :]
    if not data_checks(head, data):
        return None
    pack.sealed_ns = head.written_ns
    return bytes(data)


def _head_lists(pack: Pack, item: IndexItem) -> bool:
    """Whether the entry the seal's item points to is the item's object (its head, checked)."""
    size = item.data_offset - item.offset
    head = parse_entry_head(os.pread(pack.fd, size, item.offset))
    return head is not None and head.kind == KIND_OBJECT and head.key == item.key


def _open_pack(directory: str, name: str) -> Pack | None:
    path = os.path.join(directory, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None  # deleted (emptied) meanwhile
    pack = Pack(name, path, fd)
    header = os.pread(fd, PACK_HEADER_SIZE, 0)
    if len(header) < PACK_HEADER_SIZE:
        # Being created: its header is written before anything else, so look again later.
        os.close(fd)
        return None
    created_ns = parse_pack_header(header)
    if created_ns is None:
        pack.foreign = True
    else:
        pack.created_ns = created_ns
    return pack


def _created(pack: Pack) -> int:
    return pack.created_ns


def _nearest(
    by_time: list[Pack], written_ns: int, wanted: Callable[[Pack], bool]
) -> Iterator[Pack]:
    """The `wanted` packs of `by_time` (sorted by creation) in the order to look for an object
    named at `written_ns`: the last one created before it, the first one created after it, the
    one before that, and so on. A writer puts an object in the pack it is writing, created
    before the object was named, or, when that one filled up, in the next one: so with one
    writer the object is in one of the first two, however long the writer took between naming
    it and creating the next pack. Lazily, from a bisection: taking the first few costs the
    same with ten packs or ten thousand."""
    at = bisect_right(by_time, written_ns, key=_created)
    below, above = at - 1, at
    n = len(by_time)
    while below >= 0 or above < n:
        while below >= 0 and not wanted(by_time[below]):
            below -= 1
        if below >= 0:
            yield by_time[below]
            below -= 1
        while above < n and not wanted(by_time[above]):
            above += 1
        if above < n:
            yield by_time[above]
            above += 1


def key_time(key: str) -> int | None:
    """The time (ns) a key's name starts with, as the layout names objects
    (`{time:020d}-...`); None for a key named otherwise."""
    stamp = key.rpartition("/")[2][:20]
    return int(stamp) if len(stamp) == 20 and stamp.isdigit() else None
