"""The agent's write buffer: publishes from every connection and stream, one object per flush.

A batch becomes one object with a section per stream. Its life: PUT the object (durable,
write-once), commit sequences in one metadata transaction, and only then answer each
publisher (invariant 1). Commits happen strictly in batch order, so one connection's messages
to one stream keep their order (invariant 2).

When a batch goes is a group commit within a PUT budget: with no object being written, the
batch is flushed as soon as the budget has a PUT to spend (at once on an idle agent, after the
publishes that arrived in the same loop iteration); while an object is being written the next
batch grows, and goes as soon as that object is stored, so that its PUT overlaps the commit of
the one before (commits still land in batch order). A batch that reaches `batch_bytes` goes at
once, whatever the budget. Under load, batches grow by themselves to what arrives during one
PUT.

The sections of streams with compression (`codec_of`, asked once per stream per flush) are
compressed as the object is built; a batch with a large compressed section is built on a
worker thread (the codec releases the GIL) so that the loop goes on serving connections.
With encryption at rest (`encryption`), every section is also sealed (after compression)
under a data key new for each object (storage.crypto), and so built off the loop when large.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from infinistream.jetstream import errors
from infinistream.jetstream.api import encode as encode_json
from infinistream.storage import (
    CODEC_NONE,
    CODEC_SEALED,
    Encryption,
    ObjectBuilder,
    ObjectStore,
    SectionCache,
    encode_record,
    encode_records,
)
from infinistream.storage.corehold import CoreHold
from infinistream.storage.crypto import Sealer
from infinistream.storage.layout import l0_key
from infinistream.storage.packwriter import Staged
from infinistream.storage.segment import RECORD_HEADER_SIZE
from infinistream.stream.committer import Committer, SectionWrite, directory_of
from infinistream.stream.counter_claim import CounterClaim
from infinistream.stream.distribution import (
    COUNT_BOUNDS,
    LATENCY_BOUNDS,
    SIZE_BOUNDS,
    Distribution,
)
from infinistream.stream.publish_rules import Outcome, Publish, read_headers
from infinistream.stream.put_budget import PutBudget
from infinistream.stream.recorded import Retirer

log = logging.getLogger(__name__)

# Called once per stream in a batch, with the reply subjects of the publishes that asked for an
# answer (text, or the client's bytes for a run of PUBs) and, for each, its PubAck or error JSON.
AckSink = Callable[[list[str | bytes], list[bytes]], None]
# Told the streams a batch committed to (to wake pull requests waiting for messages).
CommitListener = Callable[[list[str]], None]
# Told True when the buffer is too far behind and publishers should pause, False when not.
PressureListener = Callable[[bool], None]
# How a stream's section is stored (storage.codec).
CodecLookup = Callable[[str], int]
# Told the outcome of a counter increment and the answer it would get: the answer to send,
# or None when the increment is to be computed again (see stream.counters).
CounterListener = Callable[[str, Publish, Outcome, bytes], bytes | None]

# A batch this large with a compressed section is built off the loop: compressing 256 KiB
# takes about 0.2 ms, more than the hop to a thread.
BUILD_OFF_LOOP_BYTES = 256 * 1024
# How long a flush waits, at most, for publishes a client has on their way (append_run's
# `more`): loop turns, each a poll of the sockets, until they are read or this has passed.
# A window of publishes that a client writes in several parts then goes as one object and
# one commit rather than one per part, each waiting for the one before.
REFILL_WAIT = 0.0003
# A batch this large goes after one such turn: its object is written off the loop, which
# goes on reading what follows into the next batch meanwhile, while waiting would hold back
# what is already here (a window of thousands in flight arrives over milliseconds).
REFILL_BYTES = 64 * 1024


def _ignore(_: object) -> None:
    pass


def _uncompressed(_: str) -> int:
    return CODEC_NONE


def _as_answered(_stream: str, _pub: Publish, _outcome: Outcome, answer: bytes) -> bytes:
    return answer


@dataclass(slots=True)
class _StreamBatch:
    # The section's record bytes, as parts whose concatenation they are.
    parts: list[bytes | memoryview] = field(default_factory=list)
    publishes: list[Publish] = field(default_factory=list)
    # Whether any publish is a counter increment (Publish.counter).
    counters: bool = False


@dataclass(slots=True)
class _Batch:
    streams: dict[str, _StreamBatch] = field(default_factory=dict)
    size: int = 0

    @property
    def count(self) -> int:
        return sum(len(sb.publishes) for sb in self.streams.values())


class SubjectRun(msgspec.Struct, frozen=True, gc=False):
    """Publishes of one subject in a row without headers: the subject's text (what the
    commit and the index see), the subject as the records hold it, and each publish's reply
    as the client sent it and its payload (bytes, or a view of the bytes read)."""

    subject: str
    subject_bytes: bytes
    replies: list[bytes | None]
    payloads: list[bytes | memoryview]


@dataclass
class WriteStats:
    flushes: int = 0
    objects: int = 0
    messages: int = 0
    bytes: int = 0
    failed_batches: int = 0
    # Per committed batch: its object's bytes and messages; the seconds its PUT and its
    # metadata commit took (what a publish waits for before its ack).
    batch_bytes: Distribution = field(default_factory=lambda: Distribution(SIZE_BOUNDS))
    batch_messages: Distribution = field(default_factory=lambda: Distribution(COUNT_BOUNDS))
    put_seconds: Distribution = field(default_factory=lambda: Distribution(LATENCY_BOUNDS))
    commit_seconds: Distribution = field(default_factory=lambda: Distribution(LATENCY_BOUNDS))


class WriteBuffer:
    def __init__(
        self,
        objects: ObjectStore,
        committer: Committer,
        cache: SectionCache[bytes],
        ack: AckSink,
        *,
        group: str,
        agent_id: str,
        budget: PutBudget | None = None,
        batch_bytes: int = 4 * 1024 * 1024,
        max_in_flight: int = 4,
        on_commit: CommitListener = _ignore,
        on_pressure: PressureListener = _ignore,
        codec_of: CodecLookup = _uncompressed,
        encryption: Encryption | None = None,
        core: CoreHold | None = None,
        directories: bool = True,
        domain: str = "",
    ) -> None:
        self.objects = objects
        # The JetStream domain PubAcks name ("": none).
        self.domain = domain
        self.committer = committer
        self.cache = cache
        self.ack = ack
        self.group = group
        self.agent_id = agent_id
        # S3's default: a budget of 4 PUTs/s, at most one PUT per 250 ms on average.
        self.budget = budget if budget is not None else PutBudget(rate=4.0)
        self.batch_bytes = batch_bytes
        self.max_in_flight = max_in_flight
        self.stats = WriteStats()
        # Retires the commit records this buffer's flushes leave in packs, as they pile up.
        self.retirer = Retirer(committer.meta, objects)
        self._batch = _Batch()
        # The next flush, once the budget allows it (None: none is planned).
        self._due: asyncio.Handle | None = None
        # Flushes written or being written whose commit has not finished; of those, the ones
        # whose object is not stored yet (the next batch waits for these).
        self._uncommitted = 0
        self._unwritten = 0
        self._counter = itertools.count()
        self._last_commit: asyncio.Future[None] | None = None
        self._in_flight: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(max_in_flight)
        self.on_commit = on_commit
        self.on_pressure = on_pressure
        self.codec_of = codec_of
        self.on_counter: CounterListener = _as_answered
        # Encryption at rest: every section of every object sealed under a new data key.
        self.encryption = encryption
        self._sealed = CODEC_SEALED if encryption is not None else CODEC_NONE
        # Sections with record directories and their one small entry each; without, the
        # per-record index entries agents of earlier versions read (during an upgrade).
        self.directories = directories
        self._pressured = False
        # Record bytes of the batches that finished (committed or failed), ever; and of those
        # flushed and not finished yet. An account's storage quota reads both.
        self.settled_bytes = 0
        self._writing_bytes = 0
        # Holds the loop's core while a small flush waits on the disk on the loop's thread.
        self.core = core if core is not None else CoreHold()
        # Whether the latest append said more publishes are a moment behind, and until when
        # a planned flush waits for them (append_run).
        self._more = False
        self._refill_until = 0.0

    @property
    def pending_bytes(self) -> int:
        return self._batch.size

    @property
    def unsettled_bytes(self) -> int:
        """Record bytes appended and not yet committed (or failed): buffered or being written."""
        return self._batch.size + self._writing_bytes

    def append(
        self,
        stream: str,
        subject: str,
        headers: bytes | None,
        data: bytes,
        reply: str | None,
        *,
        replaces: int = 0,
        fires: str = "",
        counter: CounterClaim | None = None,
        origin_seq: int = 0,
        stamp: int = 0,
    ) -> None:
        """Queue a publish; `replaces`, `fires` and `counter` are for the agent's own delete
        markers, scheduled messages and counter increments, `origin_seq` and `stamp` for a
        mirror's copies (see Publish)."""
        record = encode_record(subject, headers or b"", data)
        size = len(record)
        batch = self._batch
        sb = batch.streams.get(stream)
        if sb is None:
            sb = batch.streams[stream] = _StreamBatch()
        sb.parts.append(record)
        # The headers are read now, before the message joins a batch: a malformed one fails
        # this message alone when the batch is planned (publish_rules.read_headers).
        rules = None if headers is None else read_headers(headers)
        sb.publishes.append(
            Publish(
                subject,
                headers,
                len(data),
                size,
                reply,
                replaces,
                fires=fires,
                counter=counter,
                rules=rules,
                origin_seq=origin_seq,
                stamp=stamp,
            )
        )
        if counter is not None:
            sb.counters = True
        batch.size += size
        self._after_append()

    def append_run(self, stream: str, run: SubjectRun, *, more: bool = False) -> None:
        """Queue a run of publishes of one subject without headers, as `append` would each.
        A payload may be a view of the bytes read: it is copied once, into its section.
        `more`: more of the client's publishes are a moment behind (its read ended inside
        a frame, or it owes publishes for PubAcks it was sent): a flush planned now polls
        the sockets for them first, one loop turn, then more while the batch is under
        REFILL_BYTES, for at most REFILL_WAIT."""
        subject, subject_bytes, payloads = run.subject, run.subject_bytes, run.payloads
        count = len(payloads)
        if len(run.replies) != count:
            raise ValueError(f"{len(run.replies)} replies for {count} payloads")
        parts = encode_records(subject_bytes, payloads)
        batch = self._batch
        sb = batch.streams.get(stream)
        if sb is None:
            sb = batch.streams[stream] = _StreamBatch()
        head = RECORD_HEADER_SIZE + len(subject_bytes)
        lengths = list(map(len, payloads))
        sizes = list(map(head.__add__, lengths))
        # One Publish per message made by map, not a loop turn each: half the time.
        sb.publishes += map(
            Publish,
            itertools.repeat(subject, count),
            itertools.repeat(None),
            lengths,
            sizes,
            run.replies,
        )
        sb.parts += parts
        batch.size += head * count + sum(lengths)
        self._after_append(more)

    def append_batch(
        self,
        stream: str,
        messages: list[tuple[str, bytes, bytes]],
        reply: str | None,
        batch_id: str,
    ) -> None:
        """Queue an atomic batch: (subject, headers, data) each, the reply the last one's. It
        goes into one flush whatever its size, so that one commit takes it all or none."""
        batch = self._batch
        sb = batch.streams.get(stream)
        if sb is None:
            sb = batch.streams[stream] = _StreamBatch()
        last = len(messages)
        for n, (subject, headers, data) in enumerate(messages, start=1):
            record = encode_record(subject, headers, data)
            sb.parts.append(record)
            sb.publishes.append(
                Publish(
                    subject,
                    headers,
                    len(data),
                    len(record),
                    reply if n == last else None,
                    batch=batch_id,
                    batch_seq=n,
                    rules=read_headers(headers),
                )
            )
            batch.size += len(record)
        self._after_append()

    def _after_append(self, more: bool = False) -> None:
        # Whether the latest publishes said more are on their way: a lone one never waits.
        self._more = more
        if self._batch.size >= self.batch_bytes:
            self.budget.spend()
            self.flush()
        elif self._due is None and not self._unwritten:
            if more:
                # A window of publishes reaches the loop in reads a moment apart (a client's
                # write larger than a read, or written in parts): flushing after the first
                # would commit the window in several objects, one after the other.
                self._refill_until = time.perf_counter() + REFILL_WAIT
                self._due = asyncio.get_running_loop().call_soon(self._plan_after_reads)
            else:
                self._plan_flush()

    def _plan_after_reads(self) -> None:
        self._due = None
        if not self._batch.streams or self._unwritten:
            return
        if (
            self._more
            and self._batch.size < REFILL_BYTES
            and time.perf_counter() < self._refill_until
        ):
            # Each turn polls the sockets; between turns the core goes to whatever else is
            # runnable on it (on a busy machine, often the client writing the rest).
            os.sched_yield()
            self._due = asyncio.get_running_loop().call_soon(self._plan_after_reads)
            return
        self._plan_flush()

    def _plan_flush(self) -> None:
        """Flush as soon as the budget allows; the pipe is empty."""
        wait = self.budget.take()
        loop = asyncio.get_running_loop()
        if wait == 0.0:
            # Not at once: the publishes already read in this loop iteration join the batch.
            self._due = loop.call_soon(self._flush_due)
        else:
            self._due = loop.call_later(wait, self._budget_refilled)

    def _flush_due(self) -> None:
        self._due = None
        self.flush()

    def _budget_refilled(self) -> None:
        self._due = None
        if self._batch.streams and not self._unwritten:
            self._plan_flush()

    def flush(self) -> None:
        """Seal the current batch and start writing it; the next batch starts empty."""
        if self._due is not None:
            self._due.cancel()
            self._due = None
        batch = self._batch
        if not batch.streams:
            return
        self._batch = _Batch()
        self._uncommitted += 1
        self._unwritten += 1
        self._writing_bytes += batch.size
        previous = self._last_commit
        committed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last_commit = committed
        task = asyncio.get_running_loop().create_task(self._write(batch, previous, committed))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)
        self._update_pressure()

    async def drain(self) -> None:
        """Flush what is buffered and wait until every batch is answered."""
        self.flush()
        while self._in_flight:
            await asyncio.gather(*list(self._in_flight), return_exceptions=True)
        await self.retirer.close()

    async def settle(self) -> None:
        """Flush what is buffered and wait until those batches are answered (not the ones
        appended meanwhile: under load, `drain` might wait for ever)."""
        self.flush()
        await asyncio.gather(*list(self._in_flight), return_exceptions=True)

    def _update_pressure(self) -> None:
        pressured = len(self._in_flight) > self.max_in_flight
        if pressured != self._pressured:
            self._pressured = pressured
            self.on_pressure(pressured)

    def _object_key(self) -> str:
        return l0_key(
            self.group, time.time_ns(), self.agent_id, next(self._counter), os.urandom(3).hex()
        )

    async def _write(
        self,
        batch: _Batch,
        previous: asyncio.Future[None] | None,
        committed: asyncio.Future[None],
    ) -> None:
        stored = [False]  # whether this flush no longer counts in _unwritten
        answered = False

        def answer(outcomes: dict[str, list[Outcome]]) -> None:
            # Called by the committer the moment the batch is durable, ahead of its
            # bookkeeping: the acks go out first.
            nonlocal answered
            answered = True
            self._answer(batch, outcomes)

        try:
            async with self._slots:
                key = self._object_key()
                codecs = [self.codec_of(stream) | self._sealed for stream in batch.streams]
                sealer = None if self.encryption is None else self.encryption.sealer()
                if any(codecs) and batch.size >= BUILD_OFF_LOOP_BYTES:
                    parts, sections, plain = await asyncio.to_thread(
                        _build, key, batch, codecs, sealer, self.directories
                    )
                else:
                    parts, sections, plain = _build(key, batch, codecs, sealer, self.directories)
                size = sum(map(len, parts))
                error, outcomes = await self._put_and_commit(
                    key, parts, size, sections, previous, stored, answer
                )
                if error is not None:
                    self.stats.failed_batches += 1
                    if not answered:
                        self._answer_all(batch, error)
                    return
                # The cache holds plain record bytes, whatever the section's codec.
                for s, records in zip(sections, plain, strict=True):
                    self.cache.put(s.obj, s.offset, records)
                self.stats.flushes += 1
                self.stats.objects += 1
                self.stats.messages += batch.count
                self.stats.bytes += size
                self.stats.batch_bytes.observe(size)
                self.stats.batch_messages.observe(batch.count)
                if not answered:
                    # Answered here when the commit did not call back (its `durable` is
                    # optional: a committer may only return the outcomes).
                    self._answer(batch, outcomes)
                self.on_commit(list(outcomes))
        finally:
            if not committed.done():
                committed.set_result(None)
            self._uncommitted -= 1
            if not stored[0]:
                self._unwritten -= 1
            self._writing_bytes -= batch.size
            self.settled_bytes += batch.size
            self._update_pressure()
            # Group commit: what arrived meanwhile goes next.
            if self._batch.streams and self._due is None and not self._unwritten:
                self._plan_flush()

    async def _put_and_commit(
        self,
        key: str,
        parts: list[bytes],
        size: int,
        sections: list[SectionWrite],
        previous: asyncio.Future[None] | None,
        stored: list[bool],
        answer: Callable[[dict[str, list[Outcome]]], None],
    ) -> tuple[errors.ApiError | None, dict[str, list[Outcome]]]:
        """PUT the object, then commit its sections: the error that stopped it, or the outcome
        of every publish."""
        # On a local directory the object is appended to its pack on the loop's thread with
        # no sync of its own: the commit's sync makes both durable, one sync where a put and
        # a durable commit take two (Committer.commit_sections). Otherwise (S3, the pack
        # writer busy, or a batch larger than a staged one: localstore.STAGE_BYTES) it is
        # put, a small one on the loop's thread: a batch written or committed there holds
        # its core while the thread waits on the disk (not while it waits for the batch
        # before it, nor while it runs: the holding thread would take the GIL at each
        # system call).
        hold = self.core.hold if self.objects.writes_inline(size) else contextlib.nullcontext
        put_started = time.monotonic()
        staged: _Staged | None = None
        try:
            # The key is this agent's alone (_object_key): no lookup of a file of its name.
            written = self.objects.stage_parts(key, parts, fresh=True)
            if written is None:
                with hold():
                    await self.objects.put_parts(key, parts, fresh=True)
            else:
                staged = _Staged(self.objects, key, written, self.retirer, self.core)
            self.stats.put_seconds.observe(time.monotonic() - put_started)
        except Exception as exc:
            log.error("object write %s failed: %s", key, exc)
            return errors.stream_store_failed(_failed("object storage write", exc)), {}
        finally:
            stored[0] = True
            self._unwritten -= 1
        await self._next_while_committing()
        # Commits must land in batch order even when PUTs finish out of order.
        if previous is not None:
            await asyncio.shield(previous)
        commit_started = time.monotonic()
        try:
            # A staged object's sync holds the core itself (_Staged.sync).
            with hold() if staged is None else contextlib.nullcontext():
                outcomes = await self.committer.commit_sections(sections, staged, answer)
        except Exception as exc:
            log.error("metadata commit for %s failed: %s", key, exc)
            return errors.stream_store_failed(_failed("metadata commit", exc)), {}
        self.stats.commit_seconds.observe(time.monotonic() - commit_started)
        return None, outcomes

    async def _next_while_committing(self) -> None:
        """The object is stored: the batch that grew meanwhile goes now, if the budget has a
        PUT for it, its PUT started before this commit (given one loop turn to start it)."""
        if not self._batch.streams or self._due is not None or self._unwritten:
            return
        wait = self.budget.take()
        if wait == 0.0:
            self.flush()
            await asyncio.sleep(0)
        else:
            self._due = asyncio.get_running_loop().call_later(wait, self._budget_refilled)

    def _answer(self, batch: _Batch, outcomes: dict[str, list[Outcome]]) -> None:
        for stream, sb in batch.streams.items():
            payloads = answers(stream, outcomes[stream], self.domain)
            if len(payloads) != len(sb.publishes):
                raise ValueError(f"{len(payloads)} outcomes for {len(sb.publishes)} publishes")
            if sb.counters:
                self._send_counted(stream, sb.publishes, outcomes[stream], payloads)
            else:
                self._send(sb.publishes, payloads)

    def _answer_all(self, batch: _Batch, error: errors.ApiError) -> None:
        for stream, sb in batch.streams.items():
            payloads = [error_ack(stream, error)] * len(sb.publishes)
            if sb.counters:
                failed = [Outcome(error=error)] * len(sb.publishes)
                self._send_counted(stream, sb.publishes, failed, payloads)
            else:
                self._send(sb.publishes, payloads)

    def _send_counted(
        self, stream: str, publishes: list[Publish], outcomes: list[Outcome], payloads: list[bytes]
    ) -> None:
        """Answer a section with counter increments: each increment's answer is the counter
        path's to give (its value, or none yet when it is computed again)."""
        kept: list[Publish] = []
        answers_kept: list[bytes] = []
        for pub, outcome, payload in zip(publishes, outcomes, payloads, strict=True):
            answer = (
                payload if pub.counter is None else self.on_counter(stream, pub, outcome, payload)
            )
            if answer is not None:
                kept.append(pub)
                answers_kept.append(answer)
        self._send(kept, answers_kept)

    def _send(self, publishes: list[Publish], payloads: list[bytes]) -> None:
        """Hand the sink the answers of the publishes that asked for one."""
        replies: list[str | bytes] = [p.reply for p in publishes if p.reply is not None]
        if len(replies) < len(publishes):
            payloads = [a for p, a in zip(publishes, payloads, strict=True) if p.reply is not None]
        if replies:
            self.ack(replies, payloads)


