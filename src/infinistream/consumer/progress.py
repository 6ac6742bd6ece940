"""A consumer's progress through its stream: what to hand out next, and what an ack changes.

Pure functions over a `ConsumerState` and a `StreamView`; the caller commits the new state with
compare-and-set and only then delivers or answers. The rules are nats-server's
(server/consumer.go getNextMsg, processAckMsg, processNak): redeliveries first, then new messages
up to max_ack_pending; a message past max_deliver, or deleted from the stream, leaves pending.

The ack floor follows nats-server's consumer store (server/filestore.go consumerFileStore
UpdateAcks), which is what CONSUMER.INFO reports: it moves only on acks, never on deliveries.
A message past max_deliver stays in `pending` marked `EXCEEDED` (nats-server keeps it in its
redelivered map): it is no longer awaiting an ack, but it still counts in num_redelivered and an
interest stream keeps it until it is acked, as in nats-server.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate, islice, repeat
from operator import attrgetter
from typing import cast

import msgspec

from infinistream.consumer.config import ConsumerConfig
from infinistream.consumer.records import ConsumerState, Pending
from infinistream.jetstream.subjects import matches
from infinistream.stream.sections import Segment
from infinistream.stream.view import StreamView


class Delivery(msgspec.Struct, gc=False):
    stream_seq: int
    consumer_seq: int
    deliveries: int


class Filter:
    """A consumer's subject filter: nothing (everything), one subject, or several."""

    __slots__ = ("subjects",)

    def __init__(self, cfg: ConsumerConfig) -> None:
        subjects = list(cfg.filter_subjects or [])
        if cfg.filter_subject:
            subjects.append(cfg.filter_subject)
        # ">" filters nothing out.
        self.subjects = [] if ">" in subjects else subjects

    def __bool__(self) -> bool:
        return bool(self.subjects)

    def matches(self, subject: str) -> bool:
        return not self.subjects or any(matches(f, subject) for f in self.subjects)

    def live_seqs(self, view: StreamView, start: int) -> Iterator[int]:
        """Live sequences from `start` that pass the filter, in order."""
        if not self.subjects or self._passes_all(view):
            return view.live_seqs(start)
        if len(self.subjects) == 1:
            return view.live_seqs(start, self.subjects[0])
        return (seq for seq in view.live_seqs(start) if self.matches(view.subject_of(seq)))

    def count_after(self, view: StreamView, after: int) -> int:
        """How many live messages past `after` pass the filter (see `StreamView.count_after`:
        from the subject records and section summaries where they tell, record by record
        where they do not)."""
        return view.count_after(after, [] if self._passes_all(view) else self.subjects)

    def _passes_all(self, view: StreamView) -> bool:
        """Whether every live message of the stream is on the filter's one literal subject
        (a client's consumer on a stream of one subject, as nats-py's `pull_subscribe` makes
        one): then the stream's own counts and sequences are the filter's, and no record need
        be looked at one by one for its subject."""
        if len(self.subjects) != 1:
            return False
        subject = self.subjects[0]
        if "*" in subject or ">" in subject:
            return False
        record = view.subject_record(subject)
        return record is not None and record.count == view.msgs


# Pending.deadline of a message that reached max_deliver: never redelivered, no longer awaiting
# an ack (not in num_ack_pending nor against max_ack_pending), still counted as redelivered.
EXCEEDED = -1


def awaiting(entry: Pending) -> bool:
    """Whether a pending entry is a delivery awaiting its ack (not one past max_deliver)."""
    return entry.deadline != EXCEEDED


def num_ack_pending(state: ConsumerState) -> int:
    return len(state.pending) - list(map(_deadline_of, state.pending.values())).count(EXCEEDED)


def num_redelivered(state: ConsumerState, cfg: ConsumerConfig) -> int:
    """nats-server's len(o.rdc), zeroed for max_deliver 1 as its consumer info does."""
    if cfg.max_deliver == 1:
        return 0
    return sum(1 for p in state.pending.values() if p.deliveries > 1 or p.deadline == EXCEEDED)


def copy_state(state: ConsumerState) -> ConsumerState:
    return msgspec.structs.replace(
        state, pending=dict(state.pending), start_seqs=list(state.start_seqs)
    )


