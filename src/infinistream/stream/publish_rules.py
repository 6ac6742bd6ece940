"""Deciding, message by message, what a batch of publishes does to one stream.

The checks run in nats-server's order (server/stream.go, processJetStreamMsg): sealed, expected
stream, per-message TTL allowed, expected last subject sequence, expected last sequence,
message schedules, Nats-Msg-Id dedupe, expected last msg id, rollup, size, the TTL's value,
then the limits and discard policy of the store.
Each message gets a sequence, a duplicate's earlier sequence, or an error; accepted messages
and the deletes that limits cause are recorded in a `Changes`. Most batches need none of the
checks (no headers, no per-subject limits): those take a path that plans the whole batch at
once, with the same result.

A message's headers are read once, when it joins the write buffer (`read_headers`): each
value as nats-server reads it, so that planning a batch never parses a client's bytes and a
malformed header fails its own message with nats-server's error, never the batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from infinistream.jetstream import errors
from infinistream.jetstream.api import StreamConfig
from infinistream.jetstream.subjects import is_literal, matches
from infinistream.protocol import header_int, header_value
from infinistream.stream.changes import Changes
from infinistream.stream.counter_claim import CounterClaim
from infinistream.stream.limits import evict_for_count_and_size, trim_subject
from infinistream.stream.publish_headers import (
    EXPECTED_LAST_MSG_ID,
    EXPECTED_LAST_SEQ,
    EXPECTED_LAST_SUBJECT_SEQ,
    EXPECTED_LAST_SUBJECT_SEQ_SUBJECT,
    EXPECTED_STREAM,
    MSG_ID,
    ROLLUP,
)
from infinistream.stream.records import seq_from_key
from infinistream.stream.schedules import PREFIX as SCHEDULE_HEADERS
from infinistream.stream.schedules import Checked, check_publish, next_of, scheduler_of
from infinistream.stream.sizes import stored_sizes
from infinistream.stream.ttl import InvalidTTL, message_ttl

MAX_HEADER_SIZE = 65535


class PublishHeaders(msgspec.Struct, frozen=True, gc=False):
    """What a message's headers ask of its stream, as nats-server reads each value.

    Bytes that are not UTF-8 compare as bytes (a message id or expected stream of any
    bytes); a number that is not one, or does not fit, is what nats-server's parseInt64 makes
    of it (a sequence no stream has). An empty value is no value, as in nats-server.
    """

    # Message ids as metadata keys and stream state hold them (`msg_id_text`).
    msg_id: str = ""
    expected_stream: bytes = b""
    expected_last_seq: int | None = None
    expected_subject_seq: int | None = None
    # Nats-Expected-Last-Subject-Sequence-Subject: a subject (or filter) as text.
    expected_subject: str = ""
    expected_last_msg_id: str = ""
    # Nats-Rollup, in lower case as nats-server compares it.
    rollup: str = ""
    # The TTL in seconds (NEVER: never), or whether its value is malformed.
    ttl: int = 0
    ttl_invalid: bool = False


NO_HEADERS = PublishHeaders()


def read_headers(hdr: bytes) -> PublishHeaders:
    """The publish headers of a message, read once and never failing: each malformed value
    keeps the meaning nats-server gives it (see PublishHeaders)."""
    ttl = 0
    ttl_invalid = False
    try:
        ttl = message_ttl(hdr)
    except InvalidTTL:
        ttl_invalid = True
    subject_seq = header_value(hdr, EXPECTED_LAST_SUBJECT_SEQ)
    return PublishHeaders(
        msg_id=msg_id_text(header_value(hdr, MSG_ID) or b""),
        expected_stream=header_value(hdr, EXPECTED_STREAM) or b"",
        expected_last_seq=_sequence(header_value(hdr, EXPECTED_LAST_SEQ)),
        expected_subject_seq=_sequence(subject_seq),
        expected_subject=go_text(header_value(hdr, EXPECTED_LAST_SUBJECT_SEQ_SUBJECT) or b""),
        expected_last_msg_id=msg_id_text(header_value(hdr, EXPECTED_LAST_MSG_ID) or b""),
        rollup=go_text(header_value(hdr, ROLLUP) or b"").lower(),
        ttl=ttl,
        ttl_invalid=ttl_invalid,
    )


# Marks a message id kept as hex: one that is not UTF-8, or holds the mark itself. Ids that
# are neither (every id a client library makes) are kept as they are.
_HEX_ID = "\ufffd"


def msg_id_text(raw: bytes) -> str:
    """A message id as text for metadata keys and stream state, one for one with its bytes:
    nats-server compares ids as bytes, so two ids that differ only in bytes that are not
    UTF-8 are two ids."""
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return _HEX_ID + raw.hex()
    return _HEX_ID + raw.hex() if _HEX_ID in text else text


def msg_id_shown(text: str) -> str:
    """A message id kept by `msg_id_text`, as nats-server's JSON shows its bytes."""
    if text.startswith(_HEX_ID):
        return go_text(bytes.fromhex(text[len(_HEX_ID) :]))
    return text


