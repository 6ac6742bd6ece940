"""GDPR erase: what an erase request is, where metadata keeps it, and how one is planned.

`STREAM.MSG.DELETE` without `no_erase` (nats-server's secure delete) and a purge request with
the header `InfiniStream-Erase: true` (InfiniStream's extension: nats-server refuses unknown
fields in a purge request's JSON, but ignores headers, so the same request purges there)
delete the messages as usual, by tombstone or by moving the stream's head, which every agent
sees through the stream's state before it serves anything: the mark is in metadata, not in any
agent. In the same transaction they record an `EraseRequest`:

    {group}/erase/{stream}/{requested_ns}{n}   EraseRequest

The request names sequences, never subjects or filters (they may be the personal data being
erased), and the objects that held those sequences when it was made (`holders`). The pipeline's
erase job rewrites every object still holding them and swaps the index (`rewritten_ns`); the
janitor deletes the old objects after its grace period, and the request is complete when none
of its holders exists any more (`completed_ns`). Requests live outside the stream's prefix so
that deleting the stream does not forget an erase that its objects still owe.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence

import msgspec

from infinistream.jetstream.times import go_time_or_zero
from infinistream.metadata.kv import Item, MetadataStore
from infinistream.protocol import header_value
from infinistream.stream.changes import Changes
from infinistream.stream.records import SEQ_WIDTH, Entry, IndexEntry
from infinistream.stream.sections import Segment
from infinistream.stream.view import StreamView

# The header that makes a STREAM.PURGE request an erase too.
ERASE_HEADER = b"InfiniStream-Erase"

# A run of erased sequences, first..last inclusive.
SeqRange = tuple[int, int]


class EraseRequest(msgspec.Struct, kw_only=True):
    stream: str
    # The stream's incarnation (StreamState.uid): sequences mean nothing in another one.
    uid: str
    ranges: list[SeqRange]
    requested_ns: int
    # "delete" (STREAM.MSG.DELETE) or "purge" (STREAM.PURGE with erase).
    kind: str
    # Objects known to hold (or to have held) records of these sequences.
    holders: list[str] = msgspec.field(default_factory=list)
    # When no index entry referenced a holder any more (the erase job swapped them away).
    rewritten_ns: int = 0
    # When no holder existed any more in object storage (the janitor deleted them).
    completed_ns: int = 0

    @property
    def sequences(self) -> int:
        return sum(last - first + 1 for first, last in self.ranges)

    def state(self) -> str:
        if self.completed_ns:
            return "complete"
        return "rewritten" if self.rewritten_ns else "pending"


encode_request = msgspec.msgpack.Encoder().encode
decode_request = msgspec.msgpack.Decoder(EraseRequest).decode


def wants_erase(headers: bytes | None) -> bool:
    """Whether a request's headers ask for an erase (`InfiniStream-Erase: true`)."""
    if not headers:
        return False
    value = header_value(headers, ERASE_HEADER)
    return value is not None and value.strip().lower() in (b"true", b"1", b"yes")


def erase_prefix(group: str, stream: str | None = None) -> str:
    """Every erase request of the group, or of one stream."""
    return f"{group}/erase/" if stream is None else f"{group}/erase/{stream}/"


def request_key(group: str, stream: str, requested_ns: int) -> str:
    # A random tail keeps two requests of the same nanosecond (two agents) apart.
    return f"{erase_prefix(group, stream)}{requested_ns:0{SEQ_WIDTH}d}{os.urandom(4).hex()}"


def ranges_of(seqs: Iterable[int]) -> list[SeqRange]:
    """Sequences as sorted runs."""
    return merge_ranges((seq, seq) for seq in seqs)


def merge_ranges(ranges: Iterable[SeqRange]) -> list[SeqRange]:
    """Ranges sorted, with overlapping and adjacent ones merged."""
    out: list[list[int]] = []
    for first, last in sorted(ranges):
        if out and first <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], last)
        else:
            out.append([first, last])
    return [(a, b) for a, b in out]


def erased_by(changes: Changes) -> list[SeqRange]:
    """What a planned delete or purge removes: the messages it kills and, when it moves the
    stream's head, everything below the new head (messages deleted earlier there included:
    their bytes are still in objects until compaction)."""
    ranges = [(seq, seq) for seq in changes.killed]
    if changes.first_seq > changes.view.first_seq:
        ranges.append((changes.view.first_seq, changes.first_seq - 1))
    return merge_ranges(ranges)


class SeqRanges:
    """Membership in a sorted list of ranges."""

    def __init__(self, ranges: Sequence[SeqRange]) -> None:
        self.ranges = sorted(ranges)
        self._firsts = [a for a, _ in self.ranges]

    def __contains__(self, seq: object) -> bool:
        if not isinstance(seq, int):
            return False
        i = bisect_right(self._firsts, seq) - 1
        return i >= 0 and seq <= self.ranges[i][1]

    def overlaps(self, first: int, last: int) -> bool:
        i = bisect_right(self._firsts, last) - 1
        return i >= 0 and self.ranges[i][1] >= first

    def __bool__(self) -> bool:
        return bool(self.ranges)


