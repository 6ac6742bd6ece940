"""Push consumers, served by the agent where their subscribers are.

A push consumer is served by the delivery loop that serves pull requests (engine.py), run by an
agent that holds a subscriber of its deliver subject: it claims messages through the same
shared consumer state (a compare-and-set, so two agents whose clients subscribe to one deliver
group never both hand out a message, and a killed agent's unacknowledged deliveries are
redelivered by another after ack_wait) and delivers them to this agent's own subscribers. No
agent sends to another agent's clients, and nothing here outlives the subscription: a new loop
starts from the shared state.

Flow control, idle heartbeats and the rate limit are between this agent and its subscribers, so
they are kept here, as nats-server keeps them per consumer (server/consumer.go deliverMsg,
needFlowControl, processFlowControl, sendIdleHeartbeat): a window of pending bytes that starts
at 2 MiB and doubles with each answered flow-control request up to 32 MiB, a request when half
of it is used, no deliveries past it until the request is answered; a heartbeat after
idle_heartbeat without a delivery, naming the last consumer and stream sequences (and the
unanswered flow-control request, if delivery is stalled on one).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from infinistream.consumer import engine
from infinistream.consumer.config import ConsumerConfig
from infinistream.consumer.delivery import wire_size
from infinistream.consumer.directory import ConsumerId, PushDirectory
from infinistream.consumer.progress import Filter, next_deadline, num_ack_pending
from infinistream.consumer.records import PushTarget
from infinistream.consumer.store import LoadedConsumer
from infinistream.jetstream.messages import Distribute, HasInterest
from infinistream.protocol import Outgoing
from infinistream.stream.view import StreamView

MIB = 1024 * 1024
FLOW_CONTROL_MAX_PENDING = 32 * MIB  # consumer.go JsFlowControlMaxPending
CLAIM_BATCH = 256
CLAIM_BYTES = MIB
# Deliveries are woken by commits, acks, flow control and the remote-change poll; this only
# bounds how long a loop sleeps when nothing at all happens.
QUIET_SECONDS = 5.0
# The shortest sleep of an idle loop (a heartbeat or a deadline due now).
MIN_IDLE_SECONDS = 0.001
FLOW_CONTROL_REQUEST = b"NATS/1.0 100 FlowControl Request\r\n\r\n"


@dataclass(eq=False, kw_only=True)
class PushConsumer(engine.Served):
    """A push consumer this agent delivers, because one of its clients subscribes to it."""

    deliver_subject: str
    # Nobody here subscribes any more, or the consumer delivers elsewhere now: the loop ends,
    # and a subscriber that comes back gets a new one.
    stopped: bool = False
    # Flow control (nats-server's maxpb, pbytes, fcid, fcsz).
    window: int = FLOW_CONTROL_MAX_PENDING // 16
    pending_bytes: int = 0
    fc_reply: str | None = None
    fc_size: int = 0
    # When something was last sent to the subscribers (monotonic), for idle heartbeats.
    last_sent: float = 0.0
    # The rate limit: no delivery before this (monotonic) time.
    next_send: float = 0.0

    @property
    def stalled(self) -> bool:
        return self.fc_reply is not None and self.pending_bytes > self.window


class PushService(engine.DeliveryEngine[PushConsumer, PushConsumer]):
    def __init__(
        self,
        parts: engine.EngineParts,
        directory: PushDirectory,
        distribute: Distribute,
        has_interest: HasInterest,
    ) -> None:
        super().__init__(parts)
        self.directory = directory
        self.distribute = distribute
        self.has_interest = has_interest

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
            pc = self.active.get(cid)
            if pc is not None:
                self._kick(pc)

    def target_changed(self, stream: str, name: str, target: PushTarget | None) -> None:
        """This agent committed a consumer's new deliver subject (None: not pushed any more)."""
        self.directory.set(stream, name, target)
        pc = self.active.get((stream, name))
        if pc is not None:
            pc.dirty = True
            self._kick(pc)
        self._serve_if_bound((stream, name))

    def directory_changed(self, changed: list[ConsumerId]) -> None:
        """The directory was reread: serve new targets, let loops of dropped ones stop."""
        for cid in changed:
            self._serve_if_bound(cid)
        for cid, pc in list(self.active.items()):
            if self.directory.target(*cid) is None:
                self._kick(pc)

    def consumer_deleted(self, stream: str, name: str) -> PushConsumer | None:
        self.directory.set(stream, name, None)
        return super().consumer_deleted(stream, name)

    def _serve_if_bound(self, cid: ConsumerId) -> None:
        target = self.directory.target(*cid)
        if target is None or not self.has_interest(target.deliver_subject):
            return
        pc = self.active.get(cid)
        if pc is None or pc.stopped or pc.deliver_subject != target.deliver_subject:
            # A moved deliver subject starts a new loop; the old one sees it is replaced.
            pc = self.active[cid] = PushConsumer(
                stream=cid[0],
                name=cid[1],
                deliver_subject=target.deliver_subject,
                last_sent=self.parts.clock.monotonic(),
            )
        self._kick(pc)

    def flow_control(self, subject: str) -> bool:
        """A subscriber answered a flow-control request (`$JS.FC.<stream>.<consumer>.<id>`);
        False if no consumer delivered here listens there (as nats-server's subscription)."""
        tokens = subject.split(".")
        if len(tokens) != 5:
            return False
        pc = self.active.get((tokens[2], tokens[3]))
        if pc is None:
            return False
        if pc.fc_reply != subject:
            return True  # only the latest request counts, as in nats-server
        pc.window = min(pc.window * 2, FLOW_CONTROL_MAX_PENDING)
        pc.pending_bytes = max(0, pc.pending_bytes - pc.fc_size)
        pc.fc_reply, pc.fc_size = None, 0
        self._kick(pc)
        return True

    # -- the engine's push edge ------------------------------------------------------------

    def _busy(self, s: PushConsumer) -> bool:
        return not s.stopped

    def _demand(self, s: PushConsumer, now: float) -> PushConsumer | float:
        """The subscribers, unless nobody here subscribes any more (the loop then stops), flow
        control stalls delivery, or the rate limit holds it back."""
        target = self.directory.target(s.stream, s.name)
        if (
            target is None
            or target.deliver_subject != s.deliver_subject
            or not self.has_interest(s.deliver_subject)
        ):
            s.stopped = True
            return 0.0
        if s.stalled:
            return self._idle(s, now)
        if s.next_send > now:
            return s.next_send - now
        return s

    def _skip(self, s: PushConsumer, view: StreamView, now: float, now_ns: int) -> float | None:
        if s.dirty or self._may_have_work(s, view, now_ns):
            return None
        return self._idle(s, now)

    def _may_have_work(self, s: PushConsumer, view: StreamView, now_ns: int) -> bool:
        """Whether a claim could hand anything out, judged from the state last seen here (only
        new messages changed since: anything else marks the loop dirty)."""
        if s.loaded is None:
            return True
        state, cfg = s.loaded.state, s.loaded.record.config
        if state.start_seqs:
            return True
        deadline = next_deadline(state)
        if deadline and deadline <= now_ns:
            return True
        if cfg.pause_until and engine.paused(cfg, now_ns):
            return False
        if (
            cfg.ack_policy != "none"
            and cfg.max_ack_pending > 0
            and num_ack_pending(state) >= cfg.max_ack_pending
        ):
            return False
        return next(iter(Filter(cfg).live_seqs(view, state.stream_seq + 1)), None) is not None

    def _accepts(self, s: PushConsumer, cfg: ConsumerConfig) -> bool:
        # Another agent may have moved the deliver subject; the directory will say where to.
        return cfg.deliver_subject == s.deliver_subject

    def _limits(
        self, s: PushConsumer, demand: PushConsumer, basis: engine.ClaimBasis
    ) -> engine.Limits:
        cfg = basis.loaded.record.config
        budget = CLAIM_BYTES
        if cfg.flow_control:
            budget = min(budget, max(1, s.window - s.pending_bytes))
        if cfg.rate_limit_bps:
            # About a tenth of a second's worth at a time.
            budget = min(budget, max(1, cfg.rate_limit_bps // 80))
        return engine.Limits(CLAIM_BATCH, budget, oversize_alone=True)

    def _after(self, s: PushConsumer, demand: PushConsumer, rnd: engine.Round, now: float) -> float:
        if rnd.claimed.stale:
            s.stopped = True
            return 0.0
        if rnd.deliveries:
            return 0.0
        return self._idle(s, now)

    # -- to the subscribers ------------------------------------------------------------------

    def _send(
        self,
        s: PushConsumer,
        demand: PushConsumer,
        cfg: ConsumerConfig,
        msgs: list[Outgoing],
        now: float,
    ) -> None:
        s.last_sent = now
        if not cfg.rate_limit_bps and not cfg.flow_control:
            self.distribute(s.deliver_subject, msgs)
            return
        # Only a rate limit and flow control count bytes.
        sizes = [wire_size(m) for m in msgs]
        if cfg.rate_limit_bps:
            s.next_send = max(now, s.next_send) + sum(sizes) * 8 / cfg.rate_limit_bps
        if not cfg.flow_control:
            self.distribute(s.deliver_subject, msgs)
            return
        start = 0
        for i, size in enumerate(sizes):
            s.pending_bytes += size
            if s.fc_reply is None and s.pending_bytes > s.window // 2:
                # The request follows the message that crossed half the window.
                self.distribute(s.deliver_subject, msgs[start : i + 1])
                start = i + 1
                self._request_flow_control(s)
            elif s.fc_reply is not None and s.pending_bytes - s.fc_size >= s.window:
                s.fc_size += size
        if start < len(msgs):
            self.distribute(s.deliver_subject, msgs[start:])

    def _request_flow_control(self, s: PushConsumer) -> None:
        reply = f"$JS.FC.{s.stream}.{s.name}.{os.urandom(3).hex()}"
        s.fc_reply, s.fc_size = reply, s.pending_bytes
        self.distribute(s.deliver_subject, [(s.deliver_subject, reply, FLOW_CONTROL_REQUEST, b"")])

    def _idle(self, s: PushConsumer, now: float) -> float:
        """Nothing to deliver now: heartbeat if due; how long to sleep."""
        sleep = QUIET_SECONDS
        if s.loaded is None:
            return sleep
        cfg = s.loaded.record.config
        if cfg.idle_heartbeat > 0:
            interval = cfg.idle_heartbeat / 1e9
            if now - s.last_sent >= interval:
                self._heartbeat(s, s.loaded)
                s.last_sent = now
            sleep = min(sleep, max(0.0, s.last_sent + interval - now))
        sleep = engine.until_due(s.loaded, self.parts.clock.wall_ns(), sleep)
        if s.next_send > now:
            sleep = min(sleep, s.next_send - now)
        return max(sleep, MIN_IDLE_SECONDS)

    def _heartbeat(self, s: PushConsumer, loaded: LoadedConsumer) -> None:
        state = loaded.state
        header = (
            f"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: {state.consumer_seq}\r\n"
            f"Nats-Last-Stream: {state.stream_seq}\r\n"
        )
        if s.fc_reply is not None:
            # Delivery waits on this request: a subscriber that missed it can answer now.
            header += f"Nats-Consumer-Stalled: {s.fc_reply}\r\n"
        msg: Outgoing = (s.deliver_subject, None, (header + "\r\n").encode(), b"")
        self.distribute(s.deliver_subject, [msg])
