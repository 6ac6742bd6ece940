"""Pull requests waiting on this agent, and the pump that serves them.

A `CONSUMER.MSG.NEXT` request waits here until it has its batch, its max_bytes, or its expiry.
Each consumer with waiting requests has one pump task: it claims messages for the oldest
request with a compare-and-set on the consumer state (so two agents never hand out the same
message, redelivery aside), delivers them, and sleeps until something may have changed: a local
commit to the stream, a poll that saw another agent's commit or ack, or the next redelivery
deadline. Status messages are nats-server's (server/consumer.go processNextMsgRequest,
processWaiting).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

from infinistream.consumer.acks import AckBatcher, apply_acks, needs_durable, refuse
from infinistream.consumer.config import ConsumerConfig, NextRequest, pause_ns
from infinistream.consumer.delivery import move_past_damaged, outgoing, wire_size
from infinistream.consumer.progress import (
    Delivery,
    Filter,
    SizeOf,
    claim,
    copy_state,
    next_deadline,
    num_pending,
)
from infinistream.consumer.store import ConsumerGone, ConsumerStore, LoadedConsumer
from infinistream.jetstream.messages import DeliverMany, HasInterest, status
from infinistream.storage.segment import RECORD_HEADER_SIZE
from infinistream.stream.catalog import Catalog
from infinistream.stream.damage import Damage
from infinistream.stream.reader import MessageReader
from infinistream.stream.view import StreamView

log = logging.getLogger(__name__)


IDLE_POLL_SECONDS = 0.25


@dataclass(eq=False)
class PullRequest:
    reply: str
    batch: int
    max_bytes: int
    no_wait: bool
    expires_at: float | None  # loop time
    heartbeat: float
    delivered: int = 0
    done: bool = False
    last_sent: float = field(default_factory=time.monotonic)
    timers: list[asyncio.TimerHandle] = field(default_factory=list)

    @property
    def pending(self) -> tuple[int, int]:
        return (self.batch, self.max_bytes)


class ActiveConsumer:
    """A consumer with requests waiting on this agent."""

    def __init__(self, stream: str, name: str) -> None:
        self.stream = stream
        self.name = name
        self.waiting: deque[PullRequest] = deque()
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


class PullService:
    def __init__(
        self,
        store: ConsumerStore,
        catalog: Catalog,
        reader: MessageReader,
        deliver_many: DeliverMany,
        has_interest: HasInterest,
        acks: AckBatcher,
        *,
        on_delivered: Callable[[str, ConsumerConfig], Awaitable[None]],
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.reader = reader
        self.deliver_many = deliver_many
        self.has_interest = has_interest
        self.acks = acks
        self.active: dict[tuple[str, str], ActiveConsumer] = {}
        # Told after messages were handed out (interest retention of ack-none consumers).
        self.on_delivered = on_delivered

    def waiting_count(self, stream: str, name: str) -> int:
        ac = self.active.get((stream, name))
        return len(ac.waiting) if ac is not None else 0

    # -- requests --------------------------------------------------------------------------

    def add(
        self, stream: str, name: str, cfg: ConsumerConfig, req: NextRequest, reply: str
    ) -> None:
        """Queue a validated MSG.NEXT request; its answers go to `reply`."""
        key = (stream, name)
        ac = self.active.get(key)
        if ac is None:
            ac = self.active[key] = ActiveConsumer(stream, name)
        if cfg.max_waiting > 0 and len(ac.waiting) >= cfg.max_waiting:
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
        )
        if expires_at is not None:
            pull.timers.append(loop.call_at(expires_at, self._expire, ac, pull))
        if pull.heartbeat > 0:
            pull.timers.append(loop.call_later(pull.heartbeat, self._heartbeat, ac, pull))
        ac.waiting.append(pull)
        self._kick(ac)

    def _tell(self, reply: str, status_headers: bytes) -> None:
        """A status message (no payload) to a request's inbox."""
        self.deliver_many(reply, [(reply, None, status_headers, b"")])

    def _finish(self, ac: ActiveConsumer, pull: PullRequest, answer: bytes | None = None) -> None:
        if pull.done:
            return
        pull.done = True
        for timer in pull.timers:
            timer.cancel()
        if answer is not None:
            self._tell(pull.reply, answer)
        with contextlib.suppress(ValueError):
            ac.waiting.remove(pull)

    def _expire(self, ac: ActiveConsumer, pull: PullRequest) -> None:
        self._finish(ac, pull, status(408, "Request Timeout", pull.pending))

    def _heartbeat(self, ac: ActiveConsumer, pull: PullRequest) -> None:
        if pull.done:
            return
        now = time.monotonic()
        if now - pull.last_sent >= pull.heartbeat * 0.9:
            self._tell(pull.reply, status(100, "Idle Heartbeat"))
            pull.last_sent = now
        loop = asyncio.get_running_loop()
        pull.timers.append(loop.call_later(pull.heartbeat, self._heartbeat, ac, pull))

    def consumer_deleted(self, stream: str, name: str) -> None:
        ac = self.active.pop((stream, name), None)
        if ac is None:
            return
        for pull in list(ac.waiting):
            self._finish(ac, pull, status(409, "Consumer Deleted"))
        if ac.task is not None:
            ac.task.cancel()

    # -- waking ----------------------------------------------------------------------------

    def _kick(self, ac: ActiveConsumer) -> None:
        ac.wake.set()
        if ac.task is None or ac.task.done():
            ac.task = asyncio.get_running_loop().create_task(self._pump(ac))

    def stream_changed(self, stream: str) -> None:
        """New messages or acks for `stream`: let its waiting consumers look again."""
        for ac in list(self.active.values()):
            if ac.stream == stream and ac.waiting:
                self._kick(ac)

    def consumer_changed(self, stream: str, name: str) -> None:
        ac = self.active.get((stream, name))
        if ac is not None and ac.waiting:
            self._kick(ac)

    def take_acks(self, stream: str, name: str) -> bool:
        """New acks for a consumer: its pump commits them with its next claim, if it runs."""
        ac = self.active.get((stream, name))
        if ac is None or not ac.waiting:
            return False
        self._kick(ac)
        return True

    def watched(self) -> list[ActiveConsumer]:
        return [ac for ac in self.active.values() if ac.waiting]

    # -- the pump --------------------------------------------------------------------------

    async def _pump(self, ac: ActiveConsumer) -> None:
        try:
            while ac.waiting:
                ac.wake.clear()
                try:
                    wait_for = await self._serve(ac)
                except ConsumerGone:
                    self.consumer_deleted(ac.stream, ac.name)
                    return
                except Exception:
                    log.exception("serving pull requests of %s > %s", ac.stream, ac.name)
                    wait_for = 1.0
                if not ac.waiting:
                    break
                if wait_for is None:
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ac.wake.wait(), wait_for)
        finally:
            if not ac.waiting and self.active.get((ac.stream, ac.name)) is ac:
                del self.active[(ac.stream, ac.name)]
            # Acks left for this pump to take are committed on their own.
            self.acks.flush((ac.stream, ac.name))

    async def _serve(self, ac: ActiveConsumer) -> float | None:
        """Serve the oldest request once; seconds to sleep before trying again (None: now).

        The acks queued for the consumer go into the same commit as the claim: they are
        applied first, so they free max_ack_pending room for it.
        """
        while ac.waiting and (ac.waiting[0].done or not self.has_interest(ac.waiting[0].reply)):
            self._finish(ac, ac.waiting[0])
        if not ac.waiting:
            return None
        pull = ac.waiting[0]
        view = await self.catalog.view(ac.stream)
        if view is None:
            raise ConsumerGone(ac.stream)
        now_ns = time.time_ns()
        outcome: dict[str, object] = {}

        def plan(loaded: LoadedConsumer) -> list[Delivery] | None:
            outcome["loaded"] = loaded
            acked = apply_acks(loaded, acks, now_ns)
            cfg = loaded.record.config
            if cfg.pause_until and _paused(cfg, now_ns):
                return [] if acked else None
            filt = Filter(cfg)
            size_of = None
            if pull.max_bytes > 0:
                size_of = _wire_size(ac, view, num_pending(loaded.state, filt, view))
            before = copy_state(loaded.state)
            # nats-server hands out one message for a batch of 0 or less (and reports the
            # batch as it was sent in the request's status headers).
            batch = max(pull.batch, 1)
            deliveries, blocked = claim(
                loaded.state, cfg, filt, view, now_ns, batch, pull.max_bytes, size_of
            )
            outcome["blocked"] = blocked
            # Commit a state that changed with nothing handed out too (messages past
            # max_deliver or gone from the stream leave pending): until then CONSUMER.INFO
            # and retention would not see it, as the claim would be redone and thrown away.
            if not deliveries and not acked and loaded.state == before:
                return None
            return deliveries

        async with self.store.lock(ac.stream, ac.name):
            acks = self.acks.take((ac.stream, ac.name))
            try:
                # Durable only if an ack awaits its answer: a lost claim means only that its
                # messages are delivered again.
                committed = await self.store.change_state(
                    ac.stream, ac.name, plan, durable=needs_durable(acks)
                )
            except ConsumerGone:
                refuse(acks)
                raise
        if committed is not None:
            loaded, deliveries = committed
        else:
            loaded, deliveries = cast(LoadedConsumer, outcome["loaded"]), []
        if deliveries:
            await self._send(ac.stream, loaded, pull, view, deliveries)
        await self.acks.settle(loaded, acks)
        if not deliveries:
            return self._idle(ac, pull, loaded, bool(outcome.get("blocked")), now_ns)
        await self.on_delivered(ac.stream, loaded.record.config)
        if pull.batch <= 0 and pull.max_bytes > 0:
            # nats-server tells a request that asked for bytes that its batch is done first.
            self._finish(ac, pull, status(409, "Batch Completed", (0, pull.max_bytes)))
        elif pull.batch <= 0 or (pull.max_bytes and pull.max_bytes <= 0):
            self._finish(ac, pull)
        elif outcome.get("blocked"):
            self._finish(ac, pull, status(409, "Message Size Exceeds MaxBytes", pull.pending))
        return None

    def _idle(
        self,
        ac: ActiveConsumer,
        pull: PullRequest,
        loaded: LoadedConsumer,
        blocked: bool,
        now_ns: int,
    ) -> float:
        """Nothing to hand out now: answer no-wait requests, or say how long to sleep."""
        if blocked:
            self._finish(ac, pull, status(409, "Message Size Exceeds MaxBytes", pull.pending))
            return 0.0
        if pull.no_wait and (pull.expires_at is None or pull.delivered):
            self._finish(ac, pull, status(404, "No Messages"))
            return 0.0
        cfg = loaded.record.config
        sleep = IDLE_POLL_SECONDS
        deadline = next_deadline(loaded.state)
        if deadline:
            sleep = min(sleep, max(0.0, (deadline - now_ns) / 1e9) + 0.001)
        if cfg.pause_until and _paused(cfg, now_ns):
            sleep = min(sleep, max(0.0, (pause_ns(cfg) - now_ns) / 1e9) + 0.001)
        return sleep

    async def _send(
        self,
        stream: str,
        loaded: LoadedConsumer,
        pull: PullRequest,
        view: StreamView,
        deliveries: list[Delivery],
    ) -> None:
        cfg = loaded.record.config
        damaged: list[Damage] = []
        batch = await outgoing(
            self.reader, stream, loaded.name, cfg, loaded.state, view, deliveries, damaged
        )
        self.deliver_many(pull.reply, batch)
        if pull.max_bytes:
            pull.max_bytes -= sum(map(wire_size, batch))
        pull.batch -= len(batch)
        pull.delivered += len(batch)
        pull.last_sent = time.monotonic()
        if damaged:
            move_past_damaged(self.acks, self.reader.damage, stream, loaded, deliveries, damaged)


def _wire_size(ac: ActiveConsumer, view: StreamView, pending_before: int) -> SizeOf:
    """A delivery's size as nats-server counts it for max_bytes, from the view alone.

    Subject, headers and data (the stored record less its frame header) plus the ack reply
    `_send` will build. For headers_only consumers this is the full message: the view does
    not split headers from data, and `_send` then charges what was actually sent.
    """
    prefix = len(f"$JS.ACK.{ac.stream}.{ac.name}.") + 4  # and the dots between the numbers

    def size_of(seq: int, deliveries: int, consumer_seq: int, fresh: int) -> int:
        pending = max(pending_before - fresh - (1 if deliveries == 1 else 0), 0)
        numbers = (deliveries, seq, consumer_seq, view.ts_of(seq), pending)
        ack_len = prefix + sum(len(str(n)) for n in numbers)
        return view.size_of(seq) - RECORD_HEADER_SIZE + ack_len

    return size_of


def _paused(cfg: ConsumerConfig, now_ns: int) -> bool:
    return pause_ns(cfg) > now_ns
