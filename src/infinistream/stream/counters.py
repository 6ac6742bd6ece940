"""Counter streams (`allow_msg_counter`, ADR-49): `Nats-Incr` adds to a subject's value.

Every message of a counter stream is an increment: its `Nats-Incr` header is a decimal big
integer (`+1`, `-10`, `0`), its body empty; it is stored with the body `{"val":"<total>"}`,
the subject's value after it, and the PubAck carries that value as `val`. A message that
arrived through a source (`Nats-Stream-Source`) carries its origin's total instead: the
increment stored is the difference from the last total seen from that origin, kept per
origin stream and subject in the `Nats-Counter-Sources` header, which each new value copies
from the one before it.

The value is computed before the message is written, from the subject's last message, and
the commit takes it only while that message is still the subject's last (stream.counter_claim):
increments from many agents at once are each stored on the value before them, none lost. The
one that loses a race is computed again on the new value and written again. On one agent,
the increments of a stream go in rounds: each round computes every waiting increment (those
of one subject chained one after the other) and waits for their commit before the next.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from infinistream.jetstream import errors
from infinistream.jetstream.api import StreamConfig
from infinistream.protocol import header_value, set_header
from infinistream.stream.batches import BATCH_ID, is_batch_message
from infinistream.stream.catalog import Catalog
from infinistream.stream.counter_claim import CounterClaim
from infinistream.stream.damage import DamagedMessage
from infinistream.stream.fastbatches import is_fast_batch
from infinistream.stream.publish_headers import (
    EXPECTED_LAST_MSG_ID,
    EXPECTED_LAST_SEQ,
    EXPECTED_LAST_SUBJECT_SEQ,
    EXPECTED_LAST_SUBJECT_SEQ_SUBJECT,
    EXPECTED_STREAM,
    ROLLUP,
)
from infinistream.stream.publish_rules import Outcome, Publish
from infinistream.stream.reader import MessageReader
from infinistream.stream.view import StreamView
from infinistream.stream.write_buffer import WriteBuffer, error_ack

log = logging.getLogger(__name__)

INCR = b"Nats-Incr"
COUNTER_SOURCES = b"Nats-Counter-Sources"
STREAM_SOURCE = b"Nats-Stream-Source"
# Headers an increment may not have: each asks for a condition a counter cannot honour.
_REFUSED_WITH_INCR = (
    ROLLUP,
    EXPECTED_STREAM,
    EXPECTED_LAST_MSG_ID,
    EXPECTED_LAST_SUBJECT_SEQ_SUBJECT,
    EXPECTED_LAST_SEQ,
    EXPECTED_LAST_SUBJECT_SEQ,
)
# Go's big.Int SetString(s, 10).
_BIG_INT = re.compile(rb"[+-]?[0-9]+")
# The counter's sources, as the header holds them: stream -> subject -> last total seen.
Sources = dict[str, dict[str, str]]
# Answers publishers: their reply subjects and, for each, its answer.
AckSink = Callable[[list[str | bytes], list[bytes]], None]


class CounterBroken(Exception):
    """The subject's last message (or a sourced one) does not hold a counter value."""


class InvalidIncrement(ValueError):
    """A `Nats-Incr` that is not a decimal integer."""


def increment_of(headers: bytes | None) -> int | None:
    """The `Nats-Incr` of a message; None if it has none (or an empty one)."""
    if headers is None:
        return None
    raw = header_value(headers, INCR)
    if not raw:
        return None
    if _BIG_INT.fullmatch(raw) is None:
        raise InvalidIncrement(raw)
    return int(raw)


def check_increment(
    cfg: StreamConfig, headers: bytes | None, payload: bytes, *, sourced: bool = False
) -> tuple[int | None, errors.ApiError | None]:
    """nats-server's refusals of a publish to a counter stream, or of an increment to another
    stream, in its order: (the increment, or None if the message has none; the refusal)."""
    try:
        incr = increment_of(headers)
    except InvalidIncrement:
        return None, errors.message_incr_invalid()
    if incr is not None and headers is not None and not sourced:
        if not cfg.allow_msg_counter:
            return None, errors.message_incr_disabled()
        if payload:
            return None, errors.message_incr_payload()
        for name in _REFUSED_WITH_INCR:
            if header_value(headers, name):
                return None, errors.message_incr_invalid()
    if not sourced and headers is not None and header_value(headers, STREAM_SOURCE):
        # Only a source may say where a message comes from (a counter would trust it).
        return None, errors.message_source_hdr_not_allowed()
    if incr is None and cfg.allow_msg_counter:
        return None, errors.message_incr_missing()
    return incr, None


