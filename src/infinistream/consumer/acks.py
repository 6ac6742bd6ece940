"""Acks from clients: parsed from `$JS.ACK.*` subjects, committed in batches.

Acks for one consumer queue up while a commit is in flight and go together in the next one, so
a client acking thousands of messages costs a handful of metadata transactions, not one per
message. An ack that carries a reply subject (nats-py's ack_sync) is answered only after its
commit, so a client that saw the answer knows the ack survives any agent's death.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgspec

from infinistream import natsconf
from infinistream.consumer.progress import ACK, NAK, NEXT, PROGRESS, TERM, Ack, apply_ack
from infinistream.consumer.store import ConsumerGone, ConsumerStore, LoadedConsumer

log = logging.getLogger(__name__)


@dataclass(slots=True)
class AckMessage:
    stream: str
    consumer: str
    ack: Ack
    reply: str | None
    body: bytes
    # Answers the client as nats-server does when nothing serves an ack subject.
    unserved: Callable[[], None] | None = None

    def refuse(self) -> None:
        if self.reply is not None and self.unserved is not None:
            self.unserved()
        self.reply = None


def parse_ack(subject: str, body: bytes) -> AckMessage | None:
    """An ack from its subject and body; None for anything nats-server would ignore."""
    tokens = subject.split(".")
    if len(tokens) == 9:
        stream, consumer, rest = tokens[2], tokens[3], tokens[4:]
    elif len(tokens) >= 12:
        # The v2 form adds domain and account hash before the stream, and a token after.
        stream, consumer, rest = tokens[4], tokens[5], tokens[6:11]
    else:
        return None
    if not all(t.isdigit() for t in rest[:3]):
        return None
    deliveries, stream_seq, consumer_seq = int(rest[0]), int(rest[1]), int(rest[2])
    kind, delay = _parse_body(body)
    if kind is None:
        return None
    # The consumer sequence matters to ack policy all, whose floor nats-server sets from it.
    ack = Ack(kind, stream_seq, deliveries, delay, consumer_seq)
    return AckMessage(stream, consumer, ack, None, body)


def _parse_body(body: bytes) -> tuple[str | None, int | None]:
    text = body.strip()
    if not text or text in (b"+ACK", b"+OK"):
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
            return msgspec.json.decode(raw, type=_Delay).delay or None
        except msgspec.DecodeError:
            return None
    try:
        return int(natsconf.parse_duration(raw.decode()) * 1e9)
    except ValueError:
        return None


# Called after a commit with the acks that went into it.
Committed = Callable[[LoadedConsumer, list[AckMessage]], Awaitable[None]]


class AckBatcher:
    def __init__(self, store: ConsumerStore, committed: Committed) -> None:
        self.store = store
        self.committed = committed
        self._queues: dict[tuple[str, str], list[AckMessage]] = {}
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.commits = 0

    def add(self, msg: AckMessage) -> None:
        key = (msg.stream, msg.consumer)
        self._queues.setdefault(key, []).append(msg)
        task = self._tasks.get(key)
        if task is None or task.done():
            self._tasks[key] = asyncio.get_running_loop().create_task(self._drain(key))

    async def _drain(self, key: tuple[str, str]) -> None:
        while self._queues.get(key):
            batch = self._queues.pop(key)
            try:
                await self._commit(key, batch)
            except ConsumerGone:
                # nats-server has no subscription for a consumer that does not exist.
                for msg in batch:
                    msg.refuse()
            except Exception:
                log.exception("committing acks for %s > %s", *key)

    async def _commit(self, key: tuple[str, str], batch: list[AckMessage]) -> None:
        now = time.time_ns()
        seen: list[LoadedConsumer] = []

        def change(loaded: LoadedConsumer) -> bool | None:
            seen[:] = [loaded]
            cfg = loaded.record.config
            if cfg.ack_policy == "none":
                return None
            changed = False
            for msg in batch:
                changed = apply_ack(loaded.state, cfg, msg.ack, now) or changed
            if changed:
                loaded.state.last_active_ns = now
            return True if changed else None

        result = await self.store.change_state(key[0], key[1], change)
        self.commits += 1
        loaded = result[0] if result is not None else seen[0]
        if loaded.record.config.ack_policy == "none":
            # nats-server does not listen for acks of an ack-none consumer.
            for msg in batch:
                msg.refuse()
            return
        for msg in batch:
            if msg.ack.kind != NEXT and msg.ack.stream_seq > loaded.state.stream_seq:
                # nats-server (processAckMsg) ignores an ack past what it delivered and does
                # not answer it.
                msg.reply = None
        await self.committed(loaded, batch)

    async def drain(self) -> None:
        while self._tasks:
            tasks = [t for t in self._tasks.values() if not t.done()]
            if not tasks:
                break
            await asyncio.gather(*tasks, return_exceptions=True)