_INVALID_BYTES = {code: "\ufffd" for code in range(0xDC80, 0xDD00)}


def go_text(raw: bytes) -> str:
    """Bytes as Go shows them in text: each byte that is not part of UTF-8 becomes U+FFFD."""
    return raw.decode("utf-8", "surrogateescape").translate(_INVALID_BYTES)


def _sequence(raw: bytes | None) -> int | None:
    """A sequence header as nats-server reads it: None when absent or empty, else
    uint64(parseInt64(raw)): 2^64 - 1 for anything but digits, a huge number wrapped around
    (sequences no stream has)."""
    return header_int(raw) % 2**64 if raw else None


class Publish(msgspec.Struct, gc=False):
    """One message waiting in the write buffer for its batch to be written and committed.

    A batch holds tens of thousands of these for a few hundred milliseconds; as untracked
    structs (they hold no containers, so no cycles) they cost the garbage collector nothing.
    """

    subject: str
    headers: bytes | None
    data_len: int
    # Its encoded record length (what it takes in its object; stream.sizes says what it
    # counts for in the stream).
    size: int
    # Where its answer goes: text, or the client's bytes for a publish of a run of PUBs.
    reply: str | bytes | None
    # Set by the agent, never by a client: a delete marker, committed only while this
    # sequence is still its subject's last message (see stream.ttl).
    replaces: int = 0
    # An atomic batch's messages, contiguous in the batch and numbered from 1 (stream.batches).
    batch: str = ""
    batch_seq: int = 0
    # Set by the agent, never by a client: a message a schedule produced, committed only
    # while this schedule entry is still due (see stream.scheduler).
    fires: str = ""
    # Set by the agent for a counter increment: committed only while the subject's last
    # message is the one its value was computed from (see stream.counter_claim).
    counter: CounterClaim | None = None
    # The headers as read when the message joined the write buffer (`read_headers`).
    rules: PublishHeaders | None = None
    # Set by the agent for a mirror's copy: the origin's sequence and timestamp, which it
    # keeps (stream.mirror); committed only as the next sequence of the mirror.
    origin_seq: int = 0
    stamp: int = 0

    def read(self) -> PublishHeaders:
        """What the headers ask for: as read on admission, or (for a message made without
        them) read now."""
        if self.rules is None:
            self.rules = NO_HEADERS if self.headers is None else read_headers(self.headers)
        return self.rules

    def msg_id(self) -> str | None:
        return self.read().msg_id or None


class Outcome(msgspec.Struct, frozen=True, gc=False):
    """What became of one publish: its sequence, a duplicate's earlier sequence, or an error."""

    seq: int = 0
    duplicate: bool = False
    error: errors.ApiError | None = None
    # The commit of an atomic batch: its id and how many messages it stored.
    batch: str = ""
    count: int = 0


@dataclass
class StreamPlan:
    changes: Changes
    outcomes: list[Outcome]
    # New Nats-Msg-Id entries: id -> sequence.
    new_ids: dict[str, int] = field(default_factory=dict)
    last_msg_id: str = ""
    # Index in the batch of each message that was given a sequence, in sequence order.
    accepted: list[int] = field(default_factory=list)