def ack_wait_ns(cfg: ConsumerConfig, deliveries: int) -> int:
    if cfg.backoff:
        return cfg.backoff[min(deliveries - 1, len(cfg.backoff) - 1)]
    return cfg.ack_wait


def starting_point(
    cfg: ConsumerConfig, view: StreamView, seq_for_time: int
) -> tuple[int, list[int]]:
    """(last stream sequence considered delivered, last-per-subject sequences to hand out first)."""
    filt = Filter(cfg)
    policy = cfg.deliver_policy
    if policy == "new":
        return view.last_seq, []
    if policy == "last":
        last = 0
        for subject in view.subjects_matching(""):
            if filt.matches(subject):
                last = max(last, view.last_for(subject))
        return (last - 1, []) if last else (view.last_seq, [])
    if policy == "by_start_sequence":
        return max(cfg.opt_start_seq - 1, 0), []
    if policy == "by_start_time":
        return max(seq_for_time - 1, 0), []
    if policy == "last_per_subject":
        lasts = sorted(
            view.last_for(subject)
            for subject in view.subjects_matching("")
            if filt.matches(subject)
        )
        return view.last_seq, [s for s in lasts if s]
    return max(view.first_seq - 1, 0), []


def num_pending(state: ConsumerState, filt: Filter, view: StreamView) -> int:
    start_left = sum(1 for s in state.start_seqs if view.is_live(s))
    return start_left + filt.count_after(view, state.stream_seq)


def floor_at_delivered(state: ConsumerState) -> None:
    state.ack_floor_stream = state.stream_seq
    state.ack_floor_consumer = state.consumer_seq


# Sizes a delivery for max_bytes: (stream seq, deliveries, consumer seq, new deliveries so far).
SizeOf = Callable[[int, int, int, int], int]


def prune(state: ConsumerState, cfg: ConsumerConfig, view: StreamView) -> bool:
    """Drop pending messages no longer in the stream; True if anything changed.

    nats-server (decStreamPending) handles a pending message that leaves the stream as a +TERM,
    that is as an ack, so the floor moves by the ack rules; one past max_deliver is forgotten.
    """
    pending = state.pending
    if not pending or (
        view.first_seq <= min(pending)
        and max(pending) <= view.last_seq
        and view.tombstones().isdisjoint(pending)
    ):
        return False  # all still live: told by set operations, not asked one by one
    changed = False
    for seq in sorted(state.pending):
        entry = state.pending.get(seq)
        if entry is None or view.is_live(seq):
            continue
        changed = True
        if not awaiting(entry) or not _ack(
            state, cfg, seq, entry.first_consumer_seq or entry.consumer_seq
        ):
            # Past max_deliver, or (ack policy all) below a floor that a later delivery's ack
            # moved past its first delivery: it only leaves pending.
            state.pending.pop(seq, None)
    return changed


def _due(pending: dict[int, Pending], now: int) -> tuple[list[int], int]:
    """The sequences due for redelivery at `now`, in order, and how many pending messages
    await an ack (`num_ack_pending`, which redelivering the due ones changes: the caller
    counts again if there are any).

    One pass over the pending messages' deadlines serves both; the sequences are
    looked for only when some deadline has passed (usually none has)."""
    deadlines = list(map(_deadline_of, pending.values()))
    awaiting_ack = len(deadlines) - deadlines.count(EXCEEDED)
    if not deadlines or min(deadlines) > now:
        return [], awaiting_ack
    ordered = sorted(deadlines)
    i = bisect_left(ordered, 0)  # past EXCEEDED ones
    if i == len(ordered) or ordered[i] > now:
        return [], awaiting_ack
    return sorted(s for s, p in pending.items() if 0 <= p.deadline <= now), awaiting_ack


