"""Acks from clients: parsed from `$JS.ACK.*` subjects, committed in batches.

Acks for one consumer queue up while a commit is in flight and go together in the next one, so
a client acking thousands of messages costs a handful of metadata transactions, not one per
message. An ack that carries a reply subject (nats-py's ack_sync) is answered only after its
commit, so a client that saw the answer knows the ack survives any agent's death.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from functools import lru_cache
from itertools import groupby
from operator import attrgetter
from typing import ClassVar

import msgspec

from infinistream import natsconf
from infinistream.consumer.clock import SYSTEM_CLOCK, Clock
from infinistream.consumer.progress import (
    ACK,
    NAK,
    NEXT,
    PROGRESS,
    TERM,
    Ack,
    PlainAcks,
    apply_ack_run,
)
from infinistream.consumer.store import ConsumerGone, ConsumerStore, LoadedConsumer
from infinistream.protocol import decode_json

log = logging.getLogger(__name__)


class AckMessage(Ack, gc=False):
    """An ack as a client sent it: the `Ack`, whose consumer it is for, and how to answer."""

    stream: str = ""
    consumer: str = ""
    reply: str | None = None
    body: bytes = b""
    # Answers the reply as nats-server does when nothing serves an ack subject.
    unserved: Callable[[str], None] | None = None

    def refuse(self) -> None:
        if self.reply is not None and self.unserved is not None:
            self.unserved(self.reply)
        self.reply = None


def parse_ack(subject: str, body: bytes) -> AckMessage | None:
    """An ack from its subject and body; None for anything nats-server would ignore."""
    tokens = subject.split(".")
    n = len(tokens)
    if n == 9:
        stream, consumer, d, s, c = tokens[2], tokens[3], tokens[4], tokens[5], tokens[6]
    elif n >= 12:
        # The v2 form adds domain and account hash before the stream, and a token after.
        stream, consumer, d, s, c = tokens[4], tokens[5], tokens[6], tokens[7], tokens[8]
    else:
        return None
    # One check for all three numbers; ASCII only, as nats-server's parseAckReplyNum.
    digits = d + s + c
    if not (digits.isdigit() and digits.isascii() and d and s and c):
        return None
    kind, delay = _parse_body(body)
    if kind is None:
        return None
    # The consumer sequence matters to ack policy all, whose floor nats-server sets from it.
    if len(digits) > 57:  # some number longer than uint64's 20 digits
        return AckMessage(
            kind, _uint64(s), _uint64(d), delay, _uint64(c), stream, consumer, None, body
        )
    return AckMessage(kind, int(s), int(d), delay, int(c), stream, consumer, None, body)


def _uint64(digits: str) -> int:
    """A number as nats-server's parseAckReplyNum reads it, wrapping past 64 bits; linear in
    any length (int() refuses past 4,300 digits)."""
    n = 0
    for at in range(0, len(digits), 18):
        chunk = digits[at : at + 18]
        n = (n * 10 ** len(chunk) + int(chunk)) % (1 << 64)
    return n


class PlainAckRun(PlainAcks, gc=False):
    """Plain acks with no reply for one consumer, as columns (`PlainAcks`): each as
    `parse_ack` reads it, its delivery count aside."""

    stream: str = ""
    consumer: str = ""
    # None of them awaits an answer; there is nothing to refuse.
    reply: ClassVar[None] = None

    def refuse(self) -> None:
        pass


# The acks queued for a consumer, in the order they came.
Queued = AckMessage | PlainAckRun

# What follows a consumer's `$JS.ACK.<stream>.<consumer>.` in the usual ack subject:
# `<delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>`, its numbers short enough to
# fit uint64 (longer ones are parse_ack's), the stream and consumer sequences kept as one group.
# (Possessive: nothing a quantifier took could be given back to a match, and not offering it
# spares the matcher its bookkeeping.)
_PLAIN_TAIL = r"[0-9]{1,19}+\.([0-9]{1,19}+\.[0-9]{1,19}+)\.[^.\n]*+\.[^.\n]*+"
# The same with a timestamp and a pending count of digits, as every client's acks carry them
# (what nats-server wrote): tried first, as a class of digits is matched in half the time of
# "anything but a dot or a line break".
_NUMBERED_TAIL = r"[0-9]{1,19}+\.([0-9]{1,19}+\.[0-9]{1,19}+)\.[0-9]*+\.[0-9]*+"
# The numbers of a run as a JSON array: read in C, where `int` is a call per number.
_decode_numbers = msgspec.json.Decoder(list[int]).decode


@lru_cache(maxsize=256)
def _run_patterns(prefix: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Patterns of one consumer's ack subject (`prefix` its `$JS.ACK.<stream>.<consumer>.`)
    as a whole line, numbered first: each match is one subject's sequences."""
    return (
        re.compile(rf"(?m)^{re.escape(prefix)}{_NUMBERED_TAIL}$"),
        re.compile(rf"(?m)^{re.escape(prefix)}{_PLAIN_TAIL}$"),
    )


