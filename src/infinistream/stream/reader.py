"""Reading stored messages back from object storage, through the section cache.

A section up to `whole_section_bytes` is fetched whole with one ranged GET and cached, so a reader
walking a stream pays one GET per section, not one per message; a larger one (a compacted
object) is read in windows of about `window_bytes`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from infinistream.storage import ObjectStore, SectionCache, decode_records
from infinistream.stream.view import Segment


@dataclass(slots=True)
class StoredMessage:
    subject: str
    seq: int
    headers: bytes
    data: bytes
    ts: int


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
        """Messages first..last that `seg` holds, including any that are deleted.

        `following` are the segments after `seg` in the stream: those that continue it in the
        same object (the entries of one compacted section) are fetched with it in one GET of up
        to `window_bytes`, so a reader walking a compacted stream pays one GET per window.
        """
        positions = []
        for p in seg.positions_from(first):
            if seg.seq_at(p) > last:
                break
            positions.append(p)
        if not positions:
            return []
        i, j = positions[0], positions[-1]
        start = seg.offsets[i]
        end = seg.offsets[j] + seg.lengths[j]
        section = self.cache.get(seg.obj, seg.offset)
        if section is None and seg.length <= self.whole_section_bytes:
            section = await self._fetch_window(seg, following)
        if section is not None:
            buf = memoryview(section)
            base = 0
        else:
            buf = memoryview(
                await self.objects.get_range(seg.obj, seg.offset + start, seg.offset + end)
            )
            base = start
        out = []
        offsets, lengths = seg.offsets, seg.lengths
        # Records refused at commit may sit between two sequences, so each is cut out by its
        # own offset rather than decoding the span as one run.
        for pos in positions:
            at = offsets[pos] - base
            record = decode_records(buf[at : at + lengths[pos]], 1, key=seg.obj)[0]
            out.append(
                StoredMessage(
                    record.subject, seg.seq_at(pos), record.headers, record.data, seg.ts_at(pos)
                )
            )
        return out

    async def _fetch_window(self, seg: Segment, following: Iterable[Segment]) -> bytes:
        """GET `seg` with the segments that continue it in its object; cache each one."""
        window = [seg]
        end = seg.offset + seg.length
        for nxt in following:
            # A window reaches at least window_bytes (so a GET carries at least that much
            # when the object has it), then stops at the next entry boundary.
            if nxt.obj != seg.obj or nxt.offset != end or end - seg.offset >= self.window_bytes:
                break
            if self.cache.get(nxt.obj, nxt.offset) is not None:
                break
            window.append(nxt)
            end += nxt.length
        data = await self.objects.get_range(seg.obj, seg.offset, end)
        view = memoryview(data)
        for part in window:
            at = part.offset - seg.offset
            self.cache.put(part.obj, part.offset, bytes(view[at : at + part.length]))
        return bytes(view[: seg.length]) if len(window) > 1 else data
