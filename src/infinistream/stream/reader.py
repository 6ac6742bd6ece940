"""Reading stored messages back from object storage, through the section cache.

A section up to `whole_section_bytes` is fetched whole with one ranged GET and cached, so a reader
walking a stream pays one GET per section, not one per message; a larger one (a compacted
object) is read in windows of about `window_bytes`.
"""

from __future__ import annotations

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
        cache: SectionCache,
        *,
        whole_section_bytes: int = 8 * 1024 * 1024,
        window_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self.objects = objects
        self.cache = cache
        self.whole_section_bytes = whole_section_bytes
        self.window_bytes = window_bytes

    async def read(self, seg: Segment, seq: int) -> StoredMessage:
        return (await self.read_run(seg, seq, seq))[0]

    async def read_run(self, seg: Segment, first: int, last: int) -> list[StoredMessage]:
        """Messages first..last (all inside `seg`), including any that are deleted."""
        i, j = first - seg.first, last - seg.first
        start = seg.offsets[i]
        end = seg.offsets[j] + seg.lengths[j]
        section = self.cache.get((seg.obj, seg.offset))
        if section is not None:
            buf: bytes | memoryview = memoryview(section)[start:end]
        elif seg.length <= self.whole_section_bytes:
            section = await self.objects.get_range(seg.obj, seg.offset, seg.offset + seg.length)
            self.cache.put((seg.obj, seg.offset), section)
            buf = memoryview(section)[start:end]
        else:
            buf = await self.objects.get_range(seg.obj, seg.offset + start, seg.offset + end)
        records = decode_records(buf, j - i + 1)
        return [
            StoredMessage(r.subject, first + k, r.headers, r.data, seg.ts + (first + k - seg.first))
            for k, r in enumerate(records)
        ]