def plan(
    cfg: StreamConfig,
    changes: Changes,
    publishes: list[Publish],
    last_msg_id: str,
    known_ids: dict[str, int],
    interested: Callable[[str], bool] | None = None,
    due: set[str] | None = None,
) -> StreamPlan:
    """Plan one stream's share of a batch; `known_ids` are msg ids already in the window,
    `due` the schedule entries still due of those that messages in the batch fire."""
    result = StreamPlan(changes=changes, outcomes=[], last_msg_id=last_msg_id)
    if cfg.sealed:
        err = errors.stream_sealed()
        result.outcomes = [Outcome(error=err) for _ in publishes]
    elif publishes and publishes[0].origin_seq:
        plan_mirrored(cfg, result, publishes)
    elif interested is None and is_plain(cfg, publishes):
        plan_plain(cfg, result, publishes)
    else:
        plan_each(cfg, result, publishes, known_ids, interested, due)
    return result


def batch_refusal(cfg: StreamConfig, headers: bytes, data: bytes) -> errors.ApiError | None:
    """nats-server's first checks of a message of a batch (atomic or fast), before its batch
    is looked at: the stream sealed, then the message's size."""
    if cfg.sealed:
        return errors.stream_sealed()
    max_size = cfg.max_msg_size
    if max_size >= 0 and (len(headers) > max_size or len(data) > max_size - len(headers)):
        return errors.stream_message_exceeds_maximum()
    return None


def is_plain(cfg: StreamConfig, publishes: list[Publish]) -> bool:
    """Whether every message is sure to be accepted, with only count and size limits to apply.

    That holds for messages without headers (no expected-* checks, dedupe or rollups) within
    max_msg_size, on a stream with no per-subject limit and no discard-new limit that could
    refuse one. Interest retention is the caller's to rule out.
    """
    if cfg.max_msgs_per_subject > 0:
        return False
    if cfg.discard == "new" and (cfg.max_msgs > 0 or cfg.max_bytes > 0):
        return False
    if any(pub.headers is not None for pub in publishes):
        return False
    max_size = cfg.max_msg_size
    return max_size < 0 or all(pub.data_len <= max_size for pub in publishes)


def plan_plain(cfg: StreamConfig, result: StreamPlan, publishes: list[Publish]) -> None:
    """Plan a batch that `is_plain`: the common case, in a few passes over the whole batch.

    Every message takes the next sequence, so the batch is appended at once and the limits
    enforced after it. That evicts the same messages as enforcing them after each append
    (what `plan_each` does): eviction takes the oldest first and the newest messages only
    add to the count and bytes, so the last append needs the furthest-forward head of all.
    """
    if not publishes:
        return
    changes = result.changes
    first = changes.append_many(
        [p.subject for p in publishes], stored_sizes(cfg.storage, publishes)
    )
    result.outcomes = list(map(Outcome, range(first, changes.last_seq + 1)))
    result.accepted = list(range(len(publishes)))
    result.last_msg_id = ""
    if cfg.discard != "new":
        evict_for_count_and_size(cfg, changes)


def plan_mirrored(cfg: StreamConfig, result: StreamPlan, publishes: list[Publish]) -> None:
    """Plan a mirror's copies: each takes the origin's sequence, which must be the next one
    (the gaps of what the origin deleted are skipped before, `Changes.skip_to`). A copy that
    is not is refused: another copier (or this one's earlier attempt) stored it already, so
    nothing is stored twice and the copier resumes from the mirror's last sequence. The
    origin checked its headers; the mirror stores what it stored."""
    changes = result.changes
    for i, pub in enumerate(publishes):
        if pub.origin_seq != changes.last_seq + 1:
            result.outcomes.append(Outcome(error=errors.stream_sequence_not_match()))
            continue
        (size,) = stored_sizes(cfg.storage, (pub,))
        result.outcomes.append(Outcome(changes.append(pub.subject, size)))
        result.accepted.append(i)
    if cfg.discard != "new":
        evict_for_count_and_size(cfg, changes)


def plan_each(
    cfg: StreamConfig,
    result: StreamPlan,
    publishes: list[Publish],
    known_ids: dict[str, int],
    interested: Callable[[str], bool] | None,
    due: set[str] | None = None,
) -> None:
    """Plan a batch message by message, every check in nats-server's order; an atomic
    batch's messages all together or not at all."""
    plan = _Planner(cfg, result, known_ids, interested, due or set())
    i = 0
    while i < len(publishes):
        pub = publishes[i]
        if pub.batch and pub.batch_seq == 1:
            j = i + 1
            while (
                j < len(publishes)
                and publishes[j].batch == pub.batch
                and publishes[j].batch_seq == publishes[j - 1].batch_seq + 1
            ):
                j += 1
            plan.atomic(publishes, i, j)
            i = j
        else:
            result.outcomes.append(plan.one(i, pub))
            i += 1