@dataclass(slots=True, eq=False)
class _Staged:
    """A flush's object written to its pack and not yet durable (`StagedObject`)."""

    objects: ObjectStore
    key: str
    written: Staged
    retirer: Retirer
    core: CoreHold

    def sync(self, record: bytes | None, revision: int = 0) -> None:
        with self.core.hold():
            self.objects.complete(self.key, self.written, record, revision)
        if record is not None:
            self.retirer.written()


def _failed(what: str, exc: BaseException) -> str:
    """What publishers are told of a failed write: what failed, and the system's reason when
    there is one ("No space left on device"); never the exception's text, which can name
    files and code (the log has it)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno:
            return f"{what} failed: {os.strerror(cause.errno)}"
        cause = cause.__cause__ or cause.__context__
    return f"{what} failed"


def _build(
    key: str,
    batch: _Batch,
    codecs: list[int],
    sealer: Sealer | None = None,
    directories: bool = True,
) -> tuple[list[bytes], list[SectionWrite], list[bytes]]:
    """The object of a batch, a section per stream under its codec (sealed by `sealer` when
    the codec says so) with its record directory, as the parts whose concatenation it is;
    the sections as written and each one's plain record bytes."""
    builder = ObjectBuilder(sealer)
    sections: list[SectionWrite] = []
    for (stream, sb), codec in zip(batch.streams.items(), codecs, strict=True):
        sizes = [p.size for p in sb.publishes]
        directory = directory_of(sb.publishes) if directories else None
        ref = builder.add_section_parts(stream, sb.parts, sizes, codec, directory)
        sections.append(
            SectionWrite(stream, key, ref.offset, ref.length, sb.publishes, codec, directory, ref)
        )
    parts = builder.finish_parts()
    return parts, sections, [builder.plain(i) for i in range(len(sections))]