def value_of(body: bytes) -> int:
    """The counter value a stored body holds (`{"val":"..."}`); CounterBroken if none."""
    try:
        decoded = json.loads(body)
    except ValueError:
        raise CounterBroken from None
    if decoded is None:
        return 0
    if not isinstance(decoded, dict):
        raise CounterBroken
    val = decoded.get("val", "")
    if not isinstance(val, str):
        raise CounterBroken
    return int(val) if _BIG_INT.fullmatch(val.encode()) else 0


def sources_of(headers: bytes | None) -> Sources:
    """The `Nats-Counter-Sources` a stored counter message carries; CounterBroken if it is
    not a map of stream to subject to value."""
    raw = header_value(headers, COUNTER_SOURCES) if headers else None
    if not raw:
        return {}
    try:
        decoded = json.loads(raw)
    except ValueError:
        raise CounterBroken from None
    if decoded is None:
        return {}
    if not isinstance(decoded, dict) or not all(
        isinstance(subjects, dict) and all(isinstance(v, str) for v in subjects.values())
        for subjects in decoded.values()
    ):
        raise CounterBroken
    return decoded


def _go_json(value: Any) -> str:
    # Go's encoding/json: sorted keys, no spaces, and <, >, & escaped.
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@dataclass(frozen=True, slots=True)
class Counted:
    """An increment as it is stored: its headers, body and the value after it."""

    headers: bytes
    body: bytes
    value: int
    sources: Sources


def apply_increment(
    value: int, sources: Sources, subject: str, incr: int, headers: bytes, payload: bytes
) -> Counted:
    """Add an increment to a subject's `value` (with the `sources` seen so far).

    A sourced message (`Nats-Stream-Source`) adds the difference between its total and the
    last total seen from its origin; its `Nats-Incr` is rewritten to that difference.
    """
    sources = {stream: dict(subjects) for stream, subjects in sources.items()}
    origin = header_value(headers, STREAM_SOURCE)
    if origin:
        fields = origin.decode(errors="replace").split(" ")
        origin_subject = fields[4] if len(fields) >= 5 else subject
        total = value_of(payload)
        previous = sources.setdefault(fields[0], {}).get(origin_subject, "")
        sources[fields[0]][origin_subject] = str(total)
        incr = total - (int(previous) if _BIG_INT.fullmatch(previous.encode()) else 0)
        headers = set_header(headers, INCR, str(incr).encode())
    value += incr
    if sources:
        headers = set_header(headers, COUNTER_SOURCES, _go_json(sources).encode())
    body = b'{"val":"%d"}' % value
    return Counted(headers, body, value, sources)


def with_value(pub_ack: bytes, value: str) -> bytes:
    """A counter increment's PubAck: the stream's own (domain and all) with the value after
    it, as nats-server appends it."""
    return pub_ack[:-1] + b',"val":"' + value.encode() + b'"}'


@dataclass
class _Increment:
    subject: str
    headers: bytes
    incr: int
    payload: bytes
    reply: str | None


@dataclass
class _Ticket:
    round: _Round
    increment: _Increment


@dataclass
class _Round:
    """A round's increments in the write buffer: done when each is answered or taken back."""

    waiting: int
    done: asyncio.Event = field(default_factory=asyncio.Event)
    retry: list[_Increment] = field(default_factory=list)


