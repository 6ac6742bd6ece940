"""One delivery loop for every consumer this agent serves, pull requests and push subscribers alike.

A consumer with work here (pull requests waiting, or a client subscribed to its deliver subject)
has one loop task. Each round asks the mode what to deliver now (the oldest pull request; for a
push consumer, what flow control and the rate limit allow), claims that much with one
compare-and-set on the shared consumer state, which also commits the acks queued for the
consumer (so two agents never hand out the same message, redelivery aside, and a fetch-and-ack
cycle costs one commit), sends what it claimed, answers the acks, and sleeps until something
may have changed: a local commit to the stream, an ack, a poll that saw another agent's commit,
or the next redelivery deadline.

nats-server runs the same loop per consumer (server/consumer.go loopAndGatherMsgs, getNextMsg),
push and pull apart only where a message is addressed and what an idle consumer says; here that
difference is what `PullService` and `PushService` implement of `DeliveryEngine`.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import msgspec

from infinistream.consumer.acks import AckBatcher, Queued, apply_acks, needs_durable, refuse
from infinistream.consumer.clock import SYSTEM_CLOCK, Clock
from infinistream.consumer.config import ConsumerConfig, pause_ns
from infinistream.consumer.delivery import move_past_damaged, outgoing
from infinistream.consumer.directory import ConsumerId
from infinistream.consumer.progress import (
    Delivery,
    Filter,
    SizeOf,
    ack_wait_ns,
    awaiting,
    claim,
    copy_state,
    next_deadline,
)
from infinistream.consumer.records import ConsumerState
from infinistream.consumer.store import ConsumerGone, ConsumerStore, LoadedConsumer
from infinistream.consumer.wake import Wake
from infinistream.protocol import Outgoing
from infinistream.stream.catalog import Catalog
from infinistream.stream.reader import MessageReader
from infinistream.stream.view import StreamView

log = logging.getLogger(__name__)

# How long a loop waits after an unexpected error before it tries again.
ERROR_PAUSE_SECONDS = 1.0
# Slept past a redelivery deadline or the end of a pause, so that the round after it finds it due.
DUE_MARGIN_SECONDS = 0.001

OnDelivered = Callable[[str, ConsumerConfig], Awaitable[None]]


@dataclass(eq=False, kw_only=True)
class Served:
    """A consumer this agent delivers for: its loop and what the loop last saw of it."""

    stream: str
    name: str
    wake: Wake = field(default_factory=Wake)
    task: asyncio.Task[None] | None = None
    # The consumer as this agent last committed or read it.
    loaded: LoadedConsumer | None = None
    # Something other than new messages may have changed the consumer (acks, another agent):
    # the next round claims for real instead of asking the mode whether it may skip.
    dirty: bool = True

    @property
    def key(self) -> ConsumerId:
        return (self.stream, self.name)


@dataclass(frozen=True, slots=True)
class Limits:
    """How much one claim may hand out."""

    batch: int
    # Bytes, as `size_of` counts them (without it, the stored record); 0: no limit.
    max_bytes: int = 0
    size_of: SizeOf | None = None
    # A first message over max_bytes goes on its own, rather than stopping the claim.
    oversize_alone: bool = False
    # Bytes one claim reads and sends at most (its first message aside), however much the
    # demand allows: the rest is claimed by the rounds after; 0: no limit.
    chunk_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Claimed:
    """What one claim decided, in the consumer state it edited."""

    deliveries: list[Delivery]
    # max_bytes stopped the claim before its batch was full.
    blocked: bool = False
    # The consumer is no longer the one this loop serves (a push consumer moved elsewhere).
    stale: bool = False
    # The state changed (deliveries, acks, pending messages gone or past max_deliver).
    changed: bool = False
    # The wall-clock time the claim was planned at: its deliveries' ack wait runs from it.
    planned_ns: int = 0


def _changes_state(claimed: Claimed) -> bool:
    return claimed.changed


@dataclass(frozen=True, slots=True)
class Round:
    """One claim, committed (or found to change nothing)."""

    loaded: LoadedConsumer
    claimed: Claimed
    # The acks the claim committed, to be answered.
    acks: list[Queued]

    @property
    def deliveries(self) -> list[Delivery]:
        return self.claimed.deliveries


@dataclass(frozen=True, slots=True)
class ClaimBasis:
    """What a claim is planned from: the consumer as just read, its filter, the stream's view,
    and the wall-clock time it runs at."""

    loaded: LoadedConsumer
    filt: Filter
    view: StreamView
    now_ns: int


S = TypeVar("S", bound=Served)
D = TypeVar("D")


@dataclass(frozen=True)
class EngineParts:
    """What the loops of both modes work with."""

    store: ConsumerStore
    catalog: Catalog
    reader: MessageReader
    acks: AckBatcher
    # Told after messages were handed out (interest retention of ack-none consumers).
    on_delivered: OnDelivered
    clock: Clock = SYSTEM_CLOCK


class DeliveryEngine(ABC, Generic[S, D]):
    """The loops of the consumers one mode serves on this agent.

    `S` is what the mode keeps of a consumer it serves; `D` what one round delivers to (a pull
    request, or the push consumer's subscribers). The hooks are the mode's part of a round.
    """

    def __init__(self, parts: EngineParts) -> None:
        self.parts = parts
        self.active: dict[ConsumerId, S] = {}

    # -- the mode's part -------------------------------------------------------------------

    @abstractmethod
    def _busy(self, s: S) -> bool:
        """Whether anything is left to serve for `s` here."""

    @abstractmethod
    def _demand(self, s: S, now: float) -> D | float:
        """What this round delivers to; or seconds to wait before a round claims anything."""

    def _skip(self, s: S, view: StreamView, now: float, now_ns: int) -> float | None:
        """Seconds to wait, when a claim is sure to hand out nothing; None to claim."""
        return None

    def _accepts(self, s: S, cfg: ConsumerConfig) -> bool:
        """Whether the consumer, as just read, is still the one `s` serves."""
        return True

    def _choose(self, s: S, demand: D, basis: ClaimBasis) -> None:
        """Decide, from the consumer as just read, what in `demand` this claim serves (pull
        requests by priority policy); may change the state (a pin that expired)."""

    def _claimed(self, s: S, demand: D, state: ConsumerState, deliveries: list[Delivery]) -> None:
        """What the claim handed out changes in the state besides (a new pin)."""

    @abstractmethod
    def _limits(self, s: S, demand: D, basis: ClaimBasis) -> Limits:
        """How much this round may claim for `demand`, from the consumer as just read."""

    @abstractmethod
    def _send(self, s: S, demand: D, cfg: ConsumerConfig, msgs: list[Outgoing], now: float) -> None:
        """Put claimed messages on the wire."""

    @abstractmethod
    def _after(self, s: S, demand: D, rnd: Round, now: float) -> float:
        """Once a round is done: seconds to wait (0: go on at once)."""

    async def _paced(self, s: S, demand: D) -> None:
        """After a round that sent messages and goes on at once: pace what is read and sent
        next to how fast its receivers read (the mode may wait, or set the demand aside)."""

    # -- waking ----------------------------------------------------------------------------

    def _serving(self, s: S) -> bool:
        return self.active.get(s.key) is s and self._busy(s)

    def _kick(self, s: S) -> None:
        s.wake.set()
        if s.task is None or s.task.done():
            s.task = asyncio.get_running_loop().create_task(self._run(s))

    def stream_changed(self, stream: str) -> None:
        """New messages in `stream` (or they went): its loops look again."""
        for s in list(self.active.values()):
            if s.stream == stream and self._busy(s):
                self._kick(s)

    def consumer_changed(self, stream: str, name: str, revision: int | None = None) -> None:
        """The consumer's state changed (at `revision`, if known: not if it is this agent's own
        last commit)."""
        s = self.active.get((stream, name))
        if s is None or not self._busy(s):
            return
        if revision is not None and s.loaded is not None and s.loaded.state_rev == revision:
            return
        s.dirty = True
        self._kick(s)

    def take_acks(self, stream: str, name: str) -> bool:
        """New acks for a consumer: its loop commits them with its next claim, if it runs."""
        s = self.active.get((stream, name))
        if s is None or not self._busy(s):
            return False
        s.dirty = True
        self._kick(s)
        return True

    def watched(self) -> list[ConsumerId]:
        """The consumers whose changes by other agents must wake a loop here."""
        return [key for key, s in self.active.items() if self._busy(s)]

    def consumer_deleted(self, stream: str, name: str) -> S | None:
        """The consumer is gone: its loop stops. What was served, if anything."""
        s = self.active.pop((stream, name), None)
        if s is not None and s.task is not None:
            s.task.cancel()
        return s

    # -- the loop --------------------------------------------------------------------------

    async def _run(self, s: S) -> None:
        try:
            while self._serving(s):
                s.wake.clear()
                try:
                    wait = await self._round(s)
                except ConsumerGone:
                    self.consumer_deleted(s.stream, s.name)
                    return
                except Exception:
                    log.exception("delivering for consumer %s > %s", s.stream, s.name)
                    wait = ERROR_PAUSE_SECONDS
                if wait > 0:
                    await s.wake.wait(wait)
                elif self._serving(s):
                    await asyncio.sleep(0)  # others' turn between batches
        finally:
            if self.active.get(s.key) is s and not self._busy(s):
                del self.active[s.key]
            # Acks left for this loop to take are committed on their own.
            self.parts.acks.flush(s.key)

    async def _round(self, s: S) -> float:
        """Claim and deliver what there is; seconds to wait before the next round."""
        now = self.parts.clock.monotonic()
        demand = self._demand(s, now)
        if isinstance(demand, (int, float)):
            return demand
        view = await self.parts.catalog.view(s.stream)
        if view is None:
            raise ConsumerGone(s.stream)
        now_ns = self.parts.clock.wall_ns()
        # The view reads what its questions need of the stream's index (catalog.answer).
        skip = await self.parts.catalog.answer(lambda: self._skip(s, view, now, now_ns))
        if skip is not None:
            return skip
        rnd = await self._claim(s, demand, view)
        s.loaded, s.dirty = rnd.loaded, False
        cfg = rnd.loaded.record.config
        if rnd.deliveries:
            out = await self.parts.catalog.answer_async(
                lambda: outgoing(
                    self.parts.reader, s.stream, s.name, cfg, rnd.loaded.state, view, rnd.deliveries
                )
            )
            messages = out.messages
            late = _late(
                rnd.loaded, out.deliveries, rnd.claimed.planned_ns, self.parts.clock.wall_ns()
            )
            if late:
                mine = {d.consumer_seq for d in await self._renew(s, out.deliveries)}
                messages = [
                    m
                    for m, d in zip(messages, out.deliveries, strict=True)
                    if d.consumer_seq in mine
                ]
            self._send(s, demand, cfg, messages, now)
            if out.damaged:
                move_past_damaged(
                    self.parts.acks,
                    self.parts.reader.damage,
                    s.stream,
                    rnd.loaded,
                    rnd.deliveries,
                    out.damaged,
                )
        await self.parts.acks.settle(rnd.loaded, rnd.acks)
        if rnd.deliveries:
            await self.parts.on_delivered(s.stream, cfg)
        wait = self._after(s, demand, rnd, now)
        if rnd.deliveries and wait <= 0:
            await self._paced(s, demand)
        return wait

    async def _claim(self, s: S, demand: D, view: StreamView) -> Round:
        """Claim under the consumer's lock, committing the acks queued for it in the same
        transaction: applied first, they free max_ack_pending room for the claim.

        Each attempt reads the clock as it plans: the lock, the stream's index being read
        (`answer_async` runs the claim again after it) or a conflict may hold a claim up for
        longer than the ack wait its deliveries get from that time."""
        async with self.parts.store.lock(*s.key):
            acks = self.parts.acks.take(s.key)

            def plan(loaded: LoadedConsumer) -> Claimed:
                return self._plan(s, demand, loaded, view, acks, self.parts.clock.wall_ns())

            try:
                # Durable only if an ack awaits its answer: a lost claim means only that its
                # messages are delivered again.
                changed = await self.parts.catalog.answer_async(
                    lambda: self.parts.store.change_state(
                        s.stream, s.name, plan, durable=needs_durable(acks), writes=_changes_state
                    )
                )
            except ConsumerGone:
                refuse(acks)
                raise
        return Round(changed.loaded, changed.result, acks)

    async def _renew(self, s: S, deliveries: list[Delivery]) -> list[Delivery]:
        """Start the ack wait of `deliveries` again from now, as they go out late; the ones
        still this claim's (not acked, nor handed out again by another agent meanwhile)."""
        now_ns = self.parts.clock.wall_ns()

        def renew(loaded: LoadedConsumer) -> list[Delivery]:
            cfg, pending = loaded.record.config, loaded.state.pending
            mine = []
            for d in deliveries:
                entry = pending.get(d.stream_seq)
                if entry is None or entry.consumer_seq != d.consumer_seq or not awaiting(entry):
                    continue
                deadline = now_ns + ack_wait_ns(cfg, entry.deliveries)
                pending[d.stream_seq] = msgspec.structs.replace(entry, deadline=deadline, ts=now_ns)
                mine.append(d)
            return mine

        async with self.parts.store.lock(*s.key):
            changed = await self.parts.store.change_state(
                s.stream, s.name, renew, durable=False, writes=bool
            )
        s.loaded = changed.loaded
        return changed.result

    def _plan(
        self,
        s: S,
        demand: D,
        loaded: LoadedConsumer,
        view: StreamView,
        acks: list[Queued],
        now_ns: int,
    ) -> Claimed:
        acked = apply_acks(loaded, acks, now_ns)
        cfg = loaded.record.config
        if not self._accepts(s, cfg):
            return Claimed([], stale=True, changed=acked)
        filt = Filter(cfg)
        state = loaded.state
        before = copy_state(state)
        basis = ClaimBasis(loaded, filt, view, now_ns)
        self._choose(s, demand, basis)
        if cfg.pause_until and paused(cfg, now_ns):
            return Claimed([], changed=acked or state != before)
        limits = self._limits(s, demand, basis)
        deliveries, blocked = claim(
            state,
            cfg,
            filt,
            view,
            now_ns,
            limits.batch,
            limits.max_bytes,
            limits.size_of,
            limits.chunk_bytes,
        )
        if blocked and not deliveries and limits.oversize_alone:
            deliveries, blocked = claim(state, cfg, filt, view, now_ns, 1)
        self._claimed(s, demand, state, deliveries)
        # A state that changed with nothing handed out is committed too (messages past
        # max_deliver or gone from the stream leave pending): until then CONSUMER.INFO and
        # retention would not see it, as the claim would be redone and thrown away.
        return Claimed(
            deliveries,
            blocked,
            changed=bool(deliveries) or acked or state != before,
            planned_ns=now_ns,
        )


