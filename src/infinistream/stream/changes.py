"""Changes to a stream that are planned but not yet committed, layered over its view.

A commit is optimistic: it plans against the view, writes with a compare-and-set on the stream
state, and only if that succeeds applies the plan to the view. `Changes` is that plan. It answers
the same questions as the view (what is live, the last message of a subject, totals) with the
planned appends and deletes taken into account, and leaves the view untouched, so a lost race
costs nothing but a new plan.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from infinistream.jetstream.subjects import matches
from infinistream.stream.schedules import Schedule
from infinistream.stream.view import StreamView


@dataclass(frozen=True, slots=True)
class Checkpoint:
    scalars: tuple[int, int, int, int, int, int, int]
    appended: int
    killed: set[int]
    live: dict[str, int]
    by_subject: dict[str, list[int]]
    cursor: dict[str, int]
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
        self.killed: set[int] = set()
        self._live: dict[str, int] = {}
        # Appended sequences by subject, indexed from `subjects` only when a question needs
        # them (expected-* headers, rollups, per-subject limits), so plain batches never do.
        self._appended_by_subject: dict[str, list[int]] = {}
        self._indexed = 0
        # The sequence of subjects[_indexed]: appends follow one another, but `kill_below`
        # past the end makes the next one jump ahead.
        self._next_to_index = view.last_seq + 1
        # Per subject, how far into the view's sequences the oldest-live search has got.
        self._cursor: dict[str, int] = {}
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

    def live_count(self, subject: str) -> int:
        count = self._live.get(subject)
        if count is None:
            ss = self.view.by_subject.get(subject)
            count = ss.live if ss is not None else 0
        return count

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

    def last_for(self, subject: str) -> int:
        for seq in reversed(self._appended_of(subject)):
            if seq not in self.killed:
                return seq
        ss = self.view.by_subject.get(subject)
        if ss is None:
            return 0
        for i in range(len(ss.seqs) - 1, ss.head - 1, -1):
            if self.is_live(ss.seqs[i]):
                return ss.seqs[i]
        return 0

    def last_matching(self, filter_subject: str) -> int:
        """Like `last_for`, for a filter that may hold wildcards (nats-server's LoadLastMsg)."""
        if not any(c in filter_subject for c in "*>"):
            return self.last_for(filter_subject)
        names = set(self.view.by_subject) | set(self._appended())
        return max((self.last_for(n) for n in names if matches(filter_subject, n)), default=0)

    def oldest_for(self, subject: str) -> int:
        ss = self.view.by_subject.get(subject)
        if ss is not None:
            i = self._cursor.get(subject, ss.head)
            while i < len(ss.seqs):
                if self.is_live(ss.seqs[i]):
                    self._cursor[subject] = i
                    return ss.seqs[i]
                i += 1
            self._cursor[subject] = i
        for seq in self._appended_of(subject):
            if seq not in self.killed:
                return seq
        return 0

    def live_of_subject(self, subject: str) -> list[int]:
        ss = self.view.by_subject.get(subject)
        older = ss.seqs[ss.head :] if ss is not None else ()
        newer = self._appended_of(subject)
        return [s for s in (*older, *newer) if self.is_live(s)]

    def append(self, subject: str, size: int) -> int:
        self.subjects.append(subject)
        self.sizes.append(size)
        self.last_seq += 1
        count = self.live_count(subject)
        if count == 0:
            self.num_subjects += 1
        self._live[subject] = count + 1
        self.msgs += 1
        self.bytes += size
        return self.last_seq

    def append_many(self, subjects: list[str], sizes: list[int]) -> int:
        """`append` each message in order, in a few C-level passes; the first one's sequence."""
        first = self.last_seq + 1
        self.subjects += subjects
        self.sizes += sizes
        self.last_seq += len(subjects)
        self.msgs += len(subjects)
        self.bytes += sum(sizes)
        for subject, added in Counter(subjects).items():
            count = self.live_count(subject)
            if count == 0:
                self.num_subjects += 1
            self._live[subject] = count + added
        return first

    def kill(self, seq: int) -> bool:
        if not self.is_live(seq):
            return False
        subject = self.subject_of(seq)
        count = self.live_count(subject) - 1
        self._live[subject] = count
        if count == 0:
            self.num_subjects -= 1
        self.msgs -= 1
        self.bytes -= self.size_of(seq)
        self.killed.add(seq)
        if seq == self.first_seq:
            self._advance_head()
        return True

    def _advance_head(self) -> None:
        first = self.first_seq
        while first <= self.last_seq and not self.is_live_ignoring_head(first):
            first += 1
        self.first_seq = first

    def is_live_ignoring_head(self, seq: int) -> bool:
        if seq in self.killed:
            return False
        return seq > self.base or seq not in self.view.tombs

    def kill_below(self, new_first: int) -> int:
        """Delete everything below `new_first`; returns how many live messages went."""
        removed = 0
        while self.msgs and self.first_seq < new_first:
            if self.kill(self.first_seq):
                removed += 1
        if new_first > self.first_seq:
            self.first_seq = new_first
            if new_first - 1 > self.last_seq:
                # The end moves too: appends so far keep their sequences, later ones follow on.
                self._appended()
                self.last_seq = new_first - 1
                self._next_to_index = new_first
        return removed

    def checkpoint(self) -> Checkpoint:
        """What `restore` needs to undo every change made after this call (an atomic batch
        that fails); it costs the size of this plan, not of the stream."""
        return Checkpoint(
            scalars=(
                self.first_seq,
                self.last_seq,
                self.msgs,
                self.bytes,
                self.num_subjects,
                self._indexed,
                self._next_to_index,
            ),
            appended=len(self.subjects),
            killed=set(self.killed),
            live=dict(self._live),
            by_subject={s: list(seqs) for s, seqs in self._appended_by_subject.items()},
            cursor=dict(self._cursor),
            ttls=dict(self.ttls),
            forgotten=len(self.forgotten),
            schedules=dict(self.schedules),
            rescheduled=dict(self.rescheduled),
        )

    def restore(self, point: Checkpoint) -> None:
        (
            self.first_seq,
            self.last_seq,
            self.msgs,
            self.bytes,
            self.num_subjects,
            self._indexed,
            self._next_to_index,
        ) = point.scalars
        del self.subjects[point.appended :]
        del self.sizes[point.appended :]
        self.killed = point.killed
        self._live = point.live
        self._appended_by_subject = point.by_subject
        self._cursor = point.cursor
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
        return seq in self.view.never

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
        """The view's never-expiring messages that this change deletes."""
        never = self.view.never
        if not never:
            return []
        # A live message leaves only by being killed: go over the smaller of the two.
        if len(self.killed) < len(never):
            return sorted(s for s in self.killed if s in never)
        return sorted(s for s in never if not self.is_live(s))

    def new_tombstones(self) -> list[int]:
        """Deleted sequences that stay inside the live range and so need a tombstone."""
        return sorted(s for s in self.killed if s > self.first_seq and s <= self.last_seq)

    def dropped_tombstones(self) -> list[int]:
        """The view's tombstones that fall below the new head and can go."""
        return sorted(t for t in self.view.tombs if t < self.first_seq)