def claim(
    state: ConsumerState,
    cfg: ConsumerConfig,
    filt: Filter,
    view: StreamView,
    now: int,
    batch: int,
    max_bytes: int = 0,
    size_of: SizeOf | None = None,
    chunk_bytes: int = 0,
) -> tuple[list[Delivery], bool]:
    """Hand out up to `batch` messages, changing `state`; True if max_bytes stopped it early.

    `size_of` gives a delivery's size as max_bytes and `chunk_bytes` (0: none; ends the claim
    unblocked before a message past it, but the first) count it (nats-server: subject, ack reply,
    headers and data); without it, the stored record's size. The state may change with nothing
    handed out (pending messages gone, or past max_deliver): the caller compares to commit.
    """
    out: list[Delivery] = []
    used = 0
    fresh = 0
    explicit = cfg.ack_policy != "none"
    length_of = RecordLengths(view)

    def size(seq: int, deliveries: int) -> int:
        if size_of is None:
            return length_of(seq)
        return size_of(seq, deliveries, state.consumer_seq + 1, fresh)

    blocked = False
    prune(state, cfg, view)
    due, awaiting_ack = _due(state.pending, now)
    for seq in due:
        entry = state.pending[seq]
        if cfg.max_deliver > 0 and entry.deliveries >= cfg.max_deliver:
            # nats-server (getNextMsg) drops it from pending without moving the ack floor, and
            # keeps counting it as redelivered.
            state.pending[seq] = msgspec.structs.replace(entry, deadline=EXCEEDED)
            continue
        if blocked or len(out) >= batch:
            continue
        sz = size(seq, entry.deliveries + 1)
        if max_bytes and used + sz > max_bytes:
            blocked = True
            continue
        if chunk_bytes and out and used + sz > chunk_bytes:
            batch = len(out)  # the chunk is full: nothing more, redelivered or new
            continue
        used += sz
        state.consumer_seq += 1
        deliveries = entry.deliveries + 1
        first, wait = entry.first_consumer_seq or entry.consumer_seq, ack_wait_ns(cfg, deliveries)
        state.pending[seq] = Pending(state.consumer_seq, deliveries, now + wait, now, first)
        out.append(Delivery(seq, state.consumer_seq, deliveries))
    capacity = batch - len(out)
    if explicit and cfg.max_ack_pending > 0:
        awaiting_ack = num_ack_pending(state) if due else awaiting_ack
        capacity = min(capacity, cfg.max_ack_pending - awaiting_ack)
    # The hot loop of a fetch: everything that does not depend on the message is hoisted.
    deadline = now + ack_wait_ns(cfg, 1)
    pending, start_seqs, append = state.pending, state.start_seqs, out.append
    consumer_seq = state.consumer_seq
    candidates: Iterator[int] = iter(())
    if blocked or capacity <= 0:
        pass
    elif not start_seqs and not max_bytes and size_of is None:
        # The usual fetch: new messages in order, bounded by count and chunk alone, handed out
        # as a run rather than one at a time.
        _claim_run(state, explicit, filt, view, now, deadline, capacity, chunk_bytes, used, out)
    else:
        candidates = _next_new(state, filt, view)
    for seq in candidates:
        if max_bytes or chunk_bytes:
            sz = size(seq, 1)
            if max_bytes and used + sz > max_bytes:
                blocked = True
                break
            if chunk_bytes and out and used + sz > chunk_bytes:
                break
            used += sz
        fresh += 1
        if start_seqs and start_seqs[0] == seq:
            start_seqs.pop(0)
        elif seq > state.stream_seq:
            state.stream_seq = seq
        consumer_seq += 1
        state.consumer_seq = consumer_seq
        if explicit:
            pending[seq] = Pending(consumer_seq, 1, deadline, now, consumer_seq)
        append(Delivery(seq, consumer_seq, 1))
        capacity -= 1
        if capacity <= 0:
            break
    if out:
        state.last_delivered_ns = now
        if not explicit:
            # With ack policy none the floor is what was delivered (consumerFileStore
            # UpdateDelivered); with acks it moves only on acks.
            floor_at_delivered(state)
    return out, blocked


def _claim_run(
    state: ConsumerState,
    explicit: bool,
    filt: Filter,
    view: StreamView,
    now: int,
    deadline: int,
    capacity: int,
    chunk_bytes: int,
    used: int,
    out: list[Delivery],
) -> None:
    """`claim`'s new messages when only a count and `chunk_bytes` bound them: the next
    `capacity` live sequences, cut where their records pass the chunk (but the first of the
    claim), given consecutive consumer sequences in one pass each."""
    seqs = list(islice(filt.live_seqs(view, state.stream_seq + 1), capacity))
    if not seqs:
        return
    if chunk_bytes:
        ends = accumulate(RecordLengths(view).run(seqs), initial=used)
        # ends[k + 1] is what the claim has used once seqs[k] is in.
        cut = bisect_right(list(ends), chunk_bytes) - 1
        seqs = seqs[: max(cut, 0 if out else 1)]
        if not seqs:
            return
    first = state.consumer_seq + 1
    consumer_seqs = range(first, first + len(seqs))
    state.stream_seq = seqs[-1]
    state.consumer_seq = consumer_seqs[-1]
    if explicit:
        entries = map(
            Pending, consumer_seqs, repeat(1), repeat(deadline), repeat(now), consumer_seqs
        )
        state.pending.update(zip(seqs, entries, strict=True))
    out += map(Delivery, seqs, consumer_seqs, repeat(1))