def _late(loaded: LoadedConsumer, deliveries: list[Delivery], planned_ns: int, now_ns: int) -> bool:
    """Whether a claim planned at `planned_ns` goes out so late that less than half the ack
    wait of some of its `deliveries` is left (a busy agent: the consumer's lock, the commit,
    reading the messages).

    Their ack wait ran from when the claim was planned: once it is over, another agent hands
    them out again, and the client could get a message twice, the copy after its ack was
    confirmed (nats-server starts the ack wait as it sends a message).
    """
    cfg = loaded.record.config
    if cfg.ack_policy == "none" or not deliveries:
        return False
    if not cfg.backoff:
        # One ack wait for every delivery, which the claim started at the time it was
        # planned: nothing per message to look at.
        return planned_ns + cfg.ack_wait - now_ns < cfg.ack_wait // 2
    pending = loaded.state.pending
    for d in deliveries:
        entry = pending.get(d.stream_seq)
        if entry is not None and entry.deadline - now_ns < ack_wait_ns(cfg, d.deliveries) // 2:
            return True
    return False


def paused(cfg: ConsumerConfig, now_ns: int) -> bool:
    return pause_ns(cfg) > now_ns


def until_due(loaded: LoadedConsumer, now_ns: int, longest: float) -> float:
    """Seconds until a redelivery falls due or a pause ends; at most `longest`."""
    sleep = longest
    deadline = next_deadline(loaded.state)
    if deadline:
        sleep = min(sleep, max(0.0, (deadline - now_ns) / 1e9) + DUE_MARGIN_SECONDS)
    cfg = loaded.record.config
    if cfg.pause_until and paused(cfg, now_ns):
        sleep = min(sleep, (pause_ns(cfg) - now_ns) / 1e9 + DUE_MARGIN_SECONDS)
    return sleep
