"""An agent's picture of one stream: its state, and what it has read of its index.

A `StreamView` answers the questions that publishing and reading ask of a stream (where does
sequence N live, which messages of subject S are still there, how many subjects are live)
from what metadata and the sections' record directories say. It holds nothing that they do not:
an agent can drop it and rebuild it at any time (invariant 4).

What a view holds does not grow with the stream: the stream's state (a few
numbers), and, of its index, what questions asked so far needed and the agent's index cache
(`stream.index_cache`) still keeps: pages of section summaries (`stream.sections`), the detail
of some sections, subject records, the tombstones and never-expiring messages. A question that
needs something the view does not hold raises `Missing`, saying what to read; the caller reads
it (`stream.index.StreamIndex.load`) and asks again. Questions are synchronous so that the rules
built on them (publish rules, limits, consumers' progress) stay plain functions.

Changes come in two ways: `apply`-style updates after this agent's own commits (which know
exactly what changed), and `adopt_state` for another agent's commit, which drops what that
commit may have changed and keeps the rest (section summaries and details never change, short
of compaction, which makes the view start afresh).
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from infinistream.jetstream.subjects import is_valid_subject, matches
from infinistream.stream.index_cache import IndexCache
from infinistream.stream.records import StreamKeys, StreamState, SubjectRecord
from infinistream.stream.sections import OPEN, PAGE_ENTRIES, Page, Section, SectionPages, Segment

# Sequences a view's first read of the index looks back for the entry holding one, before it
# knows how many a section of its stream spans: most flushes write fewer, and compaction writes
# no more (pipeline/compaction/plan.py). A miss reads again, looking REACH_GROWTH times as far.
FIRST_REACH = 16384
REACH_GROWTH = 16

# -- what a question may need -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SectionAt:
    """The page of section summaries holding `seq`; `lone`: only the section holding it (a
    read of one message, which needs no other: one row read, whatever the stream's length)."""

    seq: int
    lone: bool = False


@dataclass(frozen=True, slots=True)
class Details:
    """The detail of these sections (the first is the one asked for; the rest are read along,
    as a walk will want them next)."""

    sections: tuple[Section, ...]


@dataclass(frozen=True, slots=True)
class Tombstones:
    """The stream's tombstones."""


@dataclass(frozen=True, slots=True)
class Nevers:
    """The stream's messages whose TTL says never."""


@dataclass(frozen=True, slots=True)
class Subjects:
    """These subjects' records."""

    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SubjectsMatching:
    """Every subject record matching `filter`."""

    filter: str


@dataclass(frozen=True, slots=True)
class AllSubjects:
    """Every subject's record, built from the stream's records themselves: the stream's
    subject records are not known to be exact (`StreamState.subject_records`)."""


Need = SectionAt | Details | Tombstones | Nevers | Subjects | SubjectsMatching | AllSubjects


class Missing(Exception):
    """A question needs what `view` does not hold: `need` says what to read."""

    def __init__(self, need: Need, view: StreamView) -> None:
        super().__init__(need)
        self.need = need
        self.view = view


# Details read along with the one asked for, during a walk.
DETAILS_AHEAD = 8

# What a subject record held takes besides its subject's string: its entry in the view's map,
# the record, its integers and its entry in the index cache (490 B, measured with tracemalloc
# over 100,000 records read at once). Charged below the mark, a view of a stream of many
# subjects would hold four times its share of the budget.
RECORD_BYTES = 490


def literal_prefix(filter_subject: str) -> str:
    """The tokens of a filter before its first wildcard, with their dot: every subject the
    filter matches starts with it."""
    tokens = filter_subject.split(".")
    for i, token in enumerate(tokens):
        if token in ("*", ">"):
            return ".".join(tokens[:i]) + "." if i else ""
    return filter_subject


class StreamView:
    def __init__(
        self,
        state: StreamState,
        state_rev: int,
        cache: IndexCache | None = None,
        keys: StreamKeys | None = None,
        storage: str = "file",
    ) -> None:
        self.cache = cache if cache is not None else IndexCache()
        # Where the stream's metadata is, for whoever reads what a question found missing.
        self.keys = keys
        # The stream's storage type, which sets what a message counts for (stream.sizes); a
        # stream keeps the one it was created with.
        self.storage = storage
        self.pages = SectionPages()
        # How far back from a sequence a read of the index looks for the entry holding it, and
        # (times PAGE_ENTRIES for a page) forward for the ones after: a few sections' worth,
        # learned from what was read (`loader._page_reads`).
        self.reach = FIRST_REACH
        self._segments: dict[str, Segment] = {}
        self._records: dict[str, SubjectRecord | None] = {}
        self._listed: set[str] = set()
        # Every subject's record, while the stream's own are not exact (see AllSubjects).
        self.table: dict[str, SubjectRecord] | None = None
        self.tombs: set[int] | None = None
        self.never: set[int] | None = None
        self._adopt(state, state_rev)

    # -- state -----------------------------------------------------------------------------

    def _adopt(self, state: StreamState, state_rev: int) -> None:
        self.uid = state.uid
        self.state = state
        self.state_rev = state_rev
        self.first_seq = state.first_seq
        self.last_seq = state.last_seq
        self.last_ts = state.last_ts
        self.msgs = state.msgs
        self.bytes = state.bytes
        self.num_subjects = state.num_subjects
        self.tomb_rev = state.tomb_rev
        self.never_rev = state.never_rev
        self.layout = state.layout
        if state.num_deleted == 0 and self.tombs is None:
            self.tombs = set()
        if state.never_rev == 0 and self.never is None:
            self.never = set()

    @property
    def first_ts(self) -> int:
        return self.state.first_ts if self.msgs else 0

    @property
    def subjects_exact(self) -> bool:
        """Whether the stream's subject records are exact (else `table` must be built)."""
        return self.state.subject_records == 1

    def adopt_state(self, state: StreamState, state_rev: int) -> None:
        """Another agent committed: take its state, and drop what its commit may have changed.

        Section summaries and details stay (a section never changes), but for the open end
        of the sections read (new sections may follow it) and those now below the head."""
        if state_rev == self.state_rev:
            return
        if state.uid != self.uid:
            self.reset(state, state_rev)
            return
        if state.layout != self.layout:
            # Compaction (or an erase) moved messages to other sections: what was read of the
            # sections is stale, what was read of the messages is not.
            self._drop_sections()
        last = self.last_seq
        if state.tomb_rev != self.tomb_rev:
            self.tombs = None
        if state.never_rev != self.never_rev:
            self.never = None
        self._records.clear()
        self._listed.clear()
        self.table = None
        self._adopt(state, state_rev)
        page = self.pages.last_page()
        if page is not None and page.hi == OPEN and state.last_seq > last:
            page.hi = last
        self.drop_below(state.first_seq)

    def own_state(self, state: StreamState, state_rev: int) -> None:
        """This agent's own commit: its state (what it changed is in the view already)."""
        self._adopt(state, state_rev)
        self.drop_below(state.first_seq)

    def _drop_sections(self) -> None:
        for page in self.pages.pages:
            self.cache.forget(self, ("page", page.lo))
        for key in self._segments:
            self.cache.forget(self, ("seg", key))
        self.pages = SectionPages()
        self._segments.clear()
        # The reach was learned from the sections dropped: compaction's are larger (a window
        # of small flushes' reach would miss them, a read more), and the first reach holds one.
        self.reach = FIRST_REACH

    def reset(self, state: StreamState, state_rev: int) -> None:
        """Start afresh from `state` (a new stream of the same name)."""
        self.cache.forget_owner(self)
        self.pages = SectionPages()
        self._segments.clear()
        self.reach = FIRST_REACH
        self._records.clear()
        self._listed.clear()
        self.table = None
        self.tombs = None
        self.never = None
        self._adopt(state, state_rev)

    def close(self) -> None:
        """The view is dropped: what it kept leaves the cache."""
        self.cache.forget_owner(self)

    # -- the cache -------------------------------------------------------------------------

    def evict(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        kind: str = key[0]
        ident: Any = key[1]
        if kind == "page":
            page = self.pages.page_at(ident)
            if page is not None and page.lo == ident:
                self.pages.remove(page)
        elif kind == "seg":
            self._segments.pop(ident, None)
        elif kind == "subject":
            self._records.pop(ident, None)
            self._listed.clear()

    def add_page(self, page: Page) -> None:
        self.pages.add(page)
        self.cache.charge(self, ("page", page.lo), page.cost())

    def add_segment(self, seg: Segment) -> None:
        self._segments[seg.key] = seg
        self.cache.charge(self, ("seg", seg.key), seg.cost())

    def add_records(self, records: dict[str, SubjectRecord | None]) -> None:
        for subject, record in records.items():
            self._records[subject] = record
            self.cache.charge(self, ("subject", subject), RECORD_BYTES + sys.getsizeof(subject))

    def held_records(self) -> dict[str, SubjectRecord | None]:
        """The subject records held now (for a reader that fetches the others beforehand)."""
        return self._records

    def forget_records(self) -> None:
        for subject in self._records:
            self.cache.forget(self, ("subject", subject))
        self._records.clear()
        self._listed.clear()

    def list_subjects(self, filter_subject: str, records: dict[str, SubjectRecord]) -> None:
        """Every record matching `filter_subject` was read: `records`."""
        self.add_records(dict(records))
        self._listed.add(filter_subject)

    # -- sections --------------------------------------------------------------------------

    def section_at(self, seq: int, *, lone: bool = False) -> Section | None:
        """The section holding `seq`, or None if none does (a deleted message's gap); `lone`:
        when not held, read only that section's summary, not a page of them (`SectionAt`)."""
        page = self.pages.page_at(seq)
        if page is None:
            raise Missing(SectionAt(seq, lone), self)
        self.cache.touch(self, ("page", page.lo))
        return page.find(seq)

    def sections_from(self, seq: int, to: int | None = None) -> Iterator[Section]:
        """The sections holding sequences from `seq` (to `to`, or the stream's end), in order."""
        end = self.last_seq if to is None else min(to, self.last_seq)
        while seq <= end:
            page = self.pages.page_at(seq)
            if page is None:
                raise Missing(SectionAt(seq), self)
            self.cache.touch(self, ("page", page.lo))
            for section in self._sections_of(page):
                if section.last >= seq and section.first <= end:
                    yield section
            if page.hi >= end:
                return
            seq = page.hi + 1

    def sections_back_from(self, seq: int) -> Iterator[Section]:
        """The sections holding sequences up to `seq`, last first, down to the stream's head."""
        while seq >= self.first_seq:
            page = self.pages.page_at(seq)
            if page is None:
                raise Missing(SectionAt(seq), self)
            self.cache.touch(self, ("page", page.lo))
            for section in reversed(self._sections_of(page)):
                if section.first <= seq and section.last >= self.first_seq:
                    yield section
            seq = page.lo - 1

    def _sections_of(self, page: Page) -> list[Section]:
        """`page.sections`, charged anew when they were decoded just now (`Page`)."""
        if page.decoded:
            return page.sections
        sections = page.sections
        self.cache.charge(self, ("page", page.lo), page.cost())
        return sections

    def segment_of(self, section: Section, ahead: Iterable[Section] = ()) -> Segment:
        """The detail of `section`; when missing, also asks for those of `ahead` (up to
        DETAILS_AHEAD) that are missing too."""
        seg = self._segments.get(section.key)
        if seg is None:
            more = [s for s in ahead if s.key not in self._segments][:DETAILS_AHEAD]
            raise Missing(Details((section, *more)), self)
        self.cache.touch(self, ("seg", section.key))
        return seg

    def segment_for(self, seq: int, *, lone: bool = False) -> Segment | None:
        section = self.section_at(seq, lone=lone)
        return None if section is None else self.segment_of(section)

    def following(self, seg: Segment) -> Iterator[Segment]:
        """The segments after `seg` that this view holds now, in order, as far as they go
        without a gap (for reading several sections of one object with one GET)."""
        try:
            sections = self.sections_from(seg.last + 1)
            for section in sections:
                found = self._segments.get(section.key)
                if found is None:
                    return
                yield found
        except Missing:
            return

    def holds_segment(self, key: str) -> bool:
        return key in self._segments

    # -- liveness --------------------------------------------------------------------------

    def tombstones(self) -> set[int]:
        if self.tombs is None:
            raise Missing(Tombstones(), self)
        return self.tombs

    def nevers(self) -> set[int]:
        if self.never is None:
            raise Missing(Nevers(), self)
        return self.never

    def is_live(self, seq: int) -> bool:
        return self.first_seq <= seq <= self.last_seq and seq not in self.tombstones()

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
        return seg.size_at(i, self.storage)

    def record_length_of(self, seq: int) -> int:
        """The length of the message's record: subject, headers and data plus the record's
        framing (what a delivery carries, where size_of is what the stream counts)."""
        seg, i = self._position(seq)
        return seg.lengths[i]

    def ts_of(self, seq: int) -> int:
        seg, i = self._position(seq)
        return seg.ts_at(i)

    # -- subjects --------------------------------------------------------------------------

    def _known_absent(self, subject: str) -> bool:
        """Whether a listing held says the subject has no record, or no message can have it:
        a stored subject is a valid literal one (an expectation header may name anything)."""
        return any(matches(f, subject) for f in self._listed) or not is_valid_subject(
            subject, allow_wildcards=False
        )

    def subject_record(self, subject: str) -> SubjectRecord | None:
        """The subject's record (None: no live message), as of this view's state."""
        if self.table is not None:
            return self.table.get(subject)
        if not self.subjects_exact:
            raise Missing(AllSubjects(), self)
        try:
            return self._records[subject]
        except KeyError:
            pass
        if self._known_absent(subject):
            return None
        raise Missing(Subjects((subject,)), self)

    def subject_records(self, subjects: Iterable[str]) -> dict[str, SubjectRecord | None]:
        """The records of `subjects`, or `Missing` naming all those not held at once."""
        if self.table is not None:
            return {s: self.table.get(s) for s in subjects}
        if not self.subjects_exact:
            raise Missing(AllSubjects(), self)
        out: dict[str, SubjectRecord | None] = {}
        missing: list[str] = []
        records = self._records
        for subject in subjects:
            try:
                out[subject] = records[subject]
            except KeyError:
                if self._listed and self._known_absent(subject):
                    out[subject] = None
                else:
                    missing.append(subject)
        if missing:
            raise Missing(Subjects(tuple(missing)), self)
        return out

    def subjects_matching(self, filter_subject: str) -> dict[str, int]:
        """Live message counts per subject, for subjects matching the filter (all if empty)."""
        wanted = filter_subject or ">"
        if self.table is not None:
            return {s: r.count for s, r in self.table.items() if matches(wanted, s)}
        if not self.subjects_exact:
            raise Missing(AllSubjects(), self)
        if not any(_covers(f, wanted) for f in self._listed):
            raise Missing(SubjectsMatching(wanted), self)
        return {
            s: r.count
            for s, r in self._records.items()
            if r is not None and r.count and matches(wanted, s)
        }

    def last_for(self, subject: str) -> int:
        """The last live sequence of a literal subject, or 0."""
        record = self.subject_record(subject)
        if record is None or not record.count:
            return 0
        for seq in self.subject_seqs_back(subject, min(record.last, self.last_seq)):
            return seq
        return 0

    def subject_seqs_back(self, subject: str, start: int, *, dead: bool = False) -> Iterator[int]:
        """Live sequences of `subject` from `start` down, in reverse order; with `dead`, the
        deleted ones too, as far back as the sections that hold a live message reach."""
        tombs = set() if dead else self.tombstones()
        for section in self.sections_back_from(start):
            if not section.summary.may_hold(subject):
                continue
            ahead = self._held_before(section, subject)
            seg = self.segment_of(section, ahead)
            stop = seg.positions_from(start + 1).start
            subjects = seg.subjects
            for pos in range(stop - 1, -1, -1):
                if subjects[pos] == subject:
                    seq = seg.seq_at(pos)
                    if dead or (seq not in tombs and seq >= self.first_seq):
                        yield seq

    def subject_seqs_from(self, subject: str, start: int) -> Iterator[int]:
        """Sequences of `subject` from `start` up, in order, the deleted ones (above the
        head) too."""
        end = self.last_seq
        for section in self.sections_from(max(start, self.first_seq), end):
            if not section.summary.may_hold(subject):
                continue
            seg = self.segment_of(section, self._held_after(section, end, subject))
            subjects = seg.subjects
            for pos in seg.positions_from(start):
                if subjects[pos] == subject:
                    yield seg.seq_at(pos)

    def _held_before(self, section: Section, filter_subject: str) -> Iterator[Section]:
        """The sections before `section` that may hold `filter_subject`, as far as the pages
        held go (what a walk back will want next)."""
        try:
            for s in self.sections_back_from(section.first - 1):
                if s.summary.may_match(filter_subject):
                    yield s
        except Missing:
            return

    def _held_after(self, section: Section, end: int, filter_subject: str) -> Iterator[Section]:
        """The sections after `section` up to `end` that may hold `filter_subject`, as far as
        the pages held go."""
        try:
            for s in self.sections_from(section.last + 1, end):
                if s.summary.may_match(filter_subject):
                    yield s
        except Missing:
            return

    def live_seqs(self, start: int = 0, filter_subject: str = "") -> Iterator[int]:
        """Live sequences from `start` in order, optionally only those matching a filter."""
        seq = max(start, self.first_seq)
        tombs = self.tombstones()
        if not filter_subject or filter_subject == ">":
            if tombs:
                yield from (s for s in range(seq, self.last_seq + 1) if s not in tombs)
            else:
                yield from range(seq, self.last_seq + 1)
            return
        literal = not any(c in filter_subject for c in "*>")
        end = self.last_seq
        if literal:
            record = self.subject_record(filter_subject)
            if record is None or not record.count:
                return
            seq = max(seq, record.first)
            end = min(end, record.last)
        for section in self.sections_from(seq, end):
            if not section.summary.may_match(filter_subject):
                continue
            seg = self.segment_of(section, self._held_after(section, end, filter_subject))
            subjects = seg.subjects
            for pos in seg.positions_from(seq):
                s = seg.seq_at(pos)
                if s > end:
                    return
                if s in tombs:
                    continue
                subject = subjects[pos]
                if (subject == filter_subject) if literal else matches(filter_subject, subject):
                    yield s

    def count_after(self, after: int, filters: list[str]) -> int:
        """How many live messages past `after` match any of `filters` (all if none)."""
        start = max(after + 1, self.first_seq)
        if start > self.last_seq:
            return 0
        tombs = self.tombstones()
        if not filters:
            return self.last_seq - start + 1 - sum(1 for t in tombs if t >= start)
        end = self.last_seq
        if len(filters) == 1 and not any(c in filters[0] for c in "*>"):
            record = self.subject_record(filters[0])
            if record is None or not record.count:
                return 0
            if start <= record.first:
                return record.count
            end = min(end, record.last)
        dead = sorted(t for t in tombs if t >= start)
        total = 0
        for section in self.sections_from(start, end):
            summary = section.summary
            if not any(summary.may_match(f) for f in filters):
                continue
            i = bisect_left(dead, section.first)
            whole = section.first >= start and (i == len(dead) or dead[i] > section.last)
            if whole and summary.exact:
                total += sum(
                    c
                    for n, c in zip(summary.names, summary.counts, strict=True)
                    if any(matches(f, n) for f in filters)
                )
                continue
            seg = self.segment_of(section)
            subjects = seg.subjects
            for pos in seg.positions_from(start):
                s = seg.seq_at(pos)
                if s <= end and s not in tombs and any(matches(f, subjects[pos]) for f in filters):
                    total += 1
        return total

    def seq_from_time(self, ts: int) -> int:
        """The first sequence stored at or after `ts` (past the end if none)."""
        if not self.msgs or self.last_ts < ts:
            return self.last_seq + 1
        if self.first_ts >= ts:
            return self.first_seq
        # Stamps increase along the stream: bisect by sequence for the first section that
        # ends at or after `ts`, then look inside it.
        lo, hi = self.first_seq, self.last_seq
        best: Section | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            section = next(iter(self.sections_from(mid, hi)), None)
            if section is None:
                hi = mid - 1
            elif section.last_ts >= ts:
                best, hi = section, section.first - 1
            else:
                lo = section.last + 1
        if best is None:
            return self.last_seq + 1
        seg = self.segment_of(best)
        for pos in range(len(seg.subjects)):
            if seg.ts_at(pos) >= ts:
                return max(seg.seq_at(pos), self.first_seq)
        return best.last + 1

    # -- own commits -----------------------------------------------------------------------

    def append_section(self, section: Section, seg: Segment | None) -> None:
        """A section this agent just committed at the stream's end."""
        page = self.pages.last_page()
        if page is not None and page.hi == OPEN and len(page.sections) >= PAGE_ENTRIES:
            # Full: it ends where its sections do, so that the page commits append to stays
            # small and the cache may drop this one as any other.
            page.hi = page.sections[-1].last
        if page is not None and page.hi == OPEN:
            page.sections.append(section)
            # By the section's cost: the page's own is a walk over its up to 128 sections.
            if not self.cache.grow(self, ("page", page.lo), section.cost()):
                self.cache.charge(self, ("page", page.lo), page.cost())
        else:
            self.add_page(Page(section.first, OPEN, [section]))
        if seg is not None:
            self.add_segment(seg)

    def drop_below(self, first: int) -> None:
        """Forget the sections wholly below the head."""
        while self.pages.pages:
            page = self.pages.pages[0]
            if page.hi < first:
                self.pages.remove(page)
                self.cache.forget(self, ("page", page.lo))
                for section in page.sections:
                    if self._segments.pop(section.key, None) is not None:
                        self.cache.forget(self, ("seg", section.key))
                continue
            # The dead are a prefix (sections in sequence order): found without a walk
            # over the page, which every commit's own_state would take.
            sections = self._sections_of(page)
            n = 0
            while n < len(sections) and sections[n].last < first:
                n += 1
            dead = sections[:n]
            if dead:
                del page.sections[: len(dead)]
                for section in dead:
                    if self._segments.pop(section.key, None) is not None:
                        self.cache.forget(self, ("seg", section.key))
            break
        if self.tombs:
            self.tombs = {t for t in self.tombs if t >= first}
        if self.never:
            self.never = {n for n in self.never if n >= first}


def _covers(listed: str, wanted: str) -> bool:
    """Whether every subject matching `wanted` matches `listed` too (so a listing of `listed`
    answers for `wanted`)."""
    if listed == ">" or listed == wanted:
        return True
    prefix = literal_prefix(listed)
    return listed.endswith(">") and listed.count("*") == 0 and wanted.startswith(prefix)


def seq_from_time(view: StreamView, ts: int) -> int:
    return view.seq_from_time(ts)


def last_for_filter(view: StreamView, filter_subject: str) -> int:
    if not any(c in filter_subject for c in "*>"):
        return view.last_for(filter_subject)
    best = 0
    for subject in view.subjects_matching(filter_subject):
        best = max(best, view.last_for(subject))
    return best