def parse_plain_acks(subjects: list[str]) -> list[Queued]:
    """Plain acks (an empty or `+ACK` body) from their subjects, as `parse_ack` of each.

    A consumer's acks arrive by the hundred, all for one consumer: its subject prefix is cut
    from them all at once, one pattern match checks what is left, and their numbers are read
    a column at a time into one `PlainAckRun`. Only a run with some other form is parsed
    subject by subject.
    """
    run = _one_consumer_run(subjects)
    if run is not None:
        return [run] if run.stream_seqs else []
    return [msg for subject in subjects if (msg := parse_ack(subject, b"")) is not None]


def _one_consumer_run(subjects: list[str]) -> PlainAckRun | None:
    """The acks of `subjects` when every one is the usual form for the first one's consumer;
    None otherwise."""
    if not subjects:
        return PlainAckRun([], [])
    first = subjects[0]
    head = first.split(".", 4)
    if len(head) != 5 or head[0] != "$JS" or head[1] != "ACK":
        return None
    joined = "\n".join(subjects)
    if joined.count("\n") != len(subjects) - 1:
        return None  # a subject held a line break
    # Each match is a whole line: as many matches as subjects, and every one is of the form.
    numbered, plain = _run_patterns(first[: len(first) - len(head[4])])
    pairs = numbered.findall(joined)
    if len(pairs) != len(subjects):
        pairs = plain.findall(joined)
        if len(pairs) != len(subjects):
            return None
    # "<stream seq>.<consumer seq>" of each, as one array of numbers.
    flat = ",".join(pairs).replace(".", ",")
    try:
        numbers = _decode_numbers(f"[{flat}]")
    except msgspec.DecodeError:
        numbers = list(map(int, flat.split(",")))  # a leading zero, which JSON refuses
    return PlainAckRun(numbers[0::2], numbers[1::2], head[2], head[3])


_PLAIN_ACKS = (b"", b"+ACK", b"+OK")


def _parse_body(body: bytes) -> tuple[str | None, int | None]:
    if body in _PLAIN_ACKS:
        return ACK, None
    text = body.strip()
    if text in _PLAIN_ACKS:
        return ACK, None
    if text.startswith(b"-NAK"):
        return NAK, _nak_delay(text[4:].strip())
    if text.startswith(b"+WPI"):
        return PROGRESS, None
    if text.startswith(b"+TERM"):
        return TERM, None
    if text.startswith(b"+NXT"):
        return NEXT, None
    return None, None


class _Delay(msgspec.Struct):
    delay: int = 0


def _nak_delay(raw: bytes) -> int | None:
    if not raw:
        return None
    if raw.startswith(b"{"):
        try:
            return decode_json(raw, type=_Delay).delay or None
        except msgspec.DecodeError:
            return None
    try:
        return natsconf.duration_ns(raw.decode())
    except ValueError:
        return None


# Called after a commit with the acks that went into it.
Committed = Callable[[LoadedConsumer, list[Queued]], Awaitable[None]]
# Offered a consumer's new acks: True if a delivery loop serving it will commit them with its next
# claim (and has been woken to), False to commit them on their own.
LoopTakes = Callable[[str, str], bool]


_consumer_of = attrgetter("stream", "consumer")

# How long acks that nobody waits on may wait for a pull request's claim to commit them.
ACK_LINGER_SECONDS = 0.01
# Consumers whose acks are committed at once, each by its own task: acks to many consumers
# (made-up ones included, each looked up and refused) take turns rather than holding a task,
# a metadata read and their memory each at the same time.
MAX_DRAINS = 32


