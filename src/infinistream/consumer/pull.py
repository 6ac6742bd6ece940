"""Pull requests waiting on this agent, served by the delivery engine.

A `CONSUMER.MSG.NEXT` request waits here until it has its batch, its max_bytes, or its expiry.
The engine's loop for its consumer serves the oldest request first; this module says what a
request may take (`_limits`), sends to its inbox, and answers it with nats-server's status
messages (server/consumer.go processNextMsgRequest, processWaiting): 408 when it expires, 409
when it cannot be served or its bytes ran out, 404 for a no-wait request with nothing to hand
out, 100 as its idle heartbeat. A consumer with a priority policy serves the request
consumer/priority.py chooses, and answers 423 to a request whose pin is not the consumer's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass, field

from infinistream.consumer import engine
from infinistream.consumer.config import ConsumerConfig, NextRequest
from infinistream.consumer.delivery import wire_size
from infinistream.consumer.priority import (
    PIN_HEADER,
    Choice,
    choose,
    new_pin_id,
    pin,
    pin_expires_ns,
)
from infinistream.consumer.progress import Delivery, SizeOf, num_pending
from infinistream.consumer.records import ConsumerState
from infinistream.jetstream.messages import DeliverMany, Drained, HasInterest, Send, status
from infinistream.jetstream.times import go_time
from infinistream.protocol import Outgoing, append_header
from infinistream.storage.segment import RECORD_HEADER_SIZE
from infinistream.stream.view import StreamView

# How long a loop with requests waiting sleeps when nothing wakes it: a bound, as commits,
# acks and other agents' changes wake it.
IDLE_POLL_SECONDS = 0.25
# A request's batch is claimed, read and sent in chunks of at most this many messages and bytes
# (a message larger than that goes alone), each once the client has read the one before down to
# its connection's low-water mark: a batch of thousands of large messages, or a huge max_bytes,
# holds about a chunk of the agent's memory instead of the whole batch. The count is above the
# batches clients fetch, so that a fetch of small messages is still one claim.
CHUNK_MESSAGES = 1024
CHUNK_BYTES = 1024 * 1024


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
    # Its client has not yet read its last chunk: the consumer serves other requests
    # meanwhile, and `release` takes it up again once the client has.
    held: bool = False
    release: asyncio.Task[None] | None = None
    # Its priority group (ADR-42): the group, the pin it carries, its priority, and the
    # overflow thresholds.
    group: str = ""
    pin_id: str = ""
    priority: int = 0
    min_pending: int = 0
    min_ack_pending: int = 0

    @property
    def pending(self) -> tuple[int, int]:
        return (self.batch, self.max_bytes)


@dataclass(frozen=True)
class AdvisorySource:
    """The account and JetStream domain advisories name ("": left out, as nats-server's
    omitempty does)."""

    account: str = ""
    domain: str = ""


@dataclass(eq=False)
class PullTurn:
    """One round of a pull consumer: the request it serves, as chosen from the consumer's state
    when the claim was planned (the last plan is the one committed)."""

    choice: Choice[PullRequest] = field(default_factory=Choice)
    # The pin the messages carry (pinned_client), and when the claim was planned.
    pin: str = ""
    now_ns: int = 0
    # The claim gave `choice.new_pin` to its request.
    pinned: bool = False

    @property
    def request(self) -> PullRequest | None:
        return self.choice.request


@dataclass(eq=False, kw_only=True)
class PullConsumer(engine.Served):
    """A consumer with requests waiting on this agent, oldest first."""

    waiting: deque[PullRequest] = field(default_factory=deque)


class PullService(engine.DeliveryEngine[PullConsumer, PullTurn]):
    def __init__(
        self,
        parts: engine.EngineParts,
        deliver_many: DeliverMany,
        has_interest: HasInterest,
        send: Send | None = None,
        source: AdvisorySource | None = None,
        drained: Drained | None = None,
    ) -> None:
        super().__init__(parts)
        self.deliver_many = deliver_many
        self.has_interest = has_interest
        # Waited for between a request's chunks; None: the receivers take what they are given
        # at once (nothing waits to be written for them).
        self.drained = drained
        # Where advisories go (pins given and lost); None: nowhere.
        self.send = send
        self.source = source or AdvisorySource()

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
            last_sent=self.parts.clock.monotonic(),
            group=req.group,
            pin_id=req.id,
            priority=req.priority,
            min_pending=req.min_pending,
            min_ack_pending=req.min_ack_pending,
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
        if pull.release is not None:
            pull.release.cancel()
        if answer is not None:
            self._tell(pull.reply, answer)
        with contextlib.suppress(ValueError):
            pc.waiting.remove(pull)

    def _expire(self, pc: PullConsumer, pull: PullRequest) -> None:
        self._finish(pc, pull, status(408, "Request Timeout", pull.pending))

    def _heartbeat(self, pc: PullConsumer, pull: PullRequest) -> None:
        if pull.done:
            return
        now = self.parts.clock.monotonic()
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

    def _demand(self, s: PullConsumer, now: float) -> PullTurn | float:
        """A turn, while a request whose client still listens waits."""
        while s.waiting and (s.waiting[0].done or not self.has_interest(s.waiting[0].reply)):
            self._finish(s, s.waiting[0])
        if not s.waiting:
            return 0.0
        # Requests held for their clients to read wake the loop when they may go on.
        return PullTurn() if any(not r.held for r in s.waiting) else IDLE_POLL_SECONDS

    def _choose(self, s: PullConsumer, demand: PullTurn, basis: engine.ClaimBasis) -> None:
        state = basis.loaded.state
        listening = [
            r for r in s.waiting if not r.done and not r.held and self.has_interest(r.reply)
        ]
        demand.choice = choose(
            basis.loaded.record.config,
            state,
            listening,
            basis.now_ns,
            lambda: num_pending(state, basis.filt, basis.view),
        )
        demand.pin = demand.choice.new_pin or state.pin_id
        demand.now_ns = basis.now_ns
        demand.pinned = False

    def _claimed(
        self, s: PullConsumer, demand: PullTurn, state: ConsumerState, deliveries: list[Delivery]
    ) -> None:
        if deliveries and demand.choice.new_pin:
            pin(state, demand.choice.new_pin, demand.now_ns)
            demand.pinned = True

    def _limits(self, s: PullConsumer, demand: PullTurn, basis: engine.ClaimBasis) -> engine.Limits:
        pull = demand.request
        if pull is None:
            return engine.Limits(0)
        size_of = None
        if pull.max_bytes > 0:
            pending = num_pending(basis.loaded.state, basis.filt, basis.view)
            size_of = _wire_size(s.stream, s.name, basis.view, pending)
        # nats-server hands out one message for a batch of 0 or less (and reports the batch as
        # it was sent in the request's status headers).
        batch = min(max(pull.batch, 1), CHUNK_MESSAGES)
        return engine.Limits(batch, pull.max_bytes, size_of, chunk_bytes=CHUNK_BYTES)

    def _send(
        self,
        s: PullConsumer,
        demand: PullTurn,
        cfg: ConsumerConfig,
        msgs: list[Outgoing],
        now: float,
    ) -> None:
        pull = demand.request
        if pull is None:
            raise ValueError("messages claimed for no request")
        if cfg.priority_policy == "pinned_client":
            pin_id = demand.pin.encode()
            msgs = [
                (subject, reply, append_header(headers, PIN_HEADER, pin_id), data)
                for subject, reply, headers, data in msgs
            ]
        self.deliver_many(pull.reply, msgs)
        if pull.max_bytes:
            pull.max_bytes -= sum(map(wire_size, msgs))
        pull.batch -= len(msgs)
        pull.delivered += len(msgs)
        pull.last_sent = now

    def _after(self, s: PullConsumer, demand: PullTurn, rnd: engine.Round, now: float) -> float:
        choice = demand.choice
        for refused in choice.refused:
            self._finish(s, refused, status(423, "Nats-Wrong-Pin-Id", refused.pending))
        group = (rnd.loaded.record.config.priority_groups or [""])[0]
        if choice.expired:
            self.advise(s.stream, s.name, "UNPINNED", group, reason="timeout")
        if demand.pinned:
            self.advise(s.stream, s.name, "PINNED", group, pinned_id=demand.pin)
        pull = demand.request
        if pull is None:
            return self._nothing_to_serve(rnd)
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

    async def _paced(self, s: PullConsumer, demand: PullTurn) -> None:
        """A request with more to come whose client has not read its chunk yet is held,
        rather than the loop waiting: other clients' requests are served meanwhile."""
        pull = demand.request
        if pull is None or pull.done or self.drained is None:
            return
        waiting = self.drained(pull.reply)
        if waiting is not None:
            pull.held = True
            pull.release = asyncio.get_running_loop().create_task(self._release(s, pull, waiting))

    async def _release(
        self, s: PullConsumer, pull: PullRequest, waiting: Awaitable[object] | None
    ) -> None:
        try:
            while waiting is not None and self.drained is not None:
                await waiting
                waiting = self.drained(pull.reply)
        finally:
            pull.held = False
            pull.release = None
            if not pull.done and self.active.get(s.key) is s:
                self._kick(s)

    def _nothing_to_serve(self, rnd: engine.Round) -> float:
        """No request may be served now (another client is pinned, or no overflow threshold
        is met): sleep until something falls due, the pin expiring among them."""
        now_ns = self.parts.clock.wall_ns()
        sleep = engine.until_due(rnd.loaded, now_ns, IDLE_POLL_SECONDS)
        expires = pin_expires_ns(rnd.loaded.state, rnd.loaded.record.config)
        if expires:
            sleep = min(sleep, max(0.0, (expires - now_ns) / 1e9) + 0.001)
        return sleep

    def advise(self, stream: str, name: str, kind: str, group: str, **fields: str) -> None:
        """A priority group advisory (`$JS.EVENT.ADVISORY.CONSUMER.<kind>.<stream>.<consumer>`),
        as nats-server's sendPinnedAdvisoryLocked and sendUnpinnedAdvisoryLocked send them."""
        if self.send is None:
            return
        subject = f"$JS.EVENT.ADVISORY.CONSUMER.{kind}.{stream}.{name}"
        if not self.has_interest(subject):
            return
        event = pin_advisory(self.source, kind, stream, name, group, fields)
        self.send(subject, None, event)

    def _idle(self, s: PullConsumer, pull: PullRequest, rnd: engine.Round) -> float:
        """Nothing to hand out now: answer no-wait requests, or say how long to sleep."""
        if rnd.claimed.blocked:
            self._finish(s, pull, status(409, "Message Size Exceeds MaxBytes", pull.pending))
            return 0.0
        if pull.no_wait and (pull.expires_at is None or pull.delivered):
            self._finish(s, pull, status(404, "No Messages"))
            return 0.0
        return self._nothing_to_serve(rnd)


def pin_advisory(
    source: AdvisorySource,
    kind: str,
    stream: str,
    consumer: str,
    group: str,
    fields: dict[str, str],
) -> bytes:
    """The JSON of a consumer_group_pinned or consumer_group_unpinned advisory, its fields in
    nats-server's order."""
    event: dict[str, str] = {
        "type": f"io.nats.jetstream.advisory.v1.consumer_group_{kind.lower()}",
        "id": new_pin_id(),
        "timestamp": go_time(time.time_ns()),
    }
    if source.account:
        event["account"] = source.account
    event.update(stream=stream, consumer=consumer)
    if source.domain:
        event["domain"] = source.domain
    event.update(group=group, **fields)
    return json.dumps(event, separators=(",", ":")).encode()


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
