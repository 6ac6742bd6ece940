"""Pull requests waiting on this agent, served by the delivery engine.

A `CONSUMER.MSG.NEXT` request waits here until it has its batch, its max_bytes, or its expiry.
The engine's loop for its consumer serves the oldest request first; this module says what a
request may take (`_limits`), sends to its inbox, and answers it with nats-server's status
messages (server/consumer.go processNextMsgRequest, processWaiting): 408 when it expires, 409
when it cannot be served or its bytes ran out, 404 for a no-wait request with nothing to hand
out, 100 as its idle heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field

from infinistream.consumer.config import ConsumerConfig, NextRequest
from infinistream.consumer.delivery import wire_size
from infinistream.consumer.engine import (
    DeliveryEngine,
    EngineParts,
    Limits,
    Round,
    Served,
    until_due,
)
from infinistream.consumer.progress import Filter, SizeOf, num_pending
from infinistream.consumer.store import LoadedConsumer
from infinistream.jetstream.messages import DeliverMany, HasInterest, status
from infinistream.protocol import Outgoing
from infinistream.storage.segment import RECORD_HEADER_SIZE
from infinistream.stream.view import StreamView

# How long a loop with requests waiting sleeps when nothing wakes it: a bound, as commits,
# acks and other agents' changes wake it.
IDLE_POLL_SECONDS = 0.25


@dataclass(eq=False)
class PullRequest:
    reply: str
    batch: int
    max_bytes: int
    no_wait: bool
    expires_at: float | None  # loop time
    heartbeat: float
    # When something was last sent to its inbox (monotonic): heartbeats are owed after idling.
    last_sent: float
    delivered: int = 0
    done: bool = False
    timers: list[asyncio.TimerHandle] = field(default_factory=list)

    @property
    def pending(self) -> tuple[int, int]:
        return (self.batch, self.max_bytes)


@dataclass(eq=False, kw_only=True)
class PullConsumer(Served):
    """A consumer with requests waiting on this agent, oldest first."""

    waiting: deque[PullRequest] = field(default_factory=deque)


class PullService(DeliveryEngine[PullConsumer, PullRequest]):
    def __init__(
        self, parts: EngineParts, deliver_many: DeliverMany, has_interest: HasInterest
    ) -> None:
        super().__init__(parts)
        self.deliver_many = deliver_many
        self.has_interest = has_interest

    def waiting_count(self, stream: str, name: str) -> int:
        pc = self.active.get((stream, name))
        return len(pc.waiting) if pc is not None else 0

    # -- requests --------------------------------------------------------------------------

    def add(
        self, stream: str, name: str, cfg: ConsumerConfig, req: NextRequest, reply: str
    ) -> None:
        """Queue a validated MSG.NEXT request; its answers go to `reply`."""
        key = (stream, name)
        pc = self.active.get(key)
        if pc is None:
            pc = self.active[key] = PullConsumer(stream=stream, name=name)
        if cfg.max_waiting > 0 and len(pc.waiting) >= cfg.max_waiting:
            if not req.idle_heartbeat:
                self._tell(reply, status(409, "Exceeded MaxWaiting"))
            return
        loop = asyncio.get_running_loop()
        expires_at = loop.time() + req.expires / 1e9 if req.expires else None
        pull = PullRequest(
            reply=reply,
            batch=req.batch,
            max_bytes=req.max_bytes,
            no_wait=req.no_wait,
            expires_at=expires_at,
            heartbeat=req.idle_heartbeat / 1e9,
            last_sent=self.clock.monotonic(),
        )
        if expires_at is not None:
            pull.timers.append(loop.call_at(expires_at, self._expire, pc, pull))
        if pull.heartbeat > 0:
            pull.timers.append(loop.call_later(pull.heartbeat, self._heartbeat, pc, pull))
        pc.waiting.append(pull)
        self._kick(pc)

    def _tell(self, reply: str, status_headers: bytes) -> None:
        """A status message (no payload) to a request's inbox."""
        self.deliver_many(reply, [(reply, None, status_headers, b"")])

    def _finish(self, pc: PullConsumer, pull: PullRequest, answer: bytes | None = None) -> None:
        if pull.done:
            return
        pull.done = True
        for timer in pull.timers:
            timer.cancel()
        if answer is not None:
            self._tell(pull.reply, answer)
        with contextlib.suppress(ValueError):
            pc.waiting.remove(pull)

    def _expire(self, pc: PullConsumer, pull: PullRequest) -> None:
        self._finish(pc, pull, status(408, "Request Timeout", pull.pending))

    def _heartbeat(self, pc: PullConsumer, pull: PullRequest) -> None:
        if pull.done:
            return
        now = self.clock.monotonic()
        if now - pull.last_sent >= pull.heartbeat * 0.9:
            self._tell(pull.reply, status(100, "Idle Heartbeat"))
            pull.last_sent = now
        loop = asyncio.get_running_loop()
        pull.timers.append(loop.call_later(pull.heartbeat, self._heartbeat, pc, pull))

    def consumer_deleted(self, stream: str, name: str) -> PullConsumer | None:
        pc = super().consumer_deleted(stream, name)
        if pc is not None:
            for pull in list(pc.waiting):
                self._finish(pc, pull, status(409, "Consumer Deleted"))
        return pc

    # -- the engine's pull edge ------------------------------------------------------------

    def _busy(self, s: PullConsumer) -> bool:
        return bool(s.waiting)

    def _demand(self, s: PullConsumer, now: float) -> PullRequest | float:
        """The oldest request whose client still listens."""
        while s.waiting and (s.waiting[0].done or not self.has_interest(s.waiting[0].reply)):
            self._finish(s, s.waiting[0])
        return s.waiting[0] if s.waiting else 0.0

    def _limits(
        self,
        s: PullConsumer,
        demand: PullRequest,
        loaded: LoadedConsumer,
        filt: Filter,
        view: StreamView,
    ) -> Limits:
        size_of = None
        if demand.max_bytes > 0:
            pending = num_pending(loaded.state, filt, view)
            size_of = _wire_size(s.stream, s.name, view, pending)
        # nats-server hands out one message for a batch of 0 or less (and reports the batch as
        # it was sent in the request's status headers).
        return Limits(max(demand.batch, 1), demand.max_bytes, size_of)

    def _send(
        self,
        s: PullConsumer,
        demand: PullRequest,
        cfg: ConsumerConfig,
        msgs: list[Outgoing],
        now: float,
    ) -> None:
        self.deliver_many(demand.reply, msgs)
        if demand.max_bytes:
            demand.max_bytes -= sum(map(wire_size, msgs))
        demand.batch -= len(msgs)
        demand.delivered += len(msgs)
        demand.last_sent = now

    def _after(self, s: PullConsumer, demand: PullRequest, rnd: Round, now: float) -> float:
        pull = demand
        if not rnd.deliveries:
            return self._idle(s, pull, rnd)
        if pull.batch <= 0 and pull.max_bytes > 0:
            # nats-server tells a request that asked for bytes that its batch is done first.
            self._finish(s, pull, status(409, "Batch Completed", (0, pull.max_bytes)))
        elif pull.batch <= 0 or (pull.max_bytes and pull.max_bytes <= 0):
            self._finish(s, pull)
        elif rnd.claimed.blocked:
            self._finish(s, pull, status(409, "Message Size Exceeds MaxBytes", pull.pending))
        return 0.0

    def _idle(self, s: PullConsumer, pull: PullRequest, rnd: Round) -> float:
        """Nothing to hand out now: answer no-wait requests, or say how long to sleep."""
        if rnd.claimed.blocked:
            self._finish(s, pull, status(409, "Message Size Exceeds MaxBytes", pull.pending))
            return 0.0
        if pull.no_wait and (pull.expires_at is None or pull.delivered):
            self._finish(s, pull, status(404, "No Messages"))
            return 0.0
        return until_due(rnd.loaded, self.clock.wall_ns(), IDLE_POLL_SECONDS)


def _wire_size(stream: str, name: str, view: StreamView, pending_before: int) -> SizeOf:
    """A delivery's size as nats-server counts it for max_bytes, from the view alone.

    Subject, headers and data (the stored record less its frame header) plus the ack reply
    `outgoing` will build. For headers_only consumers this is the full message: the view does
    not split headers from data, and `_send` then charges what was actually sent.
    """
    prefix = len(f"$JS.ACK.{stream}.{name}.") + 4  # and the dots between the numbers

    def size_of(seq: int, deliveries: int, consumer_seq: int, fresh: int) -> int:
        pending = max(pending_before - fresh - (1 if deliveries == 1 else 0), 0)
        numbers = (deliveries, seq, consumer_seq, view.ts_of(seq), pending)
        ack_len = prefix + sum(len(str(n)) for n in numbers)
        return view.record_length_of(seq) - RECORD_HEADER_SIZE + ack_len

    return size_of
