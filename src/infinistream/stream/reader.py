"""Reading stored messages back from object storage, through the section cache.

A section up to `whole_section_bytes` is fetched whole with one ranged GET and cached, so a reader
walking a stream pays one GET per section, not one per message; a larger one (a compacted
object) is read in windows of about `window_bytes`. A compressed section (a stream with
compression) has no byte ranges for its records: it is always fetched whole, one GET of its
stored bytes, decoded, checked and cached as plain bytes, whatever its size. So is a sealed
section (encryption at rest): it is opened with the operator's keys, and one whose key this
agent does not hold raises `KeyRefusedError` (logged once per object, counted) rather than
being taken for damage (counted apart in `DamageLog.key_refusals`).

Each record is checked on its own before it is handed out, and only the records a read hands
out: a section read whole is cached as it came (`Unchecked`), and each of its records is checked
the first time a read asks for it, so a cold read of one message costs one record's check, not
its window's. A damaged one (its bytes changed, cut off by a truncated object, or its object
gone) is reported to the `DamageLog` and left out of a run, and a single read of it raises
`DamagedMessage`: the records around it are served as usual, and it is checked again (and
reported again) at every read. (A compressed section that no longer decodes loses all its
records: there is nothing to check them against.) A store that fails (an error, a timeout) is
not damage: that raises, and the read can be tried again.

A section whose entry points at its record directory (`SectionEntry`) has its detail read from
its object when a view asks for it (`segment`): with its records in the same GET when it is
small enough to be read whole, so a cold read of one message costs one metadata read (the
view's page of section summaries) and one GET.

With a zone cache (storage.zonecache), bytes are asked of the block's owner in this agent's zone
first, and of object storage when the cache has no answer. A peer is trusted no further than
its bytes check: a record from the cache that does not check is read again, with its section,
from object storage, and only damage found there is damage.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Awaitable, Callable, Iterable
from typing import ParamSpec

import msgspec

from infinistream.storage import (
    CorruptObjectError,
    Encryption,
    KeyRefusedError,
    ObjectNotFoundError,
    ObjectStore,
    ObjectStoreError,
    RecordDirectory,
    SectionCache,
    ZoneCache,
    decode_stored,
    intact_records,
    open_section_directory,
    record_damage,
    split_numbered,
)
from infinistream.stream.damage import Damage, DamagedMessage, DamageLog
from infinistream.stream.records import SectionEntry, stream_of_index_key
from infinistream.stream.sections import Section, Segment
from infinistream.stream.view import StreamView

log = logging.getLogger(__name__)

P = ParamSpec("P")


class StoredMessage(msgspec.Struct, gc=False):
    subject: str
    seq: int
    headers: bytes
    data: bytes
    ts: int


# A stored message as its parts go on the wire: (seq, ts, subject, headers, data).
MessageParts = tuple[int, int, bytes, bytes, bytes]


class _Fetched(msgspec.Struct, gc=False):
    """Bytes of an object range, shorter than asked when the object is (`missing` says why)."""

    data: bytes
    missing: str = ""
    cached: bool = False  # from the zone cache, not from object storage


def _as_messages(
    read: Callable[P, Awaitable[list[MessageParts]]],
) -> Callable[P, Awaitable[list[StoredMessage]]]:
    """A read of message parts that gives the messages instead, with the same arguments."""

    async def messages(*args: P.args, **kwargs: P.kwargs) -> list[StoredMessage]:
        return [
            StoredMessage(str(subject, "utf-8"), seq, headers, data, ts)
            for seq, ts, subject, headers, data in await read(*args, **kwargs)
        ]

    return messages


class MessageReader:
    def __init__(
        self,
        objects: ObjectStore,
        cache: SectionCache[bytes],
        damage: DamageLog,
        *,
        whole_section_bytes: int = 8 * 1024 * 1024,
        window_bytes: int = 4 * 1024 * 1024,
        encryption: Encryption | None = None,
        zone: ZoneCache | None = None,
    ) -> None:
        self.objects = objects
        # Opens sealed sections; a section whose key is not held is refused, not damage.
        self.encryption = encryption
        self._refused_logged: set[str] = set()
        self.zone = zone
        self.cache = cache
        self.damage = damage
        self.whole_section_bytes = whole_section_bytes
        self.window_bytes = window_bytes

    async def segment(self, section: Section) -> Segment:
        """The detail of a section whose entry points at its record directory. A section small
        enough to be read whole comes with its directory in one GET, and its records go to the
        section cache (unchecked), so a cold read of one of its messages costs that one GET;
        a larger one's directory alone is read. From object storage itself: a directory has no
        checksum of its own for a peer's bytes to be checked against.

        A directory that cannot be read (its object gone or damaged) gives a detail whose
        records are all unreadable: reads of them report the damage, as for damaged records,
        rather than fail for ever."""
        entry = section.entry
        if entry is None:
            raise ValueError(f"index entry {section.key} holds its detail itself")
        try:
            if entry.length + entry.dir_length <= self.whole_section_bytes:
                return await self._section_with_records(section.key, entry)
            return Segment.from_directory(section.key, entry, await self._directory(entry))
        except KeyRefusedError as exc:
            self._refused(entry.obj, exc)
            raise
        except ObjectNotFoundError as exc:
            log.error("record directory of index entry %s unreadable: %s", section.key, exc)
            return Segment.recovered(section.key, entry, ())
        except (CorruptObjectError, ValueError) as exc:
            log.error("record directory of index entry %s unreadable: %s", section.key, exc)
            return Segment.recovered(section.key, entry, await self._intact_records(entry))

    async def _directory(self, entry: SectionEntry) -> RecordDirectory:
        """A section's record directory alone, from object storage itself (one ranged GET);
        an object cut short before the directory's end is damage, not a failing store."""
        start = entry.dir_offset
        fetched = await self._fetch(entry.obj, start, start + entry.dir_length, direct=True)
        if fetched.missing == "object missing":
            raise ObjectNotFoundError(entry.obj)
        if len(fetched.data) != entry.dir_length:
            raise CorruptObjectError("record directory cut short", key=entry.obj, offset=start)
        return open_section_directory(
            fetched.data, key=entry.obj, offset=start, keys=self.encryption
        )

    async def _intact_records(self, entry: SectionEntry) -> list[tuple[str, int, int]]:
        """The records that start a section whose directory is lost, up to the first damaged
        one (a truncated object keeps those before the cut), from object storage itself."""
        end = entry.offset + entry.length
        fetched = await self._fetch(entry.obj, entry.offset, end, direct=True)
        if entry.codec and fetched.missing:
            return []  # a compressed or sealed section decodes whole or not at all
        plain = self._plain(entry, fetched.data)
        return [] if plain is None else intact_records(plain, entry.records)

    def _plain(self, entry: SectionEntry, stored: bytes) -> bytes | None:
        """A section's records from its stored bytes (decoded, if compressed or sealed); None
        if they do not decode."""
        if not entry.codec:
            return stored
        try:
            return decode_stored(
                stored,
                entry.codec,
                entry.plain_length,
                key=entry.obj,
                offset=entry.offset,
                keys=self.encryption,
            )
        except CorruptObjectError:
            return None

    async def _section_with_records(self, key: str, entry: SectionEntry) -> Segment:
        """A section's detail from one GET of its records and directory (through the zone
        cache: a peer's directory is taken only if its checksum matches the entry's); the
        records cached, to be checked record by record when read."""
        end = entry.dir_offset + entry.dir_length
        fetched = await self._fetch(entry.obj, entry.offset, end)
        if fetched.cached and not _directory_matches(fetched.data, entry):
            fetched = await self._fetch(entry.obj, entry.offset, end, direct=True)
        blob = fetched.data
        if fetched.missing == "object missing":
            raise ObjectNotFoundError(entry.obj)
        if len(blob) != end - entry.offset:
            raise CorruptObjectError("section and directory cut short", key=entry.obj)
        directory = open_section_directory(
            blob[entry.length :], key=entry.obj, offset=entry.dir_offset, keys=self.encryption
        )
        seg = Segment.from_directory(key, entry, directory)
        plain = self._plain(entry, blob[: entry.length])
        if plain is None:
            return seg  # its reads find the damage, record by record
        if len(plain) == entry.plain_length:
            self.cache.put(seg.obj, seg.offset, Unchecked(plain, len(seg.lengths), fetched.cached))
        return seg

    async def read_message(self, view: StreamView, seq: int) -> StoredMessage | None:
        """Message `seq` of the stream `view` pictures: None if it is not there (deleted, or
        outside the live range); raises `DamagedMessage` if its record is damaged.

        It asks the view where the message is, so it raises `Missing` when the view must read
        that first: run it inside `Catalog.answer_async`."""
        if not view.is_live(seq):
            return None
        seg = view.segment_for(seq, lone=True)
        if seg is None:
            return None
        return await self.read(seg, seq, view.following(seg))

    async def read(
        self, seg: Segment, seq: int, following: Iterable[Segment] = ()
    ) -> StoredMessage:
        """Message `seq` of `seg`; raises `DamagedMessage` if its record is damaged."""
        damaged: list[Damage] = []
        found = await self.read_run(seg, seq, seq, following, damaged)
        if damaged:
            raise DamagedMessage(damaged[0])
        return found[0]

    async def read_parts(
        self,
        seg: Segment,
        first: int,
        last: int,
        following: Iterable[Segment] = (),
        damaged: list[Damage] | None = None,
    ) -> list[MessageParts]:
        """The bytes on the wire of the messages first..last that `seg` holds, including any
        that are deleted, less any that are damaged (added to `damaged`).

        `following` are the segments after `seg` in the stream: those that continue it in the
        same object (the entries of one compacted section) are fetched with it in one GET of up
        to `window_bytes`, so a reader walking a compacted stream pays one GET per window.
        """
        # The positions holding first..last: from first's to just before last + 1's.
        from_first = seg.positions_from(first)
        positions = range(
            from_first.start, min(seg.positions_from(last + 1).start, from_first.stop)
        )
        if not positions:
            return []
        section = self.cache.get(seg.obj, seg.offset)
        if section is not None:
            return await self._from_cache(seg, section, positions, damaged)
        if seg.codec or seg.length <= self.whole_section_bytes:
            fetched = await self._fetch_section(seg, following)
            if fetched.missing:
                return self._checked_parts(seg, fetched, 0, positions, damaged)
            return await self._from_cache(seg, fetched.data, positions, damaged)
        i, j = positions[0], positions[-1]
        start = seg.offsets[i]
        end = seg.offsets[j] + seg.lengths[j]
        # The range holds every record from first's to last's, refused ones too.
        fetched = await self._fetch(seg.obj, seg.offset + start, seg.offset + end)
        if fetched.cached and not _records_intact(seg, fetched.data, start, positions):
            fetched = await self._fetch(seg.obj, seg.offset + start, seg.offset + end, direct=True)
        return self._checked_parts(seg, fetched, start, positions, damaged)

    # Messages first..last that `seg` holds, including any that are deleted, less any that
    # are damaged (added to `damaged`): `read_parts` made messages.
    read_run = _as_messages(read_parts)

    async def _from_cache(
        self, seg: Segment, section: bytes, positions: range, damaged: list[Damage] | None
    ) -> list[MessageParts]:
        """The messages at `positions` of a section whose plain bytes are `section`: those
        of a section held `Unchecked` are checked first, the ones not checked before. Damage in
        bytes a peer gave is read again from the store, which alone decides."""
        if not isinstance(section, Unchecked):
            # Bytes this agent wrote itself: checked when they were encoded.
            return _parts(seg, section, 0, positions)
        if section.check(seg, positions):
            return _parts(seg, section, 0, positions)
        if section.from_peer:
            fetched = await self._fetch_section(seg, (), direct=True)
            if fetched.missing:
                return self._checked_parts(seg, fetched, 0, positions, damaged)
            section = fetched.data
            assert isinstance(section, Unchecked)
            if section.check(seg, positions):
                return _parts(seg, section, 0, positions)
        return self._checked_parts(seg, _Fetched(section), 0, positions, damaged)

    def _refused(self, obj: str, exc: KeyRefusedError) -> None:
        """A read of `obj` refused, never served: the bytes may be fine and the key wrong.
        Said once per object (a consumer retrying would flood the log), counted every time."""
        self.damage.key_refusals += 1
        if obj not in self._refused_logged and len(self._refused_logged) < 10_000:
            self._refused_logged.add(obj)
            log.error("read refused: %s", exc)

    async def _fetch_section(
        self, seg: Segment, following: Iterable[Segment], *, direct: bool = False
    ) -> _Fetched:
        """`seg`'s plain bytes, fetched whole (with the sections that continue it in its
        object, for a plain one) and cached unchecked; none, with why, when they cannot be
        (the object is gone or short, or a compressed section does not decode)."""
        if seg.codec:
            return await self._fetch_compressed(seg, direct=direct)
        return await self._fetch_window(seg, following, direct=direct)

    async def _fetch_compressed(self, seg: Segment, *, direct: bool) -> _Fetched:
        """GET a compressed section whole and decode it; cache its plain bytes (unchecked:
        each record is checked when it is first read)."""
        fetched = await self._fetch(seg.obj, seg.offset, seg.offset + seg.length, direct=direct)
        if fetched.missing:
            return _Fetched(b"", fetched.missing)
        try:
            plain = decode_stored(
                fetched.data,
                seg.codec,
                seg.plain_length,
                key=seg.obj,
                offset=seg.offset,
                keys=self.encryption,
            )
        except KeyRefusedError as exc:
            if fetched.cached:
                # A peer's bytes naming a key not held: asked again of the store, which decides.
                return await self._fetch_compressed(seg, direct=True)
            self._refused(seg.obj, exc)
            raise
        except CorruptObjectError as exc:
            if fetched.cached:
                return await self._fetch_compressed(seg, direct=True)
            return _Fetched(b"", f"compressed section does not decode ({exc.detail})")
        if len(plain) != seg.plain_length:
            return _Fetched(b"", "compressed section decodes short")
        section = Unchecked(plain, len(seg.lengths), fetched.cached)
        self.cache.put(seg.obj, seg.offset, section)
        return _Fetched(section, cached=fetched.cached)

    async def _fetch_window(
        self, seg: Segment, following: Iterable[Segment], *, direct: bool
    ) -> _Fetched:
        """GET `seg` with the segments that continue it in its object; cache each of them
        whole (unchecked: each record is checked when it is first read)."""
        window = [seg]
        end = seg.offset + seg.length
        for nxt in following:
            # A window reaches at least window_bytes (so a GET carries at least that much
            # when the object has it), then stops at the next entry boundary.
            if (
                nxt.obj != seg.obj
                or nxt.offset != end
                or nxt.codec
                or end - seg.offset >= self.window_bytes
            ):
                break
            if self.cache.get(nxt.obj, nxt.offset) is not None:
                break
            window.append(nxt)
            end += nxt.length
        fetched = await self._fetch(seg.obj, seg.offset, end, direct=direct)
        if fetched.missing:
            return _Fetched(bytes(fetched.data[: seg.length]), fetched.missing, fetched.cached)
        view = memoryview(fetched.data)
        mine: Unchecked | None = None
        for part in window:
            at = part.offset - seg.offset
            section = Unchecked(view[at : at + part.length], len(part.lengths), fetched.cached)
            self.cache.put(part.obj, part.offset, section)
            mine = section if part is seg else mine
        assert mine is not None
        return _Fetched(mine, cached=fetched.cached)

    def cache_section(self, seg: Segment, plain: bytes) -> None:
        """Keep the plain bytes of a section read along with its record directory (one GET of
        both), to be checked record by record when read."""
        self.cache.put(seg.obj, seg.offset, Unchecked(plain, len(seg.lengths), False))

    async def _fetch(self, obj: str, start: int, end: int, *, direct: bool = False) -> _Fetched:
        """Bytes [start, end) of `obj`; fewer when the object is shorter than its index says,
        none when it is gone. Any other failure raises: it is the store's, not the data's.

        From the zone cache unless `direct` or the cache has no answer: then from the store. (The
        cache raises the store's error when this agent owns the block and its GET failed: a
        direct read would make the same request.)"""
        try:
            if self.zone is not None and not direct:
                data = await self.zone.read(obj, start, end)
                if data is not None:
                    return _Fetched(data, cached=True)
            return _Fetched(await self.objects.get_range(obj, start, end))
        except ObjectNotFoundError:
            return _Fetched(b"", "object missing")
        except ObjectStoreError as exc:
            failure = exc
        # A range past the end fails like any other GET: ask whether the object is short.
        try:
            size = (await self.objects.head(obj)).size
        except ObjectNotFoundError:
            return _Fetched(b"", "object missing")
        if size >= end:
            raise failure
        data = await self.objects.get_range(obj, start, size) if size > start else b""
        return _Fetched(data, f"object cut short at {size} bytes")

    def _checked_parts(
        self,
        seg: Segment,
        fetched: _Fetched,
        base: int,
        positions: range,
        damaged: list[Damage] | None,
    ) -> list[MessageParts]:
        """`_parts` of the intact records; each damaged one is reported and left out."""
        buf = fetched.data
        intact: list[int] = []
        for p in positions:
            at = seg.offsets[p] - base
            reason = record_damage(buf, at, seg.lengths[p])
            if reason is None:
                intact.append(p)
                continue
            if fetched.missing and at + seg.lengths[p] > len(buf):
                reason = fetched.missing
            damage = Damage(
                stream_of_index_key(seg.key),
                seg.seq_at(p),
                seg.obj,
                seg.offset + seg.offsets[p],
                reason,
            )
            self.damage.found(damage)
            if damaged is not None:
                damaged.append(damage)
        if len(intact) == len(positions):
            return _parts(seg, buf, base, positions)
        out: list[MessageParts] = []
        # Runs of consecutive intact positions, each split in one call.
        run_start = 0
        for k in range(1, len(intact) + 1):
            if k == len(intact) or intact[k] != intact[k - 1] + 1:
                out += _parts(seg, buf, base, range(intact[run_start], intact[k - 1] + 1))
                run_start = k
        return out


