"""A consumer's progress through its stream: what to hand out next, and what an ack changes.

Pure functions over a `ConsumerState` and a `StreamView`; the caller commits the new state with
compare-and-set and only then delivers or answers. The rules are nats-server's
(server/consumer.go getNextMsg, processAckMsg, processNak): redeliveries first, then new messages
up to max_ack_pending; a message past max_deliver, or deleted from the stream, leaves pending.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass

import msgspec

from infinistream.consumer.config import ConsumerConfig
from infinistream.consumer.records import ConsumerState, Pending
from infinistream.jetstream.subjects import matches
from infinistream.stream.view import StreamView


@dataclass(slots=True)
class Delivery:
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
        if not self.subjects:
            yield from view.live_seqs(start)
        elif len(self.subjects) == 1:
            yield from view.live_seqs(start, self.subjects[0])
        else:
            for seq in view.live_seqs(start):
                if self.matches(view.subject_of(seq)):
                    yield seq

    def count_after(self, view: StreamView, after: int) -> int:
        """How many live messages past `after` pass the filter."""
        if not self.subjects:
            live_range = view.last_seq - max(after, view.first_seq - 1)
            if live_range <= 0:
                return 0
            return live_range - sum(1 for t in view.tombs if t > after)
        total = 0
        for subject in view.subjects_matching(""):
            if not self.matches(subject):
                continue
            ss = view.by_subject[subject]
            i = bisect_right(ss.seqs, after, lo=ss.head)
            total += sum(1 for s in ss.seqs[i:] if view.is_live(s))
        return total


def copy_state(state: ConsumerState) -> ConsumerState:
    return msgspec.structs.replace(
        state, pending=dict(state.pending), start_seqs=list(state.start_seqs)
    )


def ack_wait_ns(cfg: ConsumerConfig, deliveries: int) -> int:
    if cfg.backoff:
        return cfg.backoff[min(deliveries - 1, len(cfg.backoff) - 1)]
    return cfg.ack_wait


def starting_point(cfg: ConsumerConfig, view: StreamView, seq_for_time: int) -> tuple[int, list[int]]:
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
            view.last_for(subject) for subject in view.subjects_matching("") if filt.matches(subject)
        )
        return view.last_seq, [s for s in lasts if s]
    return max(view.first_seq - 1, 0), []


def num_pending(state: ConsumerState, filt: Filter, view: StreamView) -> int:
    start_left = sum(1 for s in state.start_seqs if view.is_live(s))
    return start_left + filt.count_after(view, state.stream_seq)


def settle_floor(state: ConsumerState) -> None:
    """Move the ack floor to just below the oldest unacknowledged delivery."""
    if state.pending:
        oldest = min(state.pending)
        state.ack_floor_stream = oldest - 1
        entry = state.pending[oldest]
        state.ack_floor_consumer = (entry.first_consumer_seq or entry.consumer_seq) - 1
    else:
        state.ack_floor_stream = state.stream_seq
        state.ack_floor_consumer = state.consumer_seq


def claim(
    state: ConsumerState,
    cfg: ConsumerConfig,
    filt: Filter,
    view: StreamView,
    now: int,
    batch: int,
    max_bytes: int = 0,
) -> tuple[list[Delivery], bool]:
    """Hand out up to `batch` messages, changing `state`; True if max_bytes stopped it early."""
    out: list[Delivery] = []
    used = 0
    explicit = cfg.ack_policy != "none"
    for seq in sorted(s for s, p in state.pending.items() if p.deadline <= now):
        if len(out) >= batch:
            return out, False
        entry = state.pending[seq]
        if not view.is_live(seq) or (cfg.max_deliver > 0 and entry.deliveries >= cfg.max_deliver):
            del state.pending[seq]
            continue
        size = view.size_of(seq)
        if max_bytes and used + size > max_bytes:
            return out, True
        used += size
        state.consumer_seq += 1
        deliveries = entry.deliveries + 1
        state.pending[seq] = Pending(
            state.consumer_seq,
            deliveries,
            now + ack_wait_ns(cfg, deliveries),
            now,
            entry.first_consumer_seq or entry.consumer_seq,
        )
        out.append(Delivery(seq, state.consumer_seq, deliveries))
    capacity = cfg.max_ack_pending - len(state.pending) if explicit and cfg.max_ack_pending > 0 else batch
    for seq in _next_new(state, filt, view):
        if len(out) >= batch or capacity <= 0:
            break
        size = view.size_of(seq)
        if max_bytes and used + size > max_bytes:
            settle_floor(state)
            return out, True
        used += size
        if state.start_seqs and state.start_seqs[0] == seq:
            state.start_seqs.pop(0)
        else:
            state.stream_seq = max(state.stream_seq, seq)
        state.consumer_seq += 1
        if explicit:
            state.pending[seq] = Pending(
                state.consumer_seq, 1, now + ack_wait_ns(cfg, 1), now, state.consumer_seq
            )
            capacity -= 1
        out.append(Delivery(seq, state.consumer_seq, 1))
    if out:
        state.last_delivered_ns = now
    settle_floor(state)
    return out, False


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


def next_deadline(state: ConsumerState) -> int:
    """The earliest redelivery deadline, or 0 if nothing is pending."""
    return min((p.deadline for p in state.pending.values()), default=0)


# -- acks ----------------------------------------------------------------------------------

ACK, NAK, PROGRESS, TERM, NEXT = "ack", "nak", "progress", "term", "next"


@dataclass(slots=True)
class Ack:
    kind: str
    stream_seq: int
    deliveries: int
    # For -NAK: redeliver after this many nanoseconds (None: as soon as possible / backoff).
    delay: int | None = None


def apply_ack(state: ConsumerState, cfg: ConsumerConfig, ack: Ack, now: int) -> bool:
    """Apply one ack to `state`; False if it changed nothing (unknown or already acked)."""
    if cfg.ack_policy == "none":
        return False
    seq = ack.stream_seq
    if ack.kind in (ACK, NEXT) or (ack.kind == TERM and cfg.ack_policy != "all"):
        if cfg.ack_policy == "all" and ack.kind != TERM:
            done = [s for s in state.pending if s <= seq]
        else:
            done = [seq] if seq in state.pending else []
        for s in done:
            del state.pending[s]
        if done:
            state.last_ack_ns = now
            settle_floor(state)
        return bool(done)
    entry = state.pending.get(seq)
    if entry is None:
        return False
    if ack.kind == TERM:
        del state.pending[seq]
        settle_floor(state)
        return True
    if ack.kind == NAK:
        if ack.delay is not None:
            deadline = now + ack.delay
        elif cfg.backoff:
            deadline = now + ack_wait_ns(cfg, entry.deliveries)
        else:
            deadline = 0
        state.pending[seq] = msgspec.structs.replace(entry, deadline=deadline)
        return True
    if ack.kind == PROGRESS:
        state.pending[seq] = msgspec.structs.replace(
            entry, deadline=now + ack_wait_ns(cfg, entry.deliveries)
        )
        return True
    return False


def acked_by(state: ConsumerState, filt: Filter, seq: int, subject: str) -> bool:
    """Whether this consumer is done with stream message `seq` (for interest retention)."""
    if not filt.matches(subject):
        return True
    return seq <= state.stream_seq and seq not in state.pending and seq not in state.start_seqs
