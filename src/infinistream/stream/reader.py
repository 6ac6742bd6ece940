"""Reading stored messages back from object storage, through the section cache.

A section up to `whole_section_bytes` is fetched whole with one ranged GET and cached, so a reader
walking a stream pays one GET per section, not one per message; a larger one (a compacted
object) is read in windows of about `window_bytes`. A compressed section (a stream with
compression) has no byte ranges for its records: it is always fetched whole, one GET of its
stored bytes, decoded, checked and cached as plain bytes, whatever its size.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from infinistream.storage import (
    ObjectStore,
    SectionCache,
    decode_stored,
    split_records,
    verify_records,
)
from infinistream.stream.view import Segment


class StoredMessage(msgspec.Struct, gc=False):
    subject: str
    seq: int
    headers: bytes
    data: bytes
    ts: int


# A stored message as its parts go on the wire: (seq, ts, subject, headers, data).
MessageParts = tuple[int, int, bytes, bytes, bytes]


class MessageReader:
    def __init__(
        self,
        objects: ObjectStore,
        cache: SectionCache[bytes],
        *,
        whole_section_bytes: int = 8 * 1024 * 1024,
        window_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self.objects = objects
        self.cache = cache
        self.whole_section_bytes = whole_section_bytes
        self.window_bytes = window_bytes

    async def read(
        self, seg: Segment, seq: int, following: Iterable[Segment] = ()
    ) -> StoredMessage:
        return (await self.read_run(seg, seq, seq, following))[0]

    async def read_run(
        self, seg: Segment, first: int, last: int, following: Iterable[Segment] = ()
    ) -> list[StoredMessage]:
        """Messages first..last that `seg` holds, including any that are deleted."""
        return [
            StoredMessage(str(subject, "utf-8"), seq, headers, data, ts)
            for seq, ts, subject, headers, data in await self.read_parts(
                seg, first, last, following
            )
        ]

    async def read_parts(
        self, seg: Segment, first: int, last: int, following: Iterable[Segment] = ()
    ) -> list[MessageParts]:
        """`read_run` as the bytes that go on the wire, without building messages.

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
        i, j = positions[0], positions[-1]
        start = seg.offsets[i]
        end = seg.offsets[j] + seg.lengths[j]
        section = self.cache.get(seg.obj, seg.offset)
        if section is None and seg.codec:
            section = await self._fetch_compressed(seg)
        elif section is None and seg.length <= self.whole_section_bytes:
            section = await self._fetch_window(seg, following)
        if section is not None:
            # The cache holds only checked plain bytes: sections this agent wrote, or fetched
            # and checked whole in `_fetch_window` or `_fetch_compressed`.
            return _parts(seg, section, 0, positions)
        part = await self.objects.get_range(seg.obj, seg.offset + start, seg.offset + end)
        # The range holds every record from first's to last's, refused ones too.
        verify_records(part, key=seg.obj, base_offset=seg.offset + start)
        return _parts(seg, part, start, positions)

    async def _fetch_compressed(self, seg: Segment) -> bytes:
        """GET a compressed section whole, decode and check it, and cache its plain bytes."""
        stored = await self.objects.get_range(seg.obj, seg.offset, seg.offset + seg.length)
        plain = decode_stored(stored, seg.codec, seg.plain_length, key=seg.obj, offset=seg.offset)
        # Offsets in errors are within the plain section: there are no others to give.
        verify_records(plain, key=seg.obj)
        self.cache.put(seg.obj, seg.offset, plain)
        return plain

    async def _fetch_window(self, seg: Segment, following: Iterable[Segment]) -> bytes:
        """GET `seg` with the segments that continue it in its object; cache each one."""
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
        data = await self.objects.get_range(seg.obj, seg.offset, end)
        view = memoryview(data)
        for part in window:
            at = part.offset - seg.offset
            section = view[at : at + part.length]
            # Checked once here, so every later read of the cached copy need not be.
            verify_records(section, key=part.obj, base_offset=part.offset)
            self.cache.put(part.obj, part.offset, bytes(section))
        return bytes(view[: seg.length]) if len(window) > 1 else data


def _parts(seg: Segment, buf: bytes, base: int, positions: range) -> list[MessageParts]:
    """The messages at `positions` of `seg`, whose section bytes from `base` are in `buf`."""
    p, q = positions.start, positions.stop
    seqs = range(seg.first + p, seg.first + q) if seg.seqs is None else seg.seqs[p:q]
    stamps = range(seg.ts + p, seg.ts + q) if seg.stamps is None else seg.stamps[p:q]
    records = split_records(buf, seg.offsets[p:q], seg.lengths[p:q], base, key=seg.obj)
    return [
        (seq, ts, subject, headers, data)
        for seq, ts, (subject, headers, data) in zip(seqs, stamps, records, strict=True)
    ]
