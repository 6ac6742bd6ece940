"""Changes to a stream that are planned but not yet committed, layered over its view.

A commit is optimistic: it plans against the view, writes with a compare-and-set on the stream
state, and only if that succeeds applies the plan to the view. `Changes` is that plan. It answers
the same questions as the view (what is live, the last message of a subject, totals) with the
planned appends and deletes taken into account, and leaves the view untouched, so a lost race
costs nothing but a new plan.

Per-subject state is planned as the subject records the commit writes (`records`): count exact,
first and last as bounds (see `records.SubjectRecord`). A question the view cannot answer from
what it holds raises `view.Missing`; the caller reads what is missing and plans again.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass

from infinistream.jetstream.subjects import matches
from infinistream.stream.records import SubjectRecord
from infinistream.stream.schedules import Schedule
from infinistream.stream.sections import Section
from infinistream.stream.view import StreamView

# The counters of a plan that a checkpoint saves and `restore` puts back, named once so that
# both sides always agree on which they are and in what order.
_SCALARS = (
    "first_seq",
    "last_seq",
    "msgs",
    "bytes",
    "num_subjects",
    "_indexed",
    "_next_to_index",
)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    scalars: tuple[int, ...]
    appended: int
    killed: set[int]
    records: dict[str, SubjectRecord | None]
    reset: bool
    by_subject: dict[str, list[int]]
    ttls: dict[int, int]
    forgotten: int
    schedules: dict[int, Schedule]
    rescheduled: dict[int, int]


class Changes:
    def __init__(self, view: StreamView) -> None:
        self.view = view
        self.first_seq = view.first_seq
        self.last_seq = view.last_seq
        self.msgs = view.msgs
        self.bytes = view.bytes
        self.num_subjects = view.num_subjects
        # Appended messages, in sequence order from view.last_seq + 1.
        self.subjects: list[str] = []
        self.sizes: list[int] = []
        # Messages deleted one by one (those below a moved head need not be listed).
        self.killed: set[int] = set()
        # Subject records as this plan leaves them (None: no live message left).
        self.records: dict[str, SubjectRecord | None] = {}
        # Every subject record of the view is gone (the whole stream was purged): those in
        # `records` are all that are left.
        self.reset_subjects = False
        # Appended sequences by subject, indexed from `subjects` only when a question needs
        # them (expected-* headers, rollups, per-subject limits), so plain batches never do.
        self._appended_by_subject: dict[str, list[int]] = {}
        self._indexed = 0
        # The sequence of subjects[_indexed]: appends follow one another, but `kill_below`
        # past the end makes the next one jump ahead.
        self._next_to_index = view.last_seq + 1
        # Per-message TTLs of appended messages, in seconds (stream.ttl.NEVER: never expire).
        self.ttls: dict[int, int] = {}
        # Metadata keys the commit deletes along with the change (expiry entries dealt with).
        self.forgotten: list[str] = []
        # Metadata keys the commit writes along with the change (an erase request).
        self.written: dict[str, bytes] = {}
        # Appended messages that hold a schedule, and when schedules already stored fire next.
        self.schedules: dict[int, Schedule] = {}
        self.rescheduled: dict[int, int] = {}

    @property
    def base(self) -> int:
        return self.view.last_seq

    def is_live(self, seq: int) -> bool:
        if seq < self.first_seq or seq > self.last_seq or seq in self.killed:
            return False
        return seq > self.base or self.view.is_live(seq)

    def subject_of(self, seq: int) -> str:
        return self.subjects[seq - self.base - 1] if seq > self.base else self.view.subject_of(seq)

    def size_of(self, seq: int) -> int:
        return self.sizes[seq - self.base - 1] if seq > self.base else self.view.size_of(seq)

    # -- subject records -------------------------------------------------------------------

    def record(self, subject: str) -> SubjectRecord | None:
        """The subject's record as this plan leaves it so far."""
        try:
            return self.records[subject]
        except KeyError:
            pass
        if self.reset_subjects:
            return None
        return self.view.subject_record(subject)

    def live_count(self, subject: str) -> int:
        record = self.record(subject)
        return record.count if record is not None else 0

    def _appended(self) -> dict[str, list[int]]:
        """Appended sequences by subject, brought up to date with `subjects`."""
        by_subject = self._appended_by_subject
        seq = self._next_to_index
        for subject in self.subjects[self._indexed :]:
            by_subject.setdefault(subject, []).append(seq)
            seq += 1
        self._indexed = len(self.subjects)
        self._next_to_index = seq
        return by_subject

    def _appended_of(self, subject: str) -> list[int]:
        return self._appended().get(subject, [])

    def _tighten(self, subject: str, record: SubjectRecord, first: int, last: int) -> None:
        """A walk found the exact first or last: written back with the commit."""
        if (first, last) != (record.first, record.last):
            self.records[subject] = SubjectRecord(first, last, record.count)

    def last_for(self, subject: str) -> int:
        for seq in reversed(self._appended_of(subject)):
            if seq not in self.killed and seq >= self.first_seq:
                return seq
        record = self.record(subject)
        if record is None or not record.count:
            return 0
        start = min(record.last, self.base)
        for seq in self.view.subject_seqs_back(subject, start):
            if seq < self.first_seq:
                break
            if seq not in self.killed:
                # No appended message of the subject is live: this is its last.
                self._tighten(subject, record, record.first, seq)
                return seq
        return 0

    def last_matching(self, filter_subject: str) -> int:
        """Like `last_for`, for a filter that may hold wildcards (nats-server's LoadLastMsg)."""
        if not any(c in filter_subject for c in "*>"):
            return self.last_for(filter_subject)
        names = {n for n in self._appended() if matches(filter_subject, n)}
        if not self.reset_subjects:
            names |= set(self.view.subjects_matching(filter_subject))
        return max((self.last_for(n) for n in names), default=0)

    def oldest_for(self, subject: str) -> int:
        record = self.record(subject)
        if record is None or not record.count:
            return 0
        if record.first <= self.base and not self.reset_subjects:
            start = max(record.first, self.first_seq)
            for seq in self.view.live_seqs(start, subject):
                if seq > self.base:
                    break
                if seq not in self.killed:
                    self._tighten(subject, record, seq, record.last)
                    return seq
        for seq in self._appended_of(subject):
            if seq not in self.killed and seq >= self.first_seq:
                return seq
        return 0

    def live_of_subject(self, subject: str) -> list[int]:
        record = self.record(subject)
        older: list[int] = []
        in_view = record is not None and record.count and record.first <= self.base
        if in_view and record is not None and not self.reset_subjects:
            start = max(record.first, self.first_seq)
            older = [s for s in self.view.live_seqs(start, subject) if s <= self.base]
        newer = self._appended_of(subject)
        return [s for s in (*older, *newer) if self.is_live(s)]

    # -- appends ---------------------------------------------------------------------------

    def append(self, subject: str, size: int) -> int:
        record = self.record(subject)
        self.subjects.append(subject)
        self.sizes.append(size)
        self.last_seq += 1
        seq = self.last_seq
        if record is None or not record.count:
            self.num_subjects += 1
            self.records[subject] = SubjectRecord(seq, seq, 1)
        else:
            self.records[subject] = SubjectRecord(record.first, seq, record.count + 1)
        self.msgs += 1
        self.bytes += size
        return seq

    def append_many(self, subjects: list[str], sizes: list[int]) -> int:
        """`append` each message in order, in a few C-level passes; the first one's sequence."""
        records = self.records
        unknown = [s for s in dict.fromkeys(subjects) if s not in records]
        if unknown and not self.reset_subjects:
            known = self.view.subject_records(unknown)
        else:
            known = dict.fromkeys(unknown)
        first = self.last_seq + 1
        self.subjects += subjects
        self.sizes += sizes
        self.last_seq += len(subjects)
        self.msgs += len(subjects)
        self.bytes += sum(sizes)
        lasts = {s: i for i, s in enumerate(subjects)}
        firsts: dict[str, int] | None = None
        for subject, added in Counter(subjects).items():
            record = records[subject] if subject in records else known[subject]
            if record is None or not record.count:
                if firsts is None:
                    firsts = {s: i for i, s in reversed(list(enumerate(subjects)))}
                self.num_subjects += 1
                records[subject] = SubjectRecord(
                    first + firsts[subject], first + lasts[subject], added
                )
            else:
                records[subject] = SubjectRecord(
                    record.first, first + lasts[subject], record.count + added
                )
        return first

    def skip_to(self, last: int) -> None:
        """The stream's last sequence moves up to `last` with no message: a mirror skips what
        its origin deleted. In an empty stream the first moves with it; otherwise the
        sequences skipped are deleted ones (a commit of its own: appends must not be
        planned in the same `Changes`)."""
        if last <= self.last_seq or self.subjects:
            return
        if not self.msgs:
            self.kill_below(last + 1)
            return
        skipped = range(self.last_seq + 1, last + 1)
        self.last_seq = last
        self._next_to_index = last + 1
        # Deleted, as a message deleted in the live range is: each a tombstone.
        self.killed.update(skipped)

    # -- deletes ---------------------------------------------------------------------------

    def kill(self, seq: int) -> bool:
        if not self.is_live(seq):
            return False
        subject = self.subject_of(seq)
        size = self.size_of(seq)
        self._forget_one(subject, seq)
        self.msgs -= 1
        self.bytes -= size
        self.killed.add(seq)
        if seq == self.first_seq:
            self._advance_head()
        return True

    def _forget_one(self, subject: str, seq: int) -> None:
        record = self.record(subject)
        count = record.count - 1 if record is not None else 0
        if count <= 0 or record is None:
            if record is not None and record.count:
                self.num_subjects -= 1
            self.records[subject] = None
            return
        # The first moves past it (a bound; the next live one is found when asked for); the
        # last stays an upper bound.
        first = seq + 1 if seq == record.first else record.first
        self.records[subject] = SubjectRecord(first, record.last, count)

    def _advance_head(self) -> None:
        first = self.first_seq
        while first <= self.last_seq and not self.is_live_ignoring_head(first):
            first += 1
        self.first_seq = first

    def is_live_ignoring_head(self, seq: int) -> bool:
        if seq in self.killed:
            return False
        return seq > self.base or seq not in self.view.tombstones()

    def kill_below(self, new_first: int) -> int:
        """Delete everything below `new_first`; returns how many live messages went."""
        if new_first <= self.first_seq:
            return 0
        removed = 0
        view_end = min(new_first - 1, self.base)
        if view_end >= self.first_seq:
            if new_first > self.base and not self.reset_subjects:
                removed += self._drop_view()
            elif not self.reset_subjects:
                removed += self._kill_view_range(self.first_seq, view_end)
        for seq in range(max(self.first_seq, self.base + 1), min(new_first, self.last_seq + 1)):
            if self.kill(seq):
                removed += 1
        if new_first > self.first_seq:
            self.first_seq = new_first
            if new_first - 1 > self.last_seq:
                # The end moves too: appends so far keep their sequences, later ones follow on.
                self._appended()
                self.last_seq = new_first - 1
                self._next_to_index = new_first
        return removed

    def _drop_view(self) -> int:
        """Every message the view holds goes: its subject records with them, unread."""
        appended = [s for s in range(self.base + 1, self.last_seq + 1) if s not in self.killed]
        removed = self.msgs - len(appended)
        self.msgs = len(appended)
        self.bytes = sum(self.sizes[s - self.base - 1] for s in appended)
        self.reset_subjects = True
        self.records = {}
        for seq in appended:
            subject = self.subject_of(seq)
            record = self.records.get(subject)
            if record is None:
                self.records[subject] = SubjectRecord(seq, seq, 1)
            else:
                self.records[subject] = SubjectRecord(record.first, seq, record.count + 1)
        self.num_subjects = len(self.records)
        self.first_seq = self.base + 1
        return removed

    def _kill_view_range(self, lo: int, hi: int) -> int:
        """Delete the view's messages lo..hi: sections that summarize their subjects exactly and
        hold no deleted message as whole sections, the others message by message."""
        removed = 0
        dead = sorted(self.view.tombstones() | self.killed)
        for section in list(self.view.sections_from(lo, hi)):
            if self._whole(section, lo, hi, dead):
                removed += self._kill_section(section)
                continue
            seg = self.view.segment_of(section)
            for pos in seg.positions_from(max(lo, self.first_seq)):
                seq = seg.seq_at(pos)
                if seq > hi:
                    break
                if self.kill(seq):
                    removed += 1
        return removed

    def _whole(self, section: Section, lo: int, hi: int, dead: list[int]) -> bool:
        """Whether `section` lies in lo..hi past the head, holds no deleted message, and
        names its subjects with their counts."""
        if not section.summary.exact or section.first < max(lo, self.first_seq):
            return False
        if section.last > hi:
            return False
        i = bisect_left(dead, section.first)
        return i == len(dead) or dead[i] > section.last

    def _kill_section(self, section: Section) -> int:
        summary = section.summary
        for name, count in zip(summary.names, summary.counts, strict=True):
            record = self.record(name)
            left = (record.count if record is not None else 0) - count
            if left <= 0 or record is None:
                if record is not None and record.count:
                    self.num_subjects -= 1
                self.records[name] = None
            else:
                first = max(record.first, section.last + 1)
                self.records[name] = SubjectRecord(first, record.last, left)
        self.msgs -= section.count
        self.bytes -= section.stored_size(self.view.storage)
        self.first_seq = max(self.first_seq, section.last + 1)
        return section.count

    # -- plans that fail -------------------------------------------------------------------

    def checkpoint(self) -> Checkpoint:
        """What `restore` needs to undo every change made after this call (an atomic batch
        that fails); it costs the size of this plan, not of the stream."""
        return Checkpoint(
            scalars=tuple(getattr(self, name) for name in _SCALARS),
            appended=len(self.subjects),
            killed=set(self.killed),
            records=dict(self.records),
            reset=self.reset_subjects,
            by_subject={s: list(seqs) for s, seqs in self._appended_by_subject.items()},
            ttls=dict(self.ttls),
            forgotten=len(self.forgotten),
            schedules=dict(self.schedules),
            rescheduled=dict(self.rescheduled),
        )

    def restore(self, point: Checkpoint) -> None:
        for name, value in zip(_SCALARS, point.scalars, strict=True):
            setattr(self, name, value)
        del self.subjects[point.appended :]
        del self.sizes[point.appended :]
        self.killed = point.killed
        self.records = point.records
        self.reset_subjects = point.reset
        self._appended_by_subject = point.by_subject
        self.ttls = point.ttls
        del self.forgotten[point.forgotten :]
        self.schedules = point.schedules
        self.rescheduled = point.rescheduled

    def evict_oldest(self) -> None:
        self.kill(self.first_seq)

    def set_ttl(self, seq: int, ttl: int) -> None:
        """An appended message's TTL (seconds, or stream.ttl.NEVER)."""
        self.ttls[seq] = ttl

    def set_schedule(self, seq: int, schedule: Schedule) -> None:
        """An appended message holds a schedule, first due as its timestamp decides."""
        self.schedules[seq] = schedule

    def reschedule(self, seq: int, due: int) -> None:
        """The schedule held by message `seq` fires next at `due` (ns)."""
        self.rescheduled[seq] = due

    def write(self, key: str, value: bytes) -> None:
        """Put a metadata key with this change."""
        self.written[key] = value

    def forget(self, key: str) -> None:
        """Delete a metadata key with this change."""
        self.forgotten.append(key)

    def is_never(self, seq: int) -> bool:
        """Whether a message is exempt from max_age (its TTL says never)."""
        if seq > self.base:
            return self.ttls.get(seq, 0) < 0
        return seq in self.view.nevers()

    @property
    def touched(self) -> bool:
        return bool(
            self.subjects
            or self.killed
            or self.forgotten
            or self.written
            or self.first_seq != self.view.first_seq
        )

    def new_nevers(self) -> list[int]:
        """Appended messages that never expire and are still there."""
        return sorted(s for s, ttl in self.ttls.items() if ttl < 0 and self.is_live(s))

    def dropped_nevers(self) -> list[int]:
        """The view's never-expiring messages that this change deletes one by one (those below
        a moved head go with it)."""
        if not self.killed:
            return []
        never = self.view.nevers()
        if not never:
            return []
        # A live message leaves only by being killed: go over the smaller of the two.
        if len(self.killed) < len(never):
            return sorted(s for s in self.killed if s in never and s >= self.first_seq)
        return sorted(s for s in never if s >= self.first_seq and not self.is_live(s))

    def new_tombstones(self) -> list[int]:
        """Deleted sequences that stay inside the live range and so need a tombstone."""
        return sorted(s for s in self.killed if s > self.first_seq and s <= self.last_seq)
