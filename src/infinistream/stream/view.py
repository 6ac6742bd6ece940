"""An agent's in-memory picture of one stream, rebuilt from metadata alone.

A `StreamView` answers the questions that publishing and reading ask of a stream (where does
sequence N live, which messages of subject S are still there, how many subjects are live)
without a round trip to the metadata store. It holds nothing that metadata does not: an agent
can drop it and rebuild it at any time (invariant 4). Changes come in two ways: `apply` after
this agent's own commit, and `catch_up` helpers for what other agents committed.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from itertools import accumulate

from infinistream.jetstream.subjects import matches
from infinistream.stream.records import IndexEntry, StreamState
from infinistream.stream.sizes import record_sizes


class Segment:
    """The index of one IndexEntry: the live-range sequences held by one object section.

    Position i holds sequence `seq_at(i)`: first + i for a section written by an agent, or an
    explicit list for a compacted one, where deleted messages left gaps.
    """

    __slots__ = (
        "codec",
        "first",
        "key",
        "last",
        "length",
        "lengths",
        "obj",
        "offset",
        "offsets",
        "plain_length",
        "seqs",
        "sizes",
        "stamps",
        "subjects",
        "ts",
    )

    def __init__(
        self,
        *,
        key: str,
        obj: str,
        offset: int,
        length: int,
        first: int,
        ts: int,
        subjects: list[str],
        offsets: array[int],
        lengths: array[int],
        seqs: array[int] | None = None,
        stamps: array[int] | None = None,
        codec: int = 0,
        plain_length: int | None = None,
        sizes: array[int] | None = None,
    ) -> None:
        self.key = key
        self.obj = obj
        self.offset = offset
        self.length = length
        # A compressed section (codec != 0) is `length` bytes in its object and is read
        # whole; `plain_length` bytes of records once decoded, which `offsets` point into.
        self.codec = codec
        self.plain_length = length if plain_length is None else plain_length
        self.seqs = seqs
        self.stamps = stamps
        self.first = first if seqs is None or not seqs else seqs[0]
        self.last = self.first + len(subjects) - 1 if seqs is None or not seqs else seqs[-1]
        self.ts = ts
        self.subjects = subjects  # per position, interned
        self.offsets = offsets  # per position: record offset within the section
        self.lengths = lengths  # per position: record length
        # per position: the bytes the message counts for (stream.sizes)
        self.sizes = record_sizes(b"", lengths) if sizes is None else sizes

    def index_of(self, seq: int) -> int | None:
        """The position of `seq` in this segment, or None if it holds no such sequence."""
        if self.seqs is None:
            return seq - self.first if self.first <= seq <= self.last else None
        i = bisect_left(self.seqs, seq)
        return i if i < len(self.seqs) and self.seqs[i] == seq else None

    def seq_at(self, i: int) -> int:
        return self.first + i if self.seqs is None else self.seqs[i]

    def ts_at(self, i: int) -> int:
        return self.ts + i if self.stamps is None else self.stamps[i]

    def positions_from(self, seq: int) -> range:
        """Positions holding sequences >= seq."""
        if self.seqs is None:
            return range(max(0, seq - self.first), len(self.subjects))
        return range(bisect_left(self.seqs, seq), len(self.subjects))

    @classmethod
    def from_entry(cls, key: str, entry: IndexEntry) -> Segment:
        all_lengths = entry.length_array()
        all_sizes = record_sizes(entry.sizes, all_lengths)
        all_offsets = array("I", accumulate(all_lengths, initial=0))
        names = entry.subjects
        ids = entry.subject_id_array()
        if entry.skipped:
            skipped = set(entry.skipped)
            kept = [i for i in range(len(all_lengths)) if i not in skipped]
            offsets = array("I", (all_offsets[i] for i in kept))
            lengths = array("I", (all_lengths[i] for i in kept))
            sizes = array("I", (all_sizes[i] for i in kept))
            subjects = [names[ids[i]] for i in kept]
        else:
            offsets = all_offsets[:-1]
            lengths = all_lengths
            sizes = all_sizes
            subjects = [names[i] for i in ids]
        return cls(
            key=key,
            obj=entry.obj,
            offset=entry.offset,
            length=entry.length,
            first=entry.first_seq,
            ts=entry.ts,
            subjects=subjects,
            offsets=offsets,
            lengths=lengths,
            seqs=entry.seq_array(),
            stamps=entry.timestamp_array(),
            codec=entry.codec,
            plain_length=all_offsets[-1] if entry.codec else entry.length,
            sizes=sizes,
        )


class SubjectSeqs:
    """Sequences of one subject in order; `head` skips ones known dead, `live` counts the rest."""

    __slots__ = ("head", "live", "seqs")

    def __init__(self) -> None:
        self.seqs: array[int] = array("Q")
        self.head = 0
        self.live = 0


class StreamView:
    def __init__(self, state: StreamState, state_rev: int) -> None:
        self.uid = state.uid
        self.state = state
        self.state_rev = state_rev
        self.first_seq = state.first_seq
        self.last_seq = state.last_seq
        self.last_ts = state.last_ts
        self.tomb_rev = state.tomb_rev
        self.msgs = 0
        self.bytes = 0
        self.num_subjects = 0
        self.segments: list[Segment] = []
        self._firsts: list[int] = []
        self.tombs: set[int] = set()
        self.by_subject: dict[str, SubjectSeqs] = {}
        # Live messages whose TTL says never: exempt from max_age.
        self.never: set[int] = set()
        self.never_rev = state.never_rev

    # -- queries ---------------------------------------------------------------------------

    def segment_for(self, seq: int) -> Segment | None:
        i = bisect_right(self._firsts, seq) - 1
        if i < 0:
            return None
        seg = self.segments[i]
        return seg if seq <= seg.last else None

    def following(self, seg: Segment) -> Iterator[Segment]:
        """The segments after `seg`, in sequence order."""
        i = bisect_right(self._firsts, seg.first)
        return iter(self.segments[i:])

    def is_live(self, seq: int) -> bool:
        return self.first_seq <= seq <= self.last_seq and seq not in self.tombs

    def _position(self, seq: int) -> tuple[Segment, int]:
        seg = self.segment_for(seq)
        i = seg.index_of(seq) if seg is not None else None
        assert seg is not None and i is not None, seq
        return seg, i

    def subject_of(self, seq: int) -> str:
        seg, i = self._position(seq)
        return seg.subjects[i]

    def size_of(self, seq: int) -> int:
        """The bytes the message counts for in the stream (stream.sizes)."""
        seg, i = self._position(seq)
        return seg.sizes[i]

    def record_length_of(self, seq: int) -> int:
        """The length of the message's record: subject, headers and data plus the record's
        framing (what a delivery carries, where size_of is what the stream counts)."""
        seg, i = self._position(seq)
        return seg.lengths[i]

    def ts_of(self, seq: int) -> int:
        seg, i = self._position(seq)
        return seg.ts_at(i)

    @property
    def first_ts(self) -> int:
        return self.ts_of(self.first_seq) if self.msgs else 0

    def last_for(self, subject: str) -> int:
        """The last live sequence of a literal subject, or 0."""
        ss = self.by_subject.get(subject)
        if ss is None or not ss.live:
            return 0
        seqs = ss.seqs
        for i in range(len(seqs) - 1, ss.head - 1, -1):
            if self.is_live(seqs[i]):
                return seqs[i]
        return 0

    def live_seqs(self, start: int = 0, filter_subject: str = "") -> Iterator[int]:
        """Live sequences from `start` in order, optionally only those matching a filter."""
        seq = max(start, self.first_seq)
        literal = filter_subject and not any(c in filter_subject for c in "*>")
        if literal:
            ss = self.by_subject.get(filter_subject)
            if ss is None:
                return
            seqs = ss.seqs
            i = bisect_right(seqs, seq - 1, lo=ss.head)
            for s in seqs[i:]:
                if self.is_live(s):
                    yield s
            return
        i = bisect_right(self._firsts, seq) - 1
        i = max(i, 0)
        tombs = self.tombs
        for seg in self.segments[i:]:
            if not filter_subject:
                # Every position counts: walk the sequences themselves, not the positions.
                if seg.seqs is None:
                    held: Iterable[int] = range(max(seq, seg.first), seg.last + 1)
                else:
                    held = seg.seqs[bisect_left(seg.seqs, seq) :]
                if tombs:
                    yield from (s for s in held if s not in tombs)
                else:
                    yield from held
                continue
            subjects = seg.subjects
            for pos in seg.positions_from(seq):
                s = seg.seq_at(pos)
                if s in tombs:
                    continue
                if filter_subject and not matches(filter_subject, subjects[pos]):
                    continue
                yield s

    def subjects_matching(self, filter_subject: str) -> dict[str, int]:
        """Live message counts per subject, for subjects matching the filter (all if empty)."""
        return {
            name: ss.live
            for name, ss in self.by_subject.items()
            if ss.live and (not filter_subject or matches(filter_subject, name))
        }

    # -- changes ---------------------------------------------------------------------------

    def add_segment(self, seg: Segment) -> None:
        """Add a run of new sequences; all live until killed."""
        self.segments.append(seg)
        self._firsts.append(seg.first)
        by_subject = self.by_subject
        for pos, subject in enumerate(seg.subjects):
            ss = by_subject.get(subject)
            if ss is None:
                ss = by_subject[subject] = SubjectSeqs()
            ss.seqs.append(seg.seq_at(pos))
            if ss.live == 0:
                self.num_subjects += 1
            ss.live += 1
        self.msgs += len(seg.subjects)
        self.bytes += sum(seg.sizes)
        self.last_seq = max(self.last_seq, seg.last)

    def kill(self, seq: int) -> None:
        """Mark a live message deleted, keeping counts; advance the head past dead ones."""
        if not self.is_live(seq):
            return
        self.never.discard(seq)
        seg = self.segment_for(seq)
        pos = seg.index_of(seq) if seg is not None else None
        if seg is None or pos is None:
            # A gap in a compacted section: compaction dropped it as deleted, so no segment
            # counts it; only the live range needs to learn that it is gone.
            if seq == self.first_seq:
                self._advance_head(seq + 1)
            else:
                self.tombs.add(seq)
            return
        subject = seg.subjects[pos]
        ss = self.by_subject[subject]
        ss.live -= 1
        if ss.live == 0:
            self.num_subjects -= 1
            del self.by_subject[subject]
        else:
            while ss.head < len(ss.seqs) and not self._alive_other_than(ss.seqs[ss.head], seq):
                ss.head += 1
        self.msgs -= 1
        self.bytes -= seg.sizes[pos]
        if seq == self.first_seq:
            self._advance_head(seq + 1)
        else:
            self.tombs.add(seq)

    def _alive_other_than(self, candidate: int, dying: int) -> bool:
        return candidate != dying and self.is_live(candidate)

    def _advance_head(self, to: int) -> None:
        first = to
        tombs = self.tombs
        while first in tombs:
            tombs.discard(first)
            first += 1
        self.first_seq = first
        self._drop_dead_segments()

    def kill_below(self, new_first: int) -> None:
        """Delete every live message below `new_first` (purge up to, limits, max_age)."""
        if new_first <= self.first_seq:
            return
        while self.msgs and self.first_seq < new_first and self.first_seq <= self.last_seq:
            self.kill(self.first_seq)
        if new_first > self.first_seq:
            self.tombs = {t for t in self.tombs if t >= new_first}
            self.never = {n for n in self.never if n >= new_first}
            self.first_seq = new_first
            # Purging past the end moves the end too, as nats-server's compact does.
            self.last_seq = max(self.last_seq, new_first - 1)
            self._drop_dead_segments()

    def _drop_dead_segments(self) -> None:
        drop = 0
        for seg in self.segments:
            if seg.last >= self.first_seq:
                break
            drop += 1
        if drop:
            del self.segments[:drop]
            del self._firsts[:drop]

    def dead_segments_below(self, first_seq: int) -> list[Segment]:
        return [seg for seg in self.segments if seg.last < first_seq]

    def adopt_state(self, state: StreamState, state_rev: int) -> None:
        self.state = state
        self.state_rev = state_rev
        self.last_ts = state.last_ts
        self.tomb_rev = state.tomb_rev
        self.never_rev = state.never_rev
        self.last_seq = max(self.last_seq, state.last_seq)


def seq_from_time(view: StreamView, ts: int) -> int:
    """The first sequence stored at or after `ts` (past the end if none)."""
    for seg in view.segments:
        last = len(seg.subjects) - 1
        if last < 0 or seg.ts_at(last) < ts:
            continue
        # Stamps increase along a segment: find the first position at or after `ts`.
        lo, hi = 0, last
        while lo < hi:
            mid = (lo + hi) // 2
            if seg.ts_at(mid) >= ts:
                hi = mid
            else:
                lo = mid + 1
        return max(seg.seq_at(lo), view.first_seq)
    return view.last_seq + 1


def last_for_filter(view: StreamView, filter_subject: str) -> int:
    if not any(c in filter_subject for c in "*>"):
        return view.last_for(filter_subject)
    best = 0
    for subject in view.subjects_matching(filter_subject):
        best = max(best, view.last_for(subject))
    return best