def holds(seg: Segment, erased: SeqRanges) -> bool:
    """Whether the section `seg` indexes holds a record of an erased sequence."""
    if not erased.overlaps(seg.first, seg.last):
        return False
    if seg.seqs is None:
        return True  # consecutive sequences first..last: the overlap is a record
    return any(seq in erased for seq in seg.seqs)


def entry_holds(
    key: str, entry: Entry, erased: SeqRanges, details: Mapping[str, Segment] | None = None
) -> bool:
    """Whether the section an index entry (at metadata key `key`) describes holds a record of
    an erased sequence. An entry whose records' sequences are listed in its record directory
    (gaps where compaction dropped deleted ones) needs that detail in `details`: without it the
    answer is yes whenever its bounds overlap."""
    if isinstance(entry, IndexEntry):
        return holds(Segment.from_entry(key, entry), erased)
    if not erased.overlaps(entry.first_seq, entry.last_seq):
        return False
    if not entry.explicit:
        return True  # consecutive sequences first..last: the overlap is a record
    seg = details.get(key) if details is not None else None
    return True if seg is None else holds(seg, erased)


def holders_in(view: StreamView, erased: SeqRanges) -> list[str]:
    """The objects whose sections, as the view indexes them, hold erased records."""
    found: set[str] = set()
    for first, last in erased.ranges:
        for section in view.sections_from(first, last):
            if section.obj not in found and holds(view.segment_of(section), erased):
                found.add(section.obj)
    return sorted(found)


def record_erase(changes: Changes, group: str, stream: str, kind: str) -> int:
    """Add an erase request for what `changes` deletes to `changes`, to be committed with it;
    returns how many sequences it names (0: nothing is deleted, nothing is recorded)."""
    ranges = erased_by(changes)
    if not ranges:
        return 0
    view = changes.view
    now = time.time_ns()
    request = EraseRequest(
        stream=stream,
        uid=view.uid,
        ranges=ranges,
        requested_ns=now,
        kind=kind,
        holders=holders_in(view, SeqRanges(ranges)),
    )
    changes.write(request_key(group, request.stream, now), encode_request(request))
    return request.sequences


async def erase_requests(
    meta: MetadataStore, group: str, stream: str | None = None
) -> list[tuple[Item, EraseRequest]]:
    """The erase requests of the group (or of one stream), oldest first within a stream."""
    items = await meta.range(erase_prefix(group, stream))
    return [(item, decode_request(item.value)) for item in items]


def request_to_wire(request: EraseRequest, deadline_ns: int = 0) -> dict[str, object]:
    """How the status API and reports show one request."""
    out: dict[str, object] = {
        "stream": request.stream,
        "kind": request.kind,
        "ranges": [list(r) for r in request.ranges],
        "sequences": request.sequences,
        "state": request.state(),
        "requested": go_time_or_zero(request.requested_ns),
        "holders": len(request.holders),
    }
    if request.rewritten_ns:
        out["rewritten"] = go_time_or_zero(request.rewritten_ns)
    if request.completed_ns:
        out["completed"] = go_time_or_zero(request.completed_ns)
    if deadline_ns:
        due = request.requested_ns + deadline_ns
        out["deadline"] = go_time_or_zero(due)
        out["overdue"] = is_overdue(request, deadline_ns, time.time_ns())
    return out


def is_overdue(request: EraseRequest, deadline_ns: int, now_ns: int) -> bool:
    done = request.completed_ns or now_ns
    return deadline_ns > 0 and done - request.requested_ns > deadline_ns


class EraseDeadline:
    """A health probe: the reason the agent is unhealthy when an erase request missed its
    deadline (complete late, or still not complete), else None."""

    def __init__(self, meta: MetadataStore, group: str, deadline_ns: int) -> None:
        self.meta = meta
        self.group = group
        self.deadline_ns = deadline_ns

    async def __call__(self) -> str | None:
        if self.deadline_ns <= 0:
            return None
        now = time.time_ns()
        late = [
            r
            for _, r in await erase_requests(self.meta, self.group)
            if not r.completed_ns and is_overdue(r, self.deadline_ns, now)
        ]
        if not late:
            return None
        oldest = min(late, key=lambda r: r.requested_ns)
        return (
            f"{len(late)} erase requests missed their deadline of "
            f"{_duration(self.deadline_ns)}; the oldest (stream {oldest.stream}, "
            f"{oldest.state()}) was made {_duration(now - oldest.requested_ns)} ago: run "
            "`infinistream pipeline erase` and the janitor"
        )


def _duration(ns: int) -> str:
    """A duration as an operator reads it: `24h`, `90m`, `1.5s`."""
    seconds = ns / 1e9
    if seconds >= 3600:
        return f"{seconds / 3600:.3g}h"
    if seconds >= 60:
        return f"{seconds / 60:.3g}m"
    return f"{seconds:.3g}s"