class RecordLengths:
    """`StreamView.record_length_of`, for a claim's run of sequences: the segment found for one
    serves the sequences after it, rather than each finding its section again."""

    __slots__ = ("_segment", "_view")

    def __init__(self, view: StreamView) -> None:
        self._view = view
        self._segment: Segment | None = None

    def __call__(self, seq: int) -> int:
        seg = self._segment
        i = seg.index_of(seq) if seg is not None else None
        if seg is None or i is None:
            seg = self._segment = self._view.segment_for(seq)
            i = seg.index_of(seq) if seg is not None else None
            assert seg is not None and i is not None, seq
        return seg.lengths[i]

    def run(self, seqs: list[int]) -> list[int]:
        """The record lengths of `seqs`, in increasing order: a stretch of consecutive ones
        that one segment holds is sliced from its lengths at once."""
        out: list[int] = []
        i, n = 0, len(seqs)
        while i < n:
            seq = seqs[i]
            self(seq)  # finds its segment
            seg = self._segment
            assert seg is not None
            j = min(n, i + seg.last - seq + 1)
            at = seg.index_of(seq)
            if seg.seqs is None and at is not None and seqs[j - 1] - seq == j - 1 - i:
                out += seg.lengths[at : at + j - i]
                i = j
            else:
                out.append(self(seq))
                i += 1
        return out


def _next_new(state: ConsumerState, filt: Filter, view: StreamView) -> Iterator[int]:
    while state.start_seqs:
        seq = state.start_seqs[0]
        if view.is_live(seq):
            yield seq
            if state.start_seqs and state.start_seqs[0] == seq:
                return
        else:
            state.start_seqs.pop(0)
    yield from filt.live_seqs(view, state.stream_seq + 1)


def expire_pending(state: ConsumerState) -> bool:
    """Make every delivery awaiting its ack due for redelivery now; True if there was one."""
    changed = False
    for seq, entry in state.pending.items():
        if awaiting(entry) and entry.deadline != 0:
            state.pending[seq] = msgspec.structs.replace(entry, deadline=0)
            changed = True
    return changed


def next_deadline(state: ConsumerState) -> int:
    """The earliest redelivery deadline, or 0 if nothing awaits an ack."""
    return min((p.deadline for p in state.pending.values() if p.deadline != EXCEEDED), default=0)


# -- acks ----------------------------------------------------------------------------------

ACK, NAK, PROGRESS, TERM, NEXT = "ack", "nak", "progress", "term", "next"


class Ack(msgspec.Struct, gc=False):
    kind: str
    stream_seq: int
    deliveries: int
    # For -NAK: redeliver after this many nanoseconds (None: as soon as possible).
    delay: int | None = None
    # The consumer sequence in the ack subject (this delivery's); 0 if unknown.
    consumer_seq: int = 0


class PlainAcks(msgspec.Struct, gc=False):
    """Plain acks of one consumer, in order, as columns rather than an `Ack` each: what a
    client sends for what it fetched, by the hundred. Each is `Ack(ACK, stream_seq, 0, None,
    consumer_seq)`, the delivery count aside, which a plain ack does not read."""

    stream_seqs: list[int]
    consumer_seqs: list[int]

    def each(self) -> list[Ack]:
        pairs = zip(self.stream_seqs, self.consumer_seqs, strict=True)
        return [Ack(ACK, s, 0, None, c) for s, c in pairs]