class _Planner:
    """Plans one message at a time into a StreamPlan (what plan_each loops over)."""

    def __init__(
        self,
        cfg: StreamConfig,
        result: StreamPlan,
        known_ids: dict[str, int],
        interested: Callable[[str], bool] | None,
        due: set[str],
    ) -> None:
        self.cfg = cfg
        self.due = due
        self.result = result
        self.changes = result.changes
        self.known_ids = known_ids
        self.interested = interested
        self.allow_rollup = cfg.allow_rollup_hdrs and not cfg.deny_purge
        # The sequence of each subject's last counter increment planned here.
        self.counted: dict[str, int] = {}

    def atomic(self, publishes: list[Publish], start: int, end: int) -> None:
        """An atomic batch: every message stored, or none (and each refused with the error the
        first refused one met); its commit, the last, is answered with the batch's size."""
        result, changes = self.result, self.changes
        point = changes.checkpoint()
        mark = (len(result.outcomes), len(result.accepted), dict(result.new_ids))
        last_msg_id = result.last_msg_id
        inflight: set[str] = set()
        ids: set[str] = set()
        for index in range(start, end):
            pub = publishes[index]
            error = self._batch_rules(pub, index == start, inflight, ids)
            outcome = Outcome(error=error) if error is not None else self.one(index, pub)
            if outcome.duplicate:
                error = errors.atomic_publish_contains_duplicate_message()
            elif outcome.error is not None:
                error = outcome.error
            if error is not None:
                changes.restore(point)
                del result.outcomes[mark[0] :]
                del result.accepted[mark[1] :]
                result.new_ids.clear()
                result.new_ids.update(mark[2])
                result.last_msg_id = last_msg_id
                result.outcomes += [Outcome(error=error)] * (end - start)
                return
            result.outcomes.append(outcome)
            inflight.add(pub.subject)
        commit = result.outcomes[-1]
        result.outcomes[-1] = Outcome(
            seq=commit.seq, batch=publishes[start].batch, count=end - start
        )

    def _stale_counter(self, subject: str, claim: CounterClaim) -> Outcome | None:
        """A refusal if the subject's last message is not the one the increment's value was
        computed from: another increment was stored first, and this one is computed again."""
        base = self.counted.get(subject) if claim.chained else claim.base
        if base is None or self.changes.last_for(subject) != base:
            return Outcome(error=errors.stream_wrong_last_sequence(base or 0))
        return None

    def _still_due(self, key: str) -> bool:
        """Whether a schedule's entry is still due and its message still its subject's last."""
        seq = seq_from_key(key)
        changes = self.changes
        if key not in self.due or not changes.is_live(seq):
            return False
        return changes.last_for(changes.subject_of(seq)) == seq

    def _schedules(self, pub: Publish, seq: int, scheduled: Checked | None, rollup: str) -> str:
        """What an accepted message does to schedules; the rollup it applies."""
        changes = self.changes
        purges = scheduled.purges if scheduled is not None else ""
        if pub.fires:
            # It fired this entry: the schedule is due next when the message says, or never.
            changes.forget(pub.fires)
            self.due.discard(pub.fires)
            hdr = pub.headers or b""
            nxt = next_of(hdr)
            if nxt is not None:
                changes.reschedule(seq_from_key(pub.fires), nxt)
            else:
                purges = scheduler_of(hdr)
        if scheduled is not None and scheduled.schedule is not None:
            changes.set_schedule(seq, scheduled.schedule)
            # Stored with `Nats-Rollup: sub` (in an atomic batch, as if it were).
            rollup = "sub"
        if purges:
            for old in changes.live_of_subject(purges):
                changes.kill(old)
        return rollup

    def _batch_rules(
        self, pub: Publish, first: bool, inflight: set[str], ids: set[str]
    ) -> errors.ApiError | None:
        """What a batch's messages may not do (nats-server's checkMsgHeadersPreClusteredProposal):
        expect anything of what the batch itself changes, or repeat a message id."""
        if pub.headers is None:
            return None
        rules = pub.read()
        if rules.expected_last_msg_id:
            return errors.atomic_publish_unsupported_header_batch(EXPECTED_LAST_MSG_ID.decode())
        msg_id = rules.msg_id
        if msg_id:
            if msg_id in ids or msg_id in self.known_ids or msg_id in self.result.new_ids:
                return errors.atomic_publish_contains_duplicate_message()
            ids.add(msg_id)
        if rules.expected_last_seq is not None and not first:
            if rules.expected_last_seq != self.changes.last_seq:
                return errors.stream_wrong_last_sequence(self.changes.last_seq)
            # Only the first message of a batch may expect a last sequence.
            return errors.stream_wrong_last_sequence_constant()
        subject = rules.expected_subject or pub.subject
        if rules.expected_subject_seq is not None and subject in inflight:
            return errors.stream_wrong_last_sequence_constant()
        rollup = rules.rollup
        if rollup:
            if not self.allow_rollup:
                return errors.stream_rollup_failed("rollup not permitted")
            if rollup == "sub" and pub.subject in inflight:
                return errors.stream_rollup_failed("batch rollup sub invalid")
            if rollup == "all" and not first:
                return errors.stream_rollup_failed("batch rollup all invalid")
        return None

    def one(self, index: int, pub: Publish) -> Outcome:
        """Plan one message: its outcome; if accepted, it is appended to the changes."""
        cfg, result, changes = self.cfg, self.result, self.changes
        subject = pub.subject
        hdr = pub.headers
        msg_id = ""
        rollup = ""
        scheduled = None
        fires = pub.fires
        if pub.replaces and changes.last_for(subject) != pub.replaces:
            # Another agent placed the marker first, or the subject has a newer message.
            return Outcome(error=errors.stream_wrong_last_sequence(pub.replaces))
        if fires and not self._still_due(fires):
            # Another agent fired it first, or the schedule was replaced or stopped.
            return Outcome(error=errors.stream_wrong_last_sequence(seq_from_key(fires)))
        claim = pub.counter
        if claim is not None and (stale := self._stale_counter(subject, claim)) is not None:
            return stale
        # Whether a stream without TTLs refuses a TTL is among the first checks, whether its
        # value is valid among the last (nats-server's order).
        rules = pub.read()
        ttl = rules.ttl
        if hdr is not None:
            error, msg_id, rollup, dup_seq, scheduled = _check_headers(
                cfg,
                changes,
                pub,
                hdr,
                result.last_msg_id,
                self.known_ids,
                result.new_ids,
            )
            if dup_seq:
                return Outcome(seq=dup_seq, duplicate=True)
            if error is not None:
                return Outcome(error=error)
            if rollup and not self.allow_rollup:
                return Outcome(error=errors.stream_rollup_failed("rollup not permitted"))
            if rollup and rollup not in ("sub", "all"):
                return Outcome(
                    error=errors.stream_rollup_failed(f'rollup value invalid: "{rollup}"')
                )
            if len(hdr) > MAX_HEADER_SIZE:
                return Outcome(error=errors.stream_header_exceeds_maximum())
        hdr_len = len(hdr) if hdr is not None else 0
        max_size = cfg.max_msg_size
        if max_size >= 0 and (hdr_len > max_size or pub.data_len > max_size - hdr_len):
            return Outcome(error=errors.stream_message_exceeds_maximum())
        if rules.ttl_invalid:
            return Outcome(error=errors.message_ttl_invalid())

        max_per = cfg.max_msgs_per_subject
        discard_new = cfg.discard == "new"
        at_subject_limit = max_per > 0 and changes.live_count(subject) >= max_per
        (size,) = stored_sizes(cfg.storage, (pub,))
        if discard_new:
            limit_error = _discard_new_error(cfg, changes, pub, size, at_subject_limit, rollup)
            if limit_error is not None:
                return Outcome(error=errors.stream_store_failed(limit_error))

        seq = changes.append(subject, size)
        result.accepted.append(index)
        if claim is not None:
            self.counted[subject] = seq
        if ttl:
            changes.set_ttl(seq, ttl)
        if msg_id:
            result.new_ids[msg_id] = seq
            result.last_msg_id = msg_id
        else:
            result.last_msg_id = ""
        if scheduled is not None or fires:
            rollup = self._schedules(pub, seq, scheduled, rollup)

        if self.interested is not None and not self.interested(subject):
            # Interest retention keeps nothing no consumer wants: the sequence is used up and
            # the message is gone at once, as nats-server's SkipMsgNoInterest does.
            changes.kill(seq)
            return Outcome(seq=seq)
        if rollup == "sub":
            for old in _rolled_up(changes, subject):
                if old != seq:
                    changes.kill(old)
        elif rollup == "all":
            changes.kill_below(seq)
        # Limits with discard old evict the oldest messages; discard new already refused.
        # The per-subject limit evicts under either policy; the count and size limits only
        # under discard old (nats-server's enforceMsgLimit / enforceBytesLimit return early
        # for discard new, which matters when an update left the stream above them).
        if max_per > 0:
            trim_subject(changes, subject, max_per)
        if not discard_new:
            evict_for_count_and_size(cfg, changes)
        return Outcome(seq=seq)