class Unchecked(bytes):
    """A section's plain bytes as read from an object, kept in the section cache before each
    of its records was checked: `check` checks the records a read asks for that were not
    checked yet, and remembers those that pass, so a cold read costs the checks of the
    records it returns, not of its whole window. Bytes a peer (the zone cache) gave are
    `from_peer`: damage found in them is read again from object storage."""

    checked: bytearray
    from_peer: bool

    def __new__(cls, data: bytes | memoryview, records: int, from_peer: bool) -> Unchecked:
        self = super().__new__(cls, data)
        self.checked = bytearray(records)
        self.from_peer = from_peer
        return self

    def check(self, seg: Segment, positions: range) -> bool:
        """Whether every record at `positions` is intact (each checked once while it is)."""
        if len(self) != seg.plain_length:
            return False
        checked, offsets, lengths = self.checked, seg.offsets, seg.lengths
        intact = True
        for p in positions:
            if not checked[p]:
                if record_damage(self, offsets[p], lengths[p]) is None:
                    checked[p] = 1
                else:
                    intact = False
        return intact


def _directory_matches(blob: bytes, entry: SectionEntry) -> bool:
    """Whether a section's bytes with its directory (`blob`) end in the directory its entry
    describes, by the directory's checksum (an entry that does not know it trusts none)."""
    stored = blob[entry.length : entry.length + entry.dir_length]
    return (
        bool(entry.dir_crc)
        and len(stored) == entry.dir_length
        and (zlib.crc32(stored) == entry.dir_crc)
    )


def _records_intact(seg: Segment, buf: bytes, base: int, positions: range) -> bool:
    """Whether the records at `positions`, whose section bytes from `base` are in `buf`, check."""
    return all(record_damage(buf, seg.offsets[p] - base, seg.lengths[p]) is None for p in positions)


def _parts(seg: Segment, buf: bytes, base: int, positions: range) -> list[MessageParts]:
    """The messages at `positions` of `seg`, whose section bytes from `base` are in `buf`."""
    p, q = positions.start, positions.stop
    seqs = range(seg.first + p, seg.first + q) if seg.seqs is None else seg.seqs[p:q]
    stamps = range(seg.ts + p, seg.ts + q) if seg.stamps is None else seg.stamps[p:q]
    return split_numbered(buf, seg.offsets[p:q], seg.lengths[p:q], seqs, stamps, base, key=seg.obj)