def apply_ack(state: ConsumerState, cfg: ConsumerConfig, ack: Ack, now: int) -> bool:
    """Apply one ack to `state`; False if it changed nothing (unknown or already acked).

    As nats-server's processAck: +TERM is an ack (for ack policy all too, it acks everything
    up to it); an ack past the last delivered sequence is ignored; -NAK and +WPI apply only to
    a message awaiting its ack.
    """
    if cfg.ack_policy == "none":
        return False
    seq = ack.stream_seq
    if ack.kind in (ACK, NEXT, TERM):
        if seq > state.stream_seq:
            return False
        if _ack(state, cfg, seq, ack.consumer_seq):
            state.last_ack_ns = now
            return True
        return False
    entry = state.pending.get(seq)
    if entry is None or not awaiting(entry):
        return False
    if ack.kind == NAK:
        # processNak: a plain -NAK queues the message for redelivery now, backoff or not; a
        # delay postpones it.
        deadline = now + ack.delay if ack.delay is not None else 0
        state.pending[seq] = msgspec.structs.replace(entry, deadline=deadline)
        return True
    if ack.kind == PROGRESS:
        state.pending[seq] = msgspec.structs.replace(
            entry, deadline=now + ack_wait_ns(cfg, entry.deliveries)
        )
        return True
    return False


def apply_ack_run(
    state: ConsumerState, cfg: ConsumerConfig, acks: Sequence[Ack | PlainAcks], now: int
) -> bool:
    """`apply_ack` of each of `acks` in order (a `PlainAcks` standing for its acks); True if
    any changed the state.

    Plain acks of an explicit-ack consumer, nearly all of a fetch-and-ack cycle's, go straight
    to the ack rule: the checks that tell the other kinds apart are made once per ack here,
    and a run of them from the ack floor is applied at once (`_acks_from_floor`).
    """
    if cfg.ack_policy != "explicit":
        return any([apply_ack(state, cfg, ack, now) for ack in _each(acks)])
    changed = acked = False
    for ack in acks:
        if isinstance(ack, PlainAcks):
            acked = _plain_acks(state, cfg, ack.stream_seqs, ack.consumer_seqs) or acked
        elif ack.kind == ACK:
            if ack.stream_seq <= state.stream_seq and _ack(
                state, cfg, ack.stream_seq, ack.consumer_seq
            ):
                acked = True
        elif apply_ack(state, cfg, ack, now):
            changed = True
    if acked:
        state.last_ack_ns = now
    return changed or acked


def _each(acks: Sequence[Ack | PlainAcks]) -> list[Ack]:
    out: list[Ack] = []
    for ack in acks:
        if isinstance(ack, PlainAcks):
            out += ack.each()
        else:
            out.append(ack)
    return out


def _plain_acks(
    state: ConsumerState, cfg: ConsumerConfig, seqs: list[int], dseqs: list[int]
) -> bool:
    """Plain acks of stream sequences `seqs` (consumer sequences `dseqs`), in order, to an
    explicit-ack consumer; True if any acked something."""
    if _acks_from_floor(state, seqs):
        seqs, dseqs = seqs[-1:], dseqs[-1:]
        acked = True
    else:
        acked = False
    delivered = state.stream_seq
    for seq, dseq in zip(seqs, dseqs, strict=True):
        if seq <= delivered and _ack(state, cfg, seq, dseq):
            acked = True
    return acked


def _acks_from_floor(state: ConsumerState, seqs: list[int]) -> bool:
    """Apply the plain acks of all but the last of `seqs` at once if they are what a client
    usually sends: in order, of the first deliveries just above the ack floor (of an
    explicit-ack consumer); False, changing nothing, otherwise.

    One by one, each such ack moves the floor to just below the next, which awaits its ack:
    all but the last leave the floor just below the last, which `_ack` then applies alone.
    """
    n = len(seqs)
    if n < 2:
        return False
    start = seqs[0]
    if seqs != list(range(start, start + n)):
        return False
    pending = state.pending
    found = cast(list[Pending], list(map(pending.get, seqs)))
    try:
        # A first delivery's entry names itself as its first (`claim`); only redeliveries of
        # entries older than that field need the fallback.
        firsts = list(map(_first_of, found))
    except AttributeError:
        return False  # one is not pending (None has no first consumer sequence)
    if 0 in firsts:
        firsts = [p.first_consumer_seq or p.consumer_seq for p in found]
    first = firsts[0]
    if first != state.ack_floor_consumer + 1 or firsts != list(range(first, first + n)):
        return False
    if min(map(_deadline_of, found)) == EXCEEDED:
        return False
    # Deleted by one C-level pass (a deque that keeps nothing consumes the map).
    deque(map(pending.pop, seqs[:-1]), maxlen=0)
    state.ack_floor_stream, state.ack_floor_consumer = seqs[-1] - 1, firsts[-1] - 1
    return True


