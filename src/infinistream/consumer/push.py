"""Push consumers, served by the agent where their subscribers are.

A push consumer is a pull loop run by an agent that holds a subscriber of its deliver subject:
the loop claims messages through the same shared consumer state as pull requests (a
compare-and-set, so two agents whose clients subscribe to one deliver group never both hand out
a message, and a killed agent's unacknowledged deliveries are redelivered by another after
ack_wait) and delivers them to this agent's own subscribers. No agent sends to another agent's
clients, and nothing here outlives the subscription: a new loop starts from the shared state.

Flow control, idle heartbeats and the rate limit are between this agent and its subscribers, so
they are kept here, as nats-server keeps them per consumer (server/consumer.go deliverMsg,
needFlowControl, processFlowControl, sendIdleHeartbeat): a window of pending bytes that starts
at 2 MiB and doubles with each answered flow-control request up to 32 MiB, a request when half
of it is used, no deliveries past it until the request is answered; a heartbeat after
idle_heartbeat without a delivery, naming the last consumer and stream sequences (and the
unanswered flow-control request, if delivery is stalled on one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from infinistream.consumer.acks import AckBatcher, apply_acks, needs_durable, refuse
from infinistream.consumer.config import ConsumerConfig, pause_ns
from infinistream.consumer.delivery import move_past_damaged, outgoing, wire_size
from infinistream.consumer.directory import ConsumerId, PushDirectory
from infinistream.consumer.progress import (
    Delivery,
    Filter,
    claim,
    copy_state,
    next_deadline,
    num_ack_pending,
)
from infinistream.consumer.records import PushTarget
from infinistream.consumer.store import ConsumerGone, ConsumerStore, LoadedConsumer
from infinistream.jetstream.messages import Distribute, HasInterest
from infinistream.protocol import Outgoing
from infinistream.stream.catalog import Catalog
from infinistream.stream.damage import Damage
from infinistream.stream.reader import MessageReader
from infinistream.stream.view import StreamView

log = logging.getLogger(__name__)

MIB = 1024 * 1024
FLOW_CONTROL_MAX_PENDING = 32 * MIB  # consumer.go JsFlowControlMaxPending
CLAIM_BATCH = 256
CLAIM_BYTES = MIB
# Deliveries are woken by commits, acks, flow control and the remote-change poll; this only
# bounds how long a loop sleeps when nothing at all happens.
QUIET_SECONDS = 5.0
FLOW_CONTROL_REQUEST = b"NATS/1.0 100 FlowControl Request\r\n\r\n"


@dataclass(eq=False)
class ActivePush:
    """A push consumer this agent delivers, because one of its clients subscribes to it."""

    stream: str
    name: str
    deliver_subject: str
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    # The consumer as this agent last committed or read it.
    loaded: LoadedConsumer | None = None
    # Something other than new messages may have changed the consumer (acks, another agent):
    # the next round claims for real instead of first asking the view for new messages.
    dirty: bool = True
    # Flow control (nats-server's maxpb, pbytes, fcid, fcsz).
    window: int = FLOW_CONTROL_MAX_PENDING // 16
    pending_bytes: int = 0
    fc_reply: str | None = None
    fc_size: int = 0
    last_sent: float = field(default_factory=time.monotonic)
    # The rate limit: no delivery before this (monotonic) time.
    next_send: float = 0.0

    @property
    def stalled(self) -> bool:
        return self.fc_reply is not None and self.pending_bytes > self.window


class PushService:
    def __init__(
        self,
        store: ConsumerStore,
        catalog: Catalog,
        reader: MessageReader,
        directory: PushDirectory,
        distribute: Distribute,
        has_interest: HasInterest,
        acks: AckBatcher,
        *,
        on_delivered: Callable[[str, ConsumerConfig], Awaitable[None]],
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.reader = reader
        self.directory = directory
        self.distribute = distribute
        self.has_interest = has_interest
        self.acks = acks
        # Told after messages were handed out (interest retention of ack-none consumers).
        self.on_delivered = on_delivered
        self.active: dict[ConsumerId, ActivePush] = {}

    # -- who is served here ------------------------------------------------------------------

    def bound(self, deliver_subject: str) -> bool:
        """Whether a client of this agent subscribes to a deliver subject (push_bound)."""
        return bool(deliver_subject) and self.has_interest(deliver_subject)

    def serving(self, stream: str, name: str) -> bool:
        return (stream, name) in self.active

    def subscribed(self, subject: str) -> None:
        """A client of this agent subscribed to `subject`."""
        for cid in self.directory.delivering_to(subject):
            self._serve_if_bound(cid)

    def unsubscribed(self, subject: str) -> None:
        """A subscription to `subject` went away: its loops look whether anyone is left."""
        for cid in self.directory.delivering_to(subject):
            ap = self.active.get(cid)
            if ap is not None:
                self._kick(ap)

    def target_changed(self, stream: str, name: str, target: PushTarget | None) -> None:
        """This agent committed a consumer's new deliver subject (None: not pushed any more)."""
        self.directory.set(stream, name, target)
        ap = self.active.get((stream, name))
        if ap is not None:
            ap.dirty = True
            self._kick(ap)
        self._serve_if_bound((stream, name))

    def directory_changed(self, changed: list[ConsumerId]) -> None:
        """The directory was reread: serve new targets, let loops of dropped ones stop."""
        for cid in changed:
            self._serve_if_bound(cid)
        for cid, ap in list(self.active.items()):
            if self.directory.target(*cid) is None:
                self._kick(ap)

    def consumer_deleted(self, stream: str, name: str) -> None:
        self.directory.set(stream, name, None)
        ap = self.active.pop((stream, name), None)
        if ap is not None and ap.task is not None:
            ap.task.cancel()

    def _serve_if_bound(self, cid: ConsumerId) -> None:
        target = self.directory.target(*cid)
        if target is None or not self.has_interest(target.deliver_subject):
            return
        ap = self.active.get(cid)
        if ap is None or ap.deliver_subject != target.deliver_subject:
            # A moved deliver subject starts a new loop; the old one sees it is replaced.
            ap = self.active[cid] = ActivePush(cid[0], cid[1], target.deliver_subject)
        self._kick(ap)

    # -- waking ----------------------------------------------------------------------------

    def _kick(self, ap: ActivePush) -> None:
        ap.wake.set()
        if ap.task is None or ap.task.done():
            ap.task = asyncio.get_running_loop().create_task(self._pump(ap))

    def stream_changed(self, stream: str) -> None:
        """New messages in `stream` (or they went): its loops look again."""
        for ap in list(self.active.values()):
            if ap.stream == stream:
                self._kick(ap)

    def consumer_changed(self, stream: str, name: str, revision: int | None = None) -> None:
        """The consumer's state changed (at `revision`, if known: not if it is our own)."""
        ap = self.active.get((stream, name))
        if ap is None:
            return
        if revision is not None and ap.loaded is not None and ap.loaded.state_rev == revision:
            return
        ap.dirty = True
        self._kick(ap)

    def take_acks(self, stream: str, name: str) -> bool:
        """New acks for a consumer: its loop commits them with its next claim, if it runs."""
        ap = self.active.get((stream, name))
        if ap is None:
            return False
        ap.dirty = True
        self._kick(ap)
        return True

    def watched(self) -> list[ConsumerId]:
        return list(self.active)

    def flow_control(self, subject: str) -> bool:
        """A subscriber answered a flow-control request (`$JS.FC.<stream>.<consumer>.<id>`);
        False if no consumer delivered here listens there (as nats-server's subscription)."""
        tokens = subject.split(".")
        if len(tokens) != 5:
            return False
        ap = self.active.get((tokens[2], tokens[3]))
        if ap is None:
            return False
        if ap.fc_reply != subject:
            return True  # only the latest request counts, as in nats-server
        ap.window = min(ap.window * 2, FLOW_CONTROL_MAX_PENDING)
        ap.pending_bytes = max(0, ap.pending_bytes - ap.fc_size)
        ap.fc_reply, ap.fc_size = None, 0
        self._kick(ap)
        return True

    # -- the loop --------------------------------------------------------------------------

    async def _pump(self, ap: ActivePush) -> None:
        key = (ap.stream, ap.name)
        try:
            while self.active.get(key) is ap:
                ap.wake.clear()
                try:
                    wait_for = await self._serve(ap)
                except ConsumerGone:
                    self.consumer_deleted(ap.stream, ap.name)
                    return
                except Exception:
                    log.exception("delivering push consumer %s > %s", ap.stream, ap.name)
                    wait_for = 1.0
                if wait_for is None:
                    return
                if wait_for <= 0:
                    await asyncio.sleep(0)  # others' turn between batches
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ap.wake.wait(), wait_for)
        finally:
            if self.active.get(key) is ap:
                del self.active[key]
            # Acks left for this loop to take are committed on their own.
            self.acks.flush(key)

    async def _serve(self, ap: ActivePush) -> float | None:
        """One round: claim and deliver what there is. Seconds to sleep (0: go on at once), or
        None when nobody here subscribes any more."""
        target = self.directory.target(ap.stream, ap.name)
        if (
            target is None
            or target.deliver_subject != ap.deliver_subject
            or not self.has_interest(ap.deliver_subject)
        ):
            return None
        now = time.monotonic()
        if ap.stalled:
            return self._idle(ap, now)
        if ap.next_send > now:
            return ap.next_send - now
        view = await self.catalog.view(ap.stream)
        if view is None:
            raise ConsumerGone(ap.stream)
        now_ns = time.time_ns()
        if not ap.dirty and not self._may_have_work(ap, view, now_ns):
            return self._idle(ap, now)
        return await self._claim_and_send(ap, view, now, now_ns)

    async def _claim_and_send(
        self, ap: ActivePush, view: StreamView, now: float, now_ns: int
    ) -> float | None:
        key = (ap.stream, ap.name)
        seen: list[LoadedConsumer] = []
        moved: list[bool] = []

        def plan(loaded: LoadedConsumer) -> list[Delivery] | None:
            seen[:] = [loaded]
            acked = apply_acks(loaded, acks, now_ns)
            cfg = loaded.record.config
            if cfg.deliver_subject != ap.deliver_subject:
                moved[:] = [True]
                return [] if acked else None
            if cfg.pause_until and pause_ns(cfg) > now_ns:
                return [] if acked else None
            before = copy_state(loaded.state)
            deliveries = self._claim(ap, cfg, loaded, view, now_ns)
            if not deliveries and not acked and loaded.state == before:
                return None
            return deliveries

        async with self.store.lock(*key):
            acks = self.acks.take(key)
            try:
                # Durable only if an ack awaits its answer: a lost claim means only that its
                # messages are delivered again.
                committed = await self.store.change_state(
                    ap.stream, ap.name, plan, durable=needs_durable(acks)
                )
            except ConsumerGone:
                refuse(acks)
                raise
        loaded, deliveries = committed if committed is not None else (seen[0], [])
        ap.loaded = loaded
        ap.dirty = False
        cfg = loaded.record.config
        if deliveries:
            damaged: list[Damage] = []
            msgs = await outgoing(
                self.reader, ap.stream, ap.name, cfg, loaded.state, view, deliveries, damaged
            )
            self._send(ap, cfg, msgs, now)
            if damaged:
                move_past_damaged(
                    self.acks, self.reader.damage, ap.stream, loaded, deliveries, damaged
                )
        await self.acks.settle(loaded, acks)
        if moved:
            # Another agent moved the deliver subject; the directory will say where to.
            return None
        if deliveries:
            await self.on_delivered(ap.stream, cfg)
            return 0.0
        return self._idle(ap, now)

    def _claim(
        self,
        ap: ActivePush,
        cfg: ConsumerConfig,
        loaded: LoadedConsumer,
        view: StreamView,
        now_ns: int,
    ) -> list[Delivery]:
        budget = CLAIM_BYTES
        if cfg.flow_control:
            budget = min(budget, max(1, ap.window - ap.pending_bytes))
        if cfg.rate_limit_bps:
            # About a tenth of a second's worth at a time.
            budget = min(budget, max(1, cfg.rate_limit_bps // 80))
        filt = Filter(cfg)
        deliveries, blocked = claim(loaded.state, cfg, filt, view, now_ns, CLAIM_BATCH, budget)
        if not deliveries and blocked:
            # A message larger than the budget still goes, on its own.
            deliveries, _ = claim(loaded.state, cfg, filt, view, now_ns, 1)
        return deliveries

    def _may_have_work(self, ap: ActivePush, view: StreamView, now_ns: int) -> bool:
        """Whether a claim could hand anything out, judged from the state last seen here (only
        new messages changed since: anything else marks the loop dirty)."""
        if ap.loaded is None:
            return True
        state, cfg = ap.loaded.state, ap.loaded.record.config
        if state.start_seqs:
            return True
        deadline = next_deadline(state)
        if deadline and deadline <= now_ns:
            return True
        if cfg.pause_until and pause_ns(cfg) > now_ns:
            return False
        if (
            cfg.ack_policy != "none"
            and cfg.max_ack_pending > 0
            and num_ack_pending(state) >= cfg.max_ack_pending
        ):
            return False
        return next(iter(Filter(cfg).live_seqs(view, state.stream_seq + 1)), None) is not None

    # -- to the subscribers ------------------------------------------------------------------

    def _send(self, ap: ActivePush, cfg: ConsumerConfig, msgs: list[Outgoing], now: float) -> None:
        ap.last_sent = now
        if not cfg.rate_limit_bps and not cfg.flow_control:
            self.distribute(ap.deliver_subject, msgs)
            return
        # Only a rate limit and flow control count bytes.
        sizes = [wire_size(m) for m in msgs]
        if cfg.rate_limit_bps:
            ap.next_send = max(now, ap.next_send) + sum(sizes) * 8 / cfg.rate_limit_bps
        if not cfg.flow_control:
            self.distribute(ap.deliver_subject, msgs)
            return
        start = 0
        for i, size in enumerate(sizes):
            ap.pending_bytes += size
            if ap.fc_reply is None and ap.pending_bytes > ap.window // 2:
                # The request follows the message that crossed half the window.
                self.distribute(ap.deliver_subject, msgs[start : i + 1])
                start = i + 1
                self._request_flow_control(ap)
            elif ap.fc_reply is not None and ap.pending_bytes - ap.fc_size >= ap.window:
                ap.fc_size += size
        if start < len(msgs):
            self.distribute(ap.deliver_subject, msgs[start:])

    def _request_flow_control(self, ap: ActivePush) -> None:
        reply = f"$JS.FC.{ap.stream}.{ap.name}.{os.urandom(3).hex()}"
        ap.fc_reply, ap.fc_size = reply, ap.pending_bytes
        self.distribute(
            ap.deliver_subject, [(ap.deliver_subject, reply, FLOW_CONTROL_REQUEST, b"")]
        )

    def _idle(self, ap: ActivePush, now: float) -> float:
        """Nothing to deliver now: heartbeat if due; how long to sleep."""
        sleep = QUIET_SECONDS
        if ap.loaded is None:
            return sleep
        cfg, state = ap.loaded.record.config, ap.loaded.state
        if cfg.idle_heartbeat > 0:
            interval = cfg.idle_heartbeat / 1e9
            if now - ap.last_sent >= interval:
                self._heartbeat(ap)
                ap.last_sent = now
            sleep = min(sleep, max(0.0, ap.last_sent + interval - now))
        now_ns = time.time_ns()
        deadline = next_deadline(state)
        if deadline:
            sleep = min(sleep, max(0.0, (deadline - now_ns) / 1e9) + 0.001)
        if cfg.pause_until and pause_ns(cfg) > now_ns:
            sleep = min(sleep, (pause_ns(cfg) - now_ns) / 1e9 + 0.001)
        if ap.next_send > now:
            sleep = min(sleep, ap.next_send - now)
        return max(sleep, 0.001)

    def _heartbeat(self, ap: ActivePush) -> None:
        assert ap.loaded is not None
        state = ap.loaded.state
        header = (
            f"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: {state.consumer_seq}\r\n"
            f"Nats-Last-Stream: {state.stream_seq}\r\n"
        )
        if ap.fc_reply is not None:
            # Delivery waits on this request: a subscriber that missed it can answer now.
            header += f"Nats-Consumer-Stalled: {ap.fc_reply}\r\n"
        msg: Outgoing = (ap.deliver_subject, None, (header + "\r\n").encode(), b"")
        self.distribute(ap.deliver_subject, [msg])
