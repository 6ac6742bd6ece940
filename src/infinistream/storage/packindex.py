"""Where each object of a local store's pack files is: an index kept by every process that reads.

Pack files (`packformat`) are written by several processes at once (agents, pipeline jobs), each
to packs of its own; any process reads any of them. Each store keeps, per directory, the entries
of the packs it has read so far. A key it does not know makes it look again: it lists the
directory for new packs and reads the packs it has not read whole, until it finds the key. When
the key's name starts with a time (the layout's objects do: `storage.layout`) the packs created
just before and just after that time are read first, so a fresh store's first read costs a seal
or two, not one per pack of the directory. A sealed pack is read once, from its seal; one still
being written (or whose writer died) head by head, from where it stopped, up to the first head
that is not whole (zeros: nothing written there yet; a head that does not match its checksum: a
write that a crash cut short, or that is still being made). The data of an entry is not checked
here: a reader checks the object it reads (its records carry checksums), and an entry whose data
a crash cut short was never acknowledged, so nothing refers to it.

An entry known here may since have been deleted by another process: every read checks the
entry's state byte after reading its data (a delete marks the entry before it punches the data
out), so a read sees the bytes as written or none at all.

Reads take no lock (a large one runs on a worker thread while the event loop reads small ones).
A pack removed from its directory is forgotten at once but its descriptor is closed only a
while later (`CLOSE_AFTER`), so that a read that took the descriptor just before can never
read another file that reused its number.
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_right
from collections import deque
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
    data_checks,
    decode_seal,
    is_pack_name,
    parse_entry_head,
    parse_footer,
    parse_pack_header,
)

__all__ = ["Entry", "Pack", "PackDirectory", "PackIndex", "read_state"]

# How long the descriptor of a removed pack stays open after the pack is forgotten.
CLOSE_AFTER = 60.0
# Bytes read at once while walking the entries of a pack that has no seal.
_SCAN_CHUNK = 256 * 1024
# A key is at most this long (u16), so a head and its key always fit in one read of this.
_HEAD_MAX = ENTRY_HEAD_SIZE + 0xFFFF


@dataclass(slots=True, eq=False)
class Pack:
    """One pack file of a directory, as this store knows it."""

    name: str
    path: str
    fd: int  # read-only
    sealed: bool = False
    # Entries before this offset are indexed (a pack without a seal is read on from here).
    scanned_to: int = PACK_HEADER_SIZE
    # Written by this store: its entries are indexed as they are written, never scanned.
    own: bool = False
    # Entries of it indexed here and not deleted by this store.
    live: int = 0
    # Not a pack this build reads (another version): ignored.
    foreign: bool = False
    # When its writer created it (from its header; 0 for a foreign pack).
    created_ns: int = 0


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
    """The entries of the packs under one root, by key, for one store."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.lock = threading.Lock()
        self._dirs: dict[str, PackDirectory] = {}
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
        """The live entry of `key` in directory `rel`, looking for new packs and entries if
        it is not known yet (and `refresh`)."""
        d = self.directory(rel)
        entry = d.entries.get(key)
        if entry is None and refresh:
            self.refresh(d, key)
            entry = d.entries.get(key)
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
            d.entries[key] = entry
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
            d.packs[pack.name] = pack

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

    # -- reading the directory ------------------------------------------------------------

    def refresh(self, d: PackDirectory, key: str | None = None) -> None:
        """Open the directory's new packs and read on in those without a seal: all of them,
        or, looking for `key`, until it is found (see the module docstring)."""
        try:
            names = os.listdir(d.path)
        except (FileNotFoundError, NotADirectoryError):
            return
        with self.lock:
            present = set()
            for name in names:
                if is_pack_name(name):
                    present.add(name)
                    if name not in d.packs:
                        pack = _open_pack(d.path, name)
                        if pack is not None:
                            d.packs[name] = pack
            for name, pack in list(d.packs.items()):
                if name not in present and not pack.own:
                    self._drop(d, pack)  # removed: every object of it was deleted
            pending = [p for p in d.packs.values() if not (p.sealed or p.own or p.foreign)]
            written_ns = key_time(key) if key is not None else None
            if written_ns is not None:
                pending = _nearest_first(pending, written_ns)
            for pack in pending:
                self._read_on(d, pack)
                if key is not None and key in d.entries:
                    return

    def _read_on(self, d: PackDirectory, pack: Pack) -> None:
        """Index what was added to `pack` since it was last read (lock held)."""
        fd = pack.fd
        size = os.fstat(fd).st_size
        if size >= PACK_HEADER_SIZE + FOOTER_SIZE:
            seal_at = parse_footer(os.pread(fd, FOOTER_SIZE, size - FOOTER_SIZE))
            if seal_at is not None and self._read_seal(d, pack, seal_at, size):
                return
        pos = pack.scanned_to
        buf, buf_at, at_eof = b"", pos, False
        while True:
            rel = pos - buf_at
            if rel + _HEAD_MAX > len(buf) and not at_eof:
                buf, buf_at, rel = os.pread(fd, _SCAN_CHUNK, pos), pos, 0
                at_eof = len(buf) < _SCAN_CHUNK
            head = parse_entry_head(buf, rel)
            if head is None or head.kind == KIND_SEAL:
                break  # zeros (nothing more written yet), a head cut short, or the seal
            if head.state == STATE_LIVE and head.kind == KIND_OBJECT:
                self._index(d, pack, head.key, pos, head.data_start, head.length, head.written_ns)
            pos += head.size
        pack.scanned_to = pos

    def _read_seal(self, d: PackDirectory, pack: Pack, seal_at: int, size: int) -> bool:
        fd = pack.fd
        tail = os.pread(fd, size - FOOTER_SIZE - seal_at, seal_at)
        head = parse_entry_head(tail)
        if head is None or head.kind != KIND_SEAL:
            return False
        data = memoryview(tail)[head.data_start :]
        if not data_checks(head, data):
            return False
        items = decode_seal(bytes(data))
        if items is None:
            return False
        for item in items:
            if item.key not in d.entries and item.offset >= pack.scanned_to:
                start = item.data_offset - item.offset
                self._index(d, pack, item.key, item.offset, start, item.length, item.written_ns)
        pack.sealed = True
        pack.scanned_to = seal_at
        return True

    @staticmethod
    def _index(
        d: PackDirectory, pack: Pack, key: str, at: int, data_start: int, length: int, ns: int
    ) -> None:
        d.entries[key] = Entry(pack, at, at + data_start, length, ns)
        pack.live += 1

    def drop(self, d: PackDirectory, pack: Pack) -> None:
        """Forget a pack that was removed, and its entries."""
        with self.lock:
            self._drop(d, pack)

    def _drop(self, d: PackDirectory, pack: Pack) -> None:
        d.packs.pop(pack.name, None)
        for key in [k for k, e in d.entries.items() if e.pack is pack]:
            del d.entries[key]
        if pack.fd >= 0:
            self._closing.append((time.monotonic() + CLOSE_AFTER, pack.fd))
            pack.fd = -1
        now = time.monotonic()
        while self._closing and self._closing[0][0] <= now:
            os.close(self._closing.popleft()[1])

    def all_deleted(self, pack: Pack) -> bool:
        """Whether every object the seal of `pack` lists is deleted on disk."""
        fd = pack.fd
        size = os.fstat(fd).st_size
        seal_at = parse_footer(os.pread(fd, FOOTER_SIZE, max(size - FOOTER_SIZE, 0)))
        if seal_at is None:
            return False
        tail = os.pread(fd, size - FOOTER_SIZE - seal_at, seal_at)
        head = parse_entry_head(tail)
        if head is None or head.kind != KIND_SEAL:
            return False
        data = memoryview(tail)[head.data_start :]
        items = decode_seal(bytes(data)) if data_checks(head, data) else None
        if items is None:
            return False
        return all(
            os.pread(fd, 1, item.offset + STATE_OFFSET) == bytes([STATE_DELETED]) for item in items
        )

    # -- listing --------------------------------------------------------------------------

    def live_entries(self, d: PackDirectory) -> list[tuple[str, Entry]]:
        """Every entry of the directory's packs that is live on disk now."""
        self.refresh(d)
        with self.lock:
            known = list(d.entries.items())
        out = []
        for key, entry in known:
            if read_state(entry) == STATE_LIVE:
                out.append((key, entry))
            else:
                self.forget(d, key, entry)
        return out


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


def _nearest_first(packs: list[Pack], written_ns: int) -> list[Pack]:
    """`packs` in the order to look for an object named at `written_ns`: the last one created
    before it, the first one created after it, the one before that, and so on. A writer puts
    an object in the pack it is writing, created before the object was named, or, when that
    one filled up, in the next one: so with one writer the object is in one of the first two,
    however long the writer took between naming it and creating the next pack."""
    packs = sorted(packs, key=lambda p: p.created_ns)
    at = bisect_right([p.created_ns for p in packs], written_ns)
    before, after = packs[:at][::-1], packs[at:]
    order = [p for pair in zip(before, after, strict=False) for p in pair]
    shorter = min(len(before), len(after))
    return order + before[shorter:] + after[shorter:]


def key_time(key: str) -> int | None:
    """The time (ns) a key's name starts with, as the layout names objects
    (`{time:020d}-...`); None for a key named otherwise."""
    stamp = key.rpartition("/")[2][:20]
    return int(stamp) if len(stamp) == 20 and stamp.isdigit() else None