_first_of = attrgetter("first_consumer_seq")
_deadline_of = attrgetter("deadline")


def _ack(state: ConsumerState, cfg: ConsumerConfig, seq: int, dseq: int) -> bool:
    """One ack of stream message `seq` delivered as consumer sequence `dseq` (0: unknown).

    nats-server's processAckMsg with consumerFileStore.UpdateAcks, whose floor CONSUMER.INFO
    reports. Explicit: when nothing awaits an ack any more the floor is what was delivered;
    otherwise it moves only if this was the delivery just above it, and then up to just below
    the next message awaiting an ack. All: everything up to `seq` is acked and the floor
    becomes this delivery.
    """
    if cfg.ack_policy == "all":
        entry = state.pending.get(seq)
        if not dseq and entry is not None:
            dseq = entry.consumer_seq
        if seq <= state.ack_floor_stream or (dseq and dseq <= state.ack_floor_consumer):
            return False
        done = [s for s in state.pending if s <= seq]
        for s in done:
            del state.pending[s]
        if entry is not None and awaiting(entry):
            state.ack_floor_stream, state.ack_floor_consumer = seq, dseq
        return bool(done)
    pending = state.pending
    entry = pending.pop(seq, None)
    if entry is None:
        return False
    if entry.deadline == EXCEEDED:
        # Past max_deliver: the ack only ends its count as redelivered.
        return True
    first = entry.first_consumer_seq or entry.consumer_seq
    # Acks mostly come in delivery order of a stream without gaps, so the next one awaiting
    # is usually the very next sequence: looked up, not searched for (the search walks from
    # the front of a dict whose front the acks before emptied).
    after = pending.get(seq + 1)
    if after is not None and after.deadline != EXCEEDED:
        nxt: int | None = seq + 1
    else:
        nxt = _next_awaiting_above(pending, seq)
    if nxt is None and not any(awaiting(p) for p in pending.values()):
        floor_at_delivered(state)
    elif first == state.ack_floor_consumer + 1:
        state.ack_floor_stream, state.ack_floor_consumer = seq, first
        if nxt is not None and state.consumer_seq > first:
            p = state.pending[nxt]
            state.ack_floor_stream = nxt - 1
            state.ack_floor_consumer = (p.first_consumer_seq or p.consumer_seq) - 1
    return True


def _next_awaiting_above(pending: dict[int, Pending], seq: int) -> int | None:
    """The lowest sequence above `seq` still awaiting an ack.

    Acks usually come in delivery order, and pending entries are added in increasing
    sequence order, so the answer is normally at the front: scan in order and stop there,
    falling back to a full scan if the order does not hold.
    """
    previous = -1
    for s, p in pending.items():
        if s < previous:
            above = [t for t, q in pending.items() if t > seq and awaiting(q)]
            return min(above) if above else None
        previous = s
        if s > seq and awaiting(p):
            return s
    return None


def skip_purged(state: ConsumerState, first_seq: int) -> bool:
    """The stream now starts at `first_seq` (a purge): forget what is gone.

    nats-server's consumer purge: delivery resumes at the new first sequence, pending messages
    below it are dropped, and the ack floor moves to just below it against the last delivery.
    """
    changed = False
    if state.stream_seq < first_seq - 1:
        state.stream_seq = first_seq - 1
        changed = True
    for seq in [s for s in state.pending if s < first_seq]:
        del state.pending[seq]
        changed = True
    kept = [s for s in state.start_seqs if s >= first_seq]
    if kept != state.start_seqs:
        state.start_seqs = kept
        changed = True
    if state.ack_floor_stream < first_seq - 1:
        state.ack_floor_stream = first_seq - 1
        state.ack_floor_consumer = state.consumer_seq
        changed = True
    return changed


def acked_by(state: ConsumerState, filt: Filter, seq: int, subject: str) -> bool:
    """Whether this consumer is done with stream message `seq` (for interest retention)."""
    if not filt.matches(subject):
        return True
    return seq <= state.stream_seq and seq not in state.pending and seq not in state.start_seqs