def _rolled_up(changes: Changes, subject: str) -> list[int]:
    """What `Nats-Rollup: sub` on `subject` removes (but the new message): nats-server purges
    with the subject as the filter, so a subject with wildcards rolls up every subject it
    matches."""
    if is_literal(subject):
        return changes.live_of_subject(subject)
    subjects = set(changes.view.subjects_matching(subject))
    subjects.update(s for s in set(changes.subjects) if matches(subject, s))
    return [old for name in sorted(subjects) for old in changes.live_of_subject(name)]


def _discard_new_error(
    cfg: StreamConfig,
    changes: Changes,
    pub: Publish,
    size: int,
    at_subject_limit: bool,
    rollup: str,
) -> str | None:
    if at_subject_limit and cfg.discard_new_per_subject and not rollup:
        return "maximum messages per subject exceeded"
    if cfg.max_msgs > 0 and changes.msgs >= cfg.max_msgs and not at_subject_limit:
        return "maximum messages exceeded"
    if cfg.max_bytes > 0 and changes.bytes + size > cfg.max_bytes:
        if not at_subject_limit:
            return "maximum bytes exceeded"
        oldest = changes.oldest_for(pub.subject)
        if not oldest or changes.size_of(oldest) < size:
            return "maximum bytes exceeded"
    return None


