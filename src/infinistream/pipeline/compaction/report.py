"""What compaction saves: object GETs per MB when a stream is replayed from the start.

A replay reads every live message through the agents' own `MessageReader` with a fresh
section cache, as a consumer catching up from the first message would, and counts the GETs
the object store sees (a section's record directory, when it has one, is a GET too: an agent
reads it before the section's records). Sections are read in runs of up to `RUN` messages
(what a consumer's batch reads; each run costs at most the GETs its messages would cost one by
one).
"""

from __future__ import annotations

from dataclasses import dataclass

from infinistream.storage import SectionCache
from infinistream.storage.objects import ObjectStore
from infinistream.stream.damage import DamageLog
from infinistream.stream.loader import StreamSnapshot
from infinistream.stream.reader import MessageReader

RUN = 512
MB = 1_000_000


@dataclass
class Replay:
    streams: int = 0
    messages: int = 0
    bytes: int = 0  # stored message bytes replayed
    gets: int = 0
    bytes_got: int = 0
    objects: int = 0  # distinct objects the streams' index entries reference
    entries: int = 0

    @property
    def gets_per_mb(self) -> float:
        return self.gets / (self.bytes / MB) if self.bytes else 0.0

    def line(self) -> str:
        return (
            f"{self.objects} objects, {self.entries} index entries; replaying "
            f"{self.messages} messages ({self.bytes / MB:.2f} MB) took {self.gets} GETs "
            f"({self.bytes_got / MB:.2f} MB fetched): {self.gets_per_mb:.2f} GETs per MB"
        )


async def replay(objects: ObjectStore, snapshots: list[StreamSnapshot]) -> Replay:
    out = Replay(streams=len(snapshots))
    before = objects.stats.snapshot()
    referenced: set[str] = set()
    for snap in snapshots:
        reader = MessageReader(objects, SectionCache(), DamageLog())
        out.entries += len(snap.entries)
        segments = [
            ref.segment() if ref.section().entry is None else await reader.segment(ref.section())
            for ref in snap.entries
        ]
        for k, (ref, seg) in enumerate(zip(snap.entries, segments, strict=True)):
            referenced.add(ref.entry.obj)
            positions = [p for p in range(len(seg.subjects)) if snap.is_live(seg.seq_at(p))]
            for i in range(0, len(positions), RUN):
                run = positions[i : i + RUN]
                first, last = seg.seq_at(run[0]), seg.seq_at(run[-1])
                # Like an agent's reader: segments that continue this one in its object come
                # in the same GET.
                for msg in await reader.read_run(seg, first, last, segments[k + 1 :]):
                    if snap.is_live(msg.seq):
                        out.messages += 1
                for p in run:
                    out.bytes += seg.lengths[p]
    spent = objects.stats.snapshot() - before
    out.gets, out.bytes_got, out.objects = spent.gets, spent.bytes_got, len(referenced)
    return out
