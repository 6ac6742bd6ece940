"""Republishing committed messages to this agent's own subscribers.

A client subscribes on the one agent it is connected to, and a message may be committed by
any agent of the pool. So every agent follows the committed sequences of the streams with
`republish` and republishes each new message to its own local subscribers, once: a
subscriber anywhere gets each message once, from its own agent, and no agent has to know
where the others' subscribers are. Following costs what consumers already pay: the metadata
watch on the group (woken within milliseconds of another agent's commit; at once by this
agent's own commits) and the stream's view, which gives each new sequence's subject without
reading it. A message is read only when a local subscriber wants its republished subject.

Each agent keeps, per stream, the next sequence to republish, in memory only. It is advanced
before the message is sent: a message is republished at most once per agent (ADR-28's
at-most-once). When an agent first finds a stream with republish, it starts at the first
message committed since the latest of: its own start, the stream's creation, the stream's
last update (which may be what turned republish on). A restarted agent republishes nothing
from before its restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import KW_ONLY, InitVar, dataclass, field
from functools import partial
from itertools import islice

from infinistream.metadata.kv import ChangeWatch
from infinistream.stream.catalog import Catalog, StreamEntry
from infinistream.stream.damage import DamagedMessage
from infinistream.stream.reader import MessageReader
from infinistream.stream.republish import RepublishRule, republish_rule, republished_headers
from infinistream.stream.view import StreamView, seq_from_time
from infinistream.stream.watching import other_commits

log = logging.getLogger(__name__)

# How long to wait on the metadata watch before looking anyway, and how often to look for
# streams with republish when there are none.
WATCH_SECONDS = 1.0
IDLE_SECONDS = 0.25
# Subjects whose last sequence a cursor remembers (the least recently seen go first).
LAST_OF_MAX = 4096

# Deliver (subject, headers, payload) to this agent's subscribers, as a publish is delivered.
Deliver = Callable[[str, bytes, bytes], None]
# Whether any subscriber here wants a subject.
Interest = Callable[[str], bool]


@dataclass
class _Cursor:
    uid: str
    # The config the rule was compiled from (the stream record's revision).
    revision: int
    rule: RepublishRule | None
    next_seq: int
    # The last sequence of each subject seen go by (see previous_of_subject), a bounded few.
    last_of: dict[str, int] = field(default_factory=dict)


def previous_of_subject(
    view: StreamView, subject: str, seq: int, max_per_subject: int, seen: int = 0
) -> int:
    """The subject's last message when `seq` was stored (Nats-Last-Sequence); 0 if none.

    nats-server reads it as it stores the message. Here it is read later, from the view: the
    message before it is taken even if gone since, when the per-subject limit explains its
    going (`seq` and the later ones pushed it out: a KV bucket's history); otherwise a gone
    one was deleted before, and the one before it counts. `seen` is the subject's message
    before `seq` that the caller saw go by, for one below what the view still holds (a
    bucket's previous revision, gone with the stream's head).
    """
    pushed = max_per_subject > 0 and _at_least(
        view.subject_seqs_from(subject, seq), max_per_subject
    )
    for s in view.subject_seqs_back(subject, seq - 1, dead=True):
        if pushed or view.is_live(s):
            return s
    return seen if pushed and seen < seq else 0


def _at_least(seqs: Iterator[int], n: int) -> bool:
    return sum(1 for _ in islice(seqs, n)) >= n


@dataclass
class _Pass:
    """What one pass over a stream republishes: (sequence, subject, destination, last
    sequence) of each wanted message, where the next pass starts, and the last sequence of
    each subject it went by."""

    wanted: list[tuple[int, str, str, int]]
    next_seq: int
    seen: dict[str, int]


def _pass(
    view: StreamView,
    rule: RepublishRule,
    interest: Interest,
    cursor: _Cursor,
    max_per_subject: int,
) -> _Pass:
    wanted: list[tuple[int, str, str, int]] = []
    seen: dict[str, int] = {}
    for seq in view.live_seqs(cursor.next_seq):
        subject = view.subject_of(seq)
        dest = rule.destination(subject)
        if dest is not None and interest(dest):
            before = seen.get(subject) or cursor.last_of.get(subject, 0)
            last = previous_of_subject(view, subject, seq, max_per_subject, before)
            wanted.append((seq, subject, dest, last))
        seen[subject] = seq
    return _Pass(wanted, view.last_seq + 1, seen)


def _remember(cursor: _Cursor, seen: dict[str, int]) -> None:
    last_of = cursor.last_of
    for subject, seq in seen.items():
        last_of.pop(subject, None)
        last_of[subject] = seq
    while len(last_of) > LAST_OF_MAX:
        del last_of[next(iter(last_of))]


def _republishes(entry: StreamEntry) -> bool:
    return entry.config.republish is not None


@dataclass(eq=False)
class Republisher:
    catalog: Catalog
    reader: MessageReader
    deliver: Deliver
    interest: Interest
    changes: ChangeWatch
    _: KW_ONLY
    clock: InitVar[Callable[[], int]] = time.time_ns
    started_ns: int = field(init=False)
    _cursors: dict[str, _Cursor] = field(init=False, default_factory=dict)
    _woken: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    # Messages republished here, for monitoring and tests.
    republished: int = field(init=False, default=0)

    def __post_init__(self, clock: Callable[[], int]) -> None:
        self.started_ns = clock()

    def committed(self, streams: list[str]) -> None:
        """This agent committed to `streams`: look now rather than on the watch."""
        if any(stream in self._cursors for stream in streams):
            self._woken.set()

    async def run(self) -> None:
        watching = asyncio.get_running_loop().create_task(self._follow_watch())
        try:
            while True:
                if not self.catalog.selected("republish", _republishes):
                    self._cursors.clear()
                    await asyncio.sleep(IDLE_SECONDS)
                    continue
                try:
                    await self.republish_once()
                except Exception:
                    log.exception("republishing committed messages")
                await self._woken.wait()
                self._woken.clear()
        finally:
            watching.cancel()

    async def _follow_watch(self) -> None:
        while True:
            if not self._cursors:
                await asyncio.sleep(IDLE_SECONDS)
                continue
            await other_commits(self.changes, WATCH_SECONDS, retry_after=WATCH_SECONDS, log=log)
            self._woken.set()

    async def republish_once(self) -> None:
        """Republish what was committed since the last pass, stream by stream."""
        entries = self.catalog.selected("republish", _republishes)
        for name in [n for n in self._cursors if n not in {e.name for e in entries}]:
            del self._cursors[name]
        for entry in entries:
            view = await self.catalog.view(entry.name)
            if view is None:
                continue
            cursor = await self._cursor(entry, view)
            if cursor.rule is None:
                cursor.next_seq = max(cursor.next_seq, view.last_seq + 1)
            else:
                await self._republish_stream(entry, cursor, cursor.rule, view)

    async def _cursor(self, entry: StreamEntry, view: StreamView) -> _Cursor:
        cursor = self._cursors.get(entry.name)
        if cursor is None or cursor.uid != entry.uid:
            # Messages committed since republish was on here: since this agent started, the
            # stream was created, or an update (which may have turned republish on).
            since = max(self.started_ns, entry.created_ns, entry.updated_ns)
            start = await self.catalog.answer(lambda: seq_from_time(view, since))
            cursor = _Cursor(entry.uid, -1, None, start)
            self._cursors[entry.name] = cursor
        if cursor.revision != entry.revision:
            cursor.revision = entry.revision
            cursor.rule = republish_rule(entry.config)
        return cursor

    async def _republish_stream(
        self, entry: StreamEntry, cursor: _Cursor, rule: RepublishRule, view: StreamView
    ) -> None:
        stream = entry.name
        # Worked out before the first read, in one go once what it needs of the index is
        # read: the view is shared, and may be brought further while a read waits (what it
        # gains then is for the next pass).
        max_per = entry.config.max_msgs_per_subject
        done = await self.catalog.answer(lambda: _pass(view, rule, self.interest, cursor, max_per))
        cursor.next_seq = max(cursor.next_seq, done.next_seq)
        _remember(cursor, done.seen)
        for seq, subject, dest, last_seq in done.wanted:
            try:
                msg = await self.catalog.answer_async(partial(self.reader.read_message, view, seq))
            except DamagedMessage:
                log.warning("stream %s: message %d is damaged, not republished", stream, seq)
                continue
            if msg is None:
                continue
            headers = republished_headers(
                msg.headers,
                stream=stream,
                subject=subject,
                seq=seq,
                ts=msg.ts,
                last_seq=last_seq,
                msg_size=len(msg.data) if rule.headers_only else None,
            )
            self.deliver(dest, headers, b"" if rule.headers_only else msg.data)
            self.republished += 1