def _check_headers(
    cfg: StreamConfig,
    changes: Changes,
    pub: Publish,
    hdr: bytes,
    last_msg_id: str,
    known_ids: dict[str, int],
    new_ids: dict[str, int],
) -> tuple[errors.ApiError | None, str, str, int, Checked | None]:
    """(error, msg id, rollup, duplicate's sequence, schedule headers) from a message's
    headers, checked in nats-server's order."""
    rules = pub.read()
    if rules.expected_stream and rules.expected_stream != cfg.name.encode():
        return errors.stream_not_match(), "", "", 0, None
    if not cfg.allow_msg_ttl and rules.ttl != 0:
        return errors.message_ttl_disabled(), "", "", 0, None
    if rules.expected_subject_seq is not None:
        # The override may be a wildcard: nats-server then takes the last of any match.
        last = changes.last_matching(rules.expected_subject or pub.subject)
        if rules.expected_subject_seq != last:
            return errors.stream_wrong_last_sequence(last), "", "", 0, None
    elif rules.expected_subject:
        return errors.stream_expected_last_seq_per_subject_invalid(), "", "", 0, None
    expected_last = rules.expected_last_seq
    if expected_last is not None and expected_last != changes.last_seq:
        return errors.stream_wrong_last_sequence(changes.last_seq), "", "", 0, None
    scheduled = None
    # What a schedule produced was checked as its schedule was.
    if SCHEDULE_HEADERS in hdr and not pub.fires:
        try:
            scheduled = check_publish(cfg, pub.subject, hdr)
        except errors.ApiError as exc:
            return exc, "", "", 0, None
    msg_id = rules.msg_id
    if msg_id:
        dup = new_ids.get(msg_id) or known_ids.get(msg_id)
        if dup:
            return None, msg_id, "", dup, None
    expected_id = rules.expected_last_msg_id
    if expected_id and expected_id != last_msg_id:
        shown = msg_id_shown(last_msg_id)
        return errors.stream_wrong_last_msg_id(shown), msg_id, "", 0, None
    return None, msg_id, rules.rollup, 0, scheduled