@dataclass(eq=False)
class AckBatcher:
    """Acks queued per consumer, committed by whoever writes that consumer's state next.

    While requests wait on this agent, the consumer's delivery loop takes the queued acks into
    its next claim, so a fetch-and-ack cycle costs one metadata commit, not two racing ones.
    Otherwise a drain task commits them alone; acks that no client waits on and that free no
    messages (a limits-retention stream) first linger a few milliseconds for the claim of the
    request that usually follows them. Whoever commits holds the consumer's lock in
    `ConsumerStore`, so this agent never conflicts with itself. Answers built from a
    consumer's state first commit what is queued for it (`commit_queued`).
    """

    store: ConsumerStore
    _: KW_ONLY
    committed: Committed
    loop_takes: LoopTakes
    # Whether acks for a stream's consumers may linger (no retention waits on them).
    may_linger: Callable[[str], bool]
    clock: Clock = SYSTEM_CLOCK
    _queues: dict[tuple[str, str], list[Queued]] = field(default_factory=dict, init=False)
    _tasks: dict[tuple[str, str], asyncio.Task[None]] = field(default_factory=dict, init=False)
    _hurry: dict[tuple[str, str], asyncio.Event] = field(default_factory=dict, init=False)
    # Consumers whose acks were queued with no delivery loop to take them, to look at again.
    _unsure: list[tuple[str, str]] = field(default_factory=list, init=False)
    # Consumers whose acks wait for a drain to free up (MAX_DRAINS), oldest first.
    _turns: OrderedDict[tuple[str, str], None] = field(default_factory=OrderedDict, init=False)

    def add(self, msg: AckMessage) -> None:
        key = (msg.stream, msg.consumer)
        self._queue(key, [msg])
        if msg.reply is not None and (hurry := self._hurry.get(key)) is not None:
            hurry.set()  # a client waits: no more lingering

    def add_many(self, msgs: list[Queued]) -> None:
        """`add` each of `msgs`, none of which has a reply; a run for one consumer at once."""
        for key, run in groupby(msgs, _consumer_of):
            self._queue(key, list(run))

    def _queue(self, key: tuple[str, str], msgs: list[Queued]) -> None:
        queue = self._queues.get(key)
        if queue is None:
            self._queues[key] = msgs
            if not self.loop_takes(*key):
                self._look_again(key)
            return
        # Whoever was told of the first ones takes these too. Runs of plain acks that follow
        # one another become one (a client's acks come a few per read): the ack rule applies
        # it from the floor at once.
        last = queue[-1] if queue else None
        if isinstance(last, PlainAckRun) and msgs and isinstance(msgs[0], PlainAckRun):
            last.stream_seqs += msgs[0].stream_seqs
            last.consumer_seqs += msgs[0].consumer_seqs
            msgs = msgs[1:]
        queue += msgs

    def _look_again(self, key: tuple[str, str]) -> None:
        """Flush `key` unless a delivery loop takes its acks after the next step of the tasks
        ready now.

        A client's acks and its next pull request usually arrive in one read, the request's
        task started right after them: two turns of the event loop see that task's first step
        (which queues the request, so its loop takes the acks) without starting a drain task
        per round for nothing. One look for all the consumers acked meanwhile, so that acks to
        many consumers at once keep one entry each, not two callbacks.
        """
        self._unsure.append(key)
        if len(self._unsure) == 1:
            loop = asyncio.get_running_loop()
            loop.call_soon(loop.call_soon, self._unless_taken)

    def _unless_taken(self) -> None:
        keys, self._unsure = self._unsure, []
        for key in keys:
            if self._queues.get(key) and not self.loop_takes(*key):
                self.flush(key)

    def flush(self, key: tuple[str, str]) -> None:
        """Commit what is queued for `key` on its own (no delivery loop will take it): at
        once when fewer than MAX_DRAINS consumers are being committed, else in turn."""
        if not self._queues.get(key):
            return
        task = self._tasks.get(key)
        if task is not None and not task.done():
            return
        if len(self._tasks) >= MAX_DRAINS:
            self._turns[key] = None
            return
        self._tasks[key] = asyncio.get_running_loop().create_task(self._drain(key))

    def _next_turn(self) -> None:
        while self._turns and len(self._tasks) < MAX_DRAINS:
            key, _ = self._turns.popitem(last=False)
            self.flush(key)

    def take(self, key: tuple[str, str]) -> list[Queued]:
        """The acks queued for `key`, now the caller's to commit and then `settle`."""
        return self._queues.pop(key, [])

    async def _drain(self, key: tuple[str, str]) -> None:
        try:
            await self._drain_queue(key)
        finally:
            # Nothing is kept for a consumer once its acks are committed or refused: acks to
            # any number of made-up consumers leave nothing behind.
            if self._tasks.get(key) is asyncio.current_task():
                del self._tasks[key]
            self._next_turn()

    async def _drain_queue(self, key: tuple[str, str]) -> None:
        # A client's acks and its next pull request usually arrive in one read: let that
        # request's task (started after this one) queue it first, so its claim takes them.
        await asyncio.sleep(0)
        if not self._queues.get(key) or self.loop_takes(*key):
            return  # a request's loop took them, or will: nothing to linger for
        # Not while other consumers' acks wait for a drain: a lingering one would hold theirs
        # up (acks to many consumers at once, made-up ones among them, went 32 per 10 ms).
        lingers = not self._turns and self.may_linger(key[0])
        if lingers and not needs_durable(self._queues.get(key, [])):
            hurry = self._hurry[key] = asyncio.Event()
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(hurry.wait(), ACK_LINGER_SECONDS)
            finally:
                del self._hurry[key]
        while self._queues.get(key):
            if self.loop_takes(*key):
                # A request arrived since (typically right behind the acks): its claim takes
                # them, and the loop hands back what it leaves when it stops.
                return
            try:
                await self.commit_queued(*key)
            except Exception:
                log.exception("committing acks for %s > %s", *key)

    async def commit_queued(self, stream: str, name: str) -> None:
        """Commit what is queued for a consumer now, so that what is read next reflects it
        (as nats-server has processed a connection's acks before its next request)."""
        key = (stream, name)
        if not self._queues.get(key):
            return
        async with self.store.lock(*key):
            batch = self.take(key)
            if not batch:
                return
            try:
                await self._commit(key, batch)
            except ConsumerGone:
                refuse(batch)

    async def _commit(self, key: tuple[str, str], batch: list[Queued]) -> None:
        now = self.clock.wall_ns()

        def change(loaded: LoadedConsumer) -> bool:
            return apply_acks(loaded, batch, now)

        changed = await self.store.change_state(
            key[0], key[1], change, durable=needs_durable(batch), writes=bool
        )
        await self.settle(changed.loaded, batch)

    async def settle(self, loaded: LoadedConsumer, batch: list[Queued]) -> None:
        """After `batch` was committed (or changed nothing) in `loaded`: answer and tell."""
        if not batch:
            return
        if loaded.record.config.ack_policy == "none":
            # nats-server does not listen for acks of an ack-none consumer.
            refuse(batch)
            return
        if needs_durable(batch):  # only an ack that awaits an answer has one to lose
            for msg in batch:
                if (
                    isinstance(msg, AckMessage)
                    and msg.kind != NEXT
                    and msg.stream_seq > loaded.state.stream_seq
                ):
                    # nats-server (processAckMsg) ignores an ack past what it delivered and
                    # does not answer it.
                    msg.reply = None
        await self.committed(loaded, batch)

    async def drain(self) -> None:
        for key in list(self._queues):
            self.flush(key)
        while self._tasks or self._turns:
            self._next_turn()
            tasks = [t for t in self._tasks.values() if not t.done()]
            if not tasks:
                break
            await asyncio.gather(*tasks, return_exceptions=True)


def apply_acks(loaded: LoadedConsumer, batch: list[Queued], now: int) -> bool:
    """Apply `batch` to `loaded.state`; True if anything changed."""
    cfg = loaded.record.config
    if cfg.ack_policy == "none" or not batch:
        return False
    state = loaded.state
    changed = apply_ack_run(state, cfg, batch, now)
    if changed:
        state.last_active_ns = now
    return changed


def needs_durable(batch: list[Queued]) -> bool:
    """Whether committing `batch` must reach the disk before it returns: when some ack awaits
    an answer (ack_sync). Acks nobody waits on are no worse off than in nats-server, which
    writes them behind; a later durable commit takes them along."""
    replies = list(map(_reply_of, batch))
    return replies.count(None) != len(replies)


_reply_of = attrgetter("reply")


def refuse(batch: list[Queued]) -> None:
    for msg in batch:
        msg.refuse()