class CounterIncrements:
    """One account's counter increments on this agent, stream by stream (see above)."""

    def __init__(
        self,
        catalog: Catalog,
        reader: MessageReader,
        write_buffer: WriteBuffer,
        send_acks: AckSink,
    ) -> None:
        self.catalog = catalog
        self.reader = reader
        self.write_buffer = write_buffer
        self.send_acks = send_acks
        self._pending: dict[str, list[_Increment]] = {}
        self._rounds: dict[str, asyncio.Task[None]] = {}
        # Increments computed again because another was stored first, for tests and monitoring.
        self.recomputed = 0

    def publish(
        self,
        stream: str,
        cfg: StreamConfig,
        subject: str,
        headers: bytes | None,
        payload: bytes,
        reply: str | None,
        *,
        sourced: bool = False,
    ) -> bool:
        """Take a publish to `stream`: True if it was an increment (queued) or refused as
        nats-server refuses it; False if it is an ordinary message to store. `sourced` is
        for a stream's sources, whose messages carry `Nats-Stream-Source` and a body."""
        incr, error = check_increment(cfg, headers, payload, sourced=sourced)
        if (
            error is None
            and incr is not None
            and headers is not None
            and (
                (BATCH_ID in headers and is_batch_message(headers))
                or (reply is not None and is_fast_batch(reply))
            )
        ):
            # Increments are computed one round at a time, not staged with a batch.
            error = errors.atomic_publish_unsupported_header_batch(INCR.decode())
        if error is not None:
            self._refuse(stream, reply, error)
            return True
        if incr is None or headers is None:
            return False
        self._pending.setdefault(stream, []).append(
            _Increment(subject, headers, incr, payload, reply)
        )
        if stream not in self._rounds:
            task = asyncio.get_running_loop().create_task(self._run(stream))
            self._rounds[stream] = task
        return True

    async def drained(self, stream: str) -> None:
        """Once every increment taken for `stream` so far is stored or refused."""
        task = self._rounds.get(stream)
        if task is not None:
            await asyncio.shield(task)

    def _refuse(self, stream: str, reply: str | None, error: errors.ApiError) -> None:
        if reply:
            self.send_acks([reply], [error_ack(stream, error)])

    async def _run(self, stream: str) -> None:
        try:
            while self._pending.get(stream):
                increments = self._pending.pop(stream)
                try:
                    retry = await self._round(stream, increments)
                except Exception as exc:
                    log.exception("counter increments of stream %s", stream)
                    error = errors.stream_store_failed(f"counter increment failed: {exc}")
                    for inc in increments:
                        self._refuse(stream, inc.reply, error)
                    continue
                if retry:
                    self.recomputed += len(retry)
                    self._pending[stream] = retry + self._pending.get(stream, [])
        finally:
            del self._rounds[stream]

    async def _round(self, stream: str, increments: list[_Increment]) -> list[_Increment]:
        """Compute and write one round; the increments to compute again."""
        view = await self.catalog.view(stream)
        entry = self.catalog.streams.get(stream)
        if entry is None:
            for inc in increments:
                self._refuse(stream, inc.reply, errors.stream_not_found())
            return []
        bases: dict[str, tuple[int, int, Sources] | None] = {}
        queued: list[tuple[_Increment, Counted, CounterClaim]] = []
        for inc in increments:
            subject = inc.subject
            if subject not in bases:
                base = await self._last_for(view, subject)
                try:
                    bases[subject] = (base, *await self._value_at(view, base))
                except CounterBroken:
                    bases[subject] = None
            held = bases[subject]
            if held is None:
                self._refuse(stream, inc.reply, errors.message_counter_broken())
                continue
            base, value, sources = held
            try:
                counted = apply_increment(
                    value, sources, subject, inc.incr, inc.headers, inc.payload
                )
            except CounterBroken:
                self._refuse(stream, inc.reply, errors.message_counter_broken())
                continue
            chained = any(q[0].subject == subject for q in queued)
            claim = CounterClaim(base, chained, str(counted.value))
            bases[subject] = (base, counted.value, counted.sources)
            queued.append((inc, counted, claim))
        if not queued:
            return []
        current = _Round(len(queued))
        for inc, counted, claim in queued:
            claim.ticket = _Ticket(current, inc)
            self.write_buffer.append(
                stream, inc.subject, counted.headers, counted.body, inc.reply, counter=claim
            )
        await current.done.wait()
        return current.retry

    async def _last_for(self, view: StreamView | None, subject: str) -> int:
        if view is None:
            return 0
        return await self.catalog.answer(lambda: view.last_for(subject))

    async def _value_at(self, view: Any, seq: int) -> tuple[int, Sources]:
        if not seq or view is None:
            return 0, {}
        try:
            msg = await self.catalog.answer_async(partial(self.reader.read_message, view, seq))
        except DamagedMessage:
            raise CounterBroken from None
        if msg is None:
            return 0, {}
        return value_of(msg.data), sources_of(msg.headers)

    def settled(self, stream: str, pub: Publish, outcome: Outcome, answer: bytes) -> bytes | None:
        """The write buffer's answer for an increment: its PubAck with the value, an error, or
        None when another increment was stored first and this one is computed again."""
        claim = pub.counter
        assert claim is not None and isinstance(claim.ticket, _Ticket)
        current, inc = claim.ticket.round, claim.ticket.increment
        current.waiting -= 1
        if current.waiting == 0:
            current.done.set()
        error = outcome.error
        if error is not None and error.err_code == errors.JS_STREAM_WRONG_LAST_SEQUENCE:
            current.retry.append(inc)
            return None
        if error is not None or outcome.duplicate:
            return answer
        return with_value(answer, claim.value)