def answers(stream: str, outcomes: list[Outcome], domain: str = "") -> list[bytes]:
    """The answer to each publish of one stream: its PubAck, or the error it met."""
    prefix = pub_ack_prefix(stream, domain)
    # Formatting a sequence into a per-stream template is all a PubAck costs per message.
    pub_ack = prefix.replace(b"%", b"%%") + b"%d}"
    return [
        pub_ack % o.seq
        if o.error is None and not o.duplicate and not o.batch
        else _other(stream, prefix, o)
        for o in outcomes
    ]


def pub_ack_prefix(stream: str, domain: str = "") -> bytes:
    """A PubAck up to its sequence, as nats-server's stream keeps it (its pubAck template)."""
    if domain:
        return b'{"stream":%s,"domain":%s,"seq":' % (
            msgspec.json.encode(stream),
            msgspec.json.encode(domain),
        )
    return b'{"stream":' + msgspec.json.encode(stream) + b',"seq":'


def _other(stream: str, prefix: bytes, outcome: Outcome) -> bytes:
    if outcome.error is not None:
        return error_ack(stream, outcome.error)
    if outcome.batch:
        # An atomic batch's commit: its id and size, as nats-server's PubAck has them.
        return b'%s%d,"batch":%s,"count":%d}' % (
            prefix,
            outcome.seq,
            msgspec.json.encode(outcome.batch),
            outcome.count,
        )
    return b'%s%d,"duplicate": true}' % (prefix, outcome.seq)


def error_ack(stream: str, error: errors.ApiError) -> bytes:
    return encode_json({"error": error.to_dict(), "stream": stream, "seq": 0})
