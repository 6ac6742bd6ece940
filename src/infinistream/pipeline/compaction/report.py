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
from infinistream.stream.sections import Segment

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
        out.entries += len(snap.entries)
        referenced.update(ref.entry.obj for ref in snap.entries)
        await _replay_stream(MessageReader(objects, SectionCache(), DamageLog()), snap, out)
    spent = objects.stats.snapshot() - before
    out.gets, out.bytes_got, out.objects = spent.gets, spent.bytes_got, len(referenced)
    return out


async def _replay_stream(reader: MessageReader, snap: StreamSnapshot, out: Replay) -> None:
    # The detail of a section takes tens of bytes a message: only the sections one GET can
    # reach from the one read are held (a stream of 100 million held them all: 8 GB).
    held: dict[int, Segment] = {}

    async def segment(k: int) -> Segment:
        found = held.get(k)
        if found is None:
            ref = snap.entries[k]
            section = ref.section()
            found = ref.segment() if section.entry is None else await reader.segment(section)
            held[k] = found
        return found

    for k in range(len(snap.entries)):
        seg = await segment(k)
        # Like an agent's reader: segments that continue this one in its object come in the
        # same GET.
        following = [await segment(j) for j in _reach(snap, k, reader.window_bytes)]
        positions = [p for p in range(len(seg.subjects)) if snap.is_live(seg.seq_at(p))]
        for i in range(0, len(positions), RUN):
            run = positions[i : i + RUN]
            first, last = seg.seq_at(run[0]), seg.seq_at(run[-1])
            for msg in await reader.read_run(seg, first, last, following):
                if snap.is_live(msg.seq):
                    out.messages += 1
            for p in run:
                out.bytes += seg.lengths[p]
        del held[k]


def _reach(snap: StreamSnapshot, k: int, window_bytes: int) -> range:
    """The entries after entry `k` that a reader's GET of it may take along: those that
    continue it in its object, up to one window past it (the reader stops sooner)."""
    first = snap.entries[k].entry
    end, j = first.offset + first.length, k + 1
    while j < len(snap.entries) and end - first.offset < window_bytes:
        nxt = snap.entries[j].entry
        if nxt.obj != first.obj or nxt.offset != end:
            break
        end += nxt.length
        j += 1
    return range(k + 1, j)
