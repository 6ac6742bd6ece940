"""The clients of this agent: their connections, and per account the subscriptions and
delivery to them.

An account is a subject namespace of its own: what the layers below hand to clients (API
answers, pull batches, push deliveries, PubAcks) goes to the matching subscriptions of that
account's connections only, so two accounts may use the same subjects without meeting.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from infinistream import protocol
from infinistream.jetstream.subjects import SubjectIndex
from infinistream.security.exports import Import, stream_route
from infinistream.security.identity import GLOBAL_ACCOUNT
from infinistream.server.connection import (
    CLOSE_REASONS,
    SLOW_CONSUMER,
    SLOW_CONSUMER_DEADLINE,
    STALE_CONNECTION,
    ClientConnection,
    Subscription,
)
from infinistream.server.responses import RESPONSE_PREFIX, ResponseRoutes

REPLY_MEMO_MAX = 4096
# Message counters /varz reports as server totals, as nats-server does.
COUNTERS = ("in_msgs", "out_msgs", "in_bytes", "out_bytes")
# How many closed connections /connz?state=closed remembers (nats-server's default).
MAX_CLOSED = 10000
# CONNECT options a closed connection's copy leaves out.
SECRETS = frozenset({"pass", "auth_token", "sig", "jwt", "nkey"})


@dataclass(frozen=True, slots=True)
class ClosedConnection:
    """What /connz shows of a connection after it closed: a copy, not the connection."""

    client_id: int
    peer: tuple[str, int]
    started: float
    last_activity: float
    stopped: float
    reason: str
    in_msgs: int
    out_msgs: int
    in_bytes: int
    out_bytes: int
    options: dict[str, object]
    account: str
    user: str
    # (subject, sid, queue group, messages delivered) of each subscription it had.
    subs: tuple[tuple[str, str, str | None, int], ...]


class Clients:
    """Every connection of the agent, whatever its account, and each account's subjects."""

    def __init__(self, max_connections: int = 64 * 1024) -> None:
        self.connections: dict[int, ClientConnection] = {}
        # How many may be open at once (server/fdlimit.py).
        self.max_connections = max_connections
        self.total_connections = 0
        # Each account's subscriptions, made when the account first subscribes or is served.
        self.spaces: dict[str, Subscribers] = {}
        # Counters of closed connections (in all, and per account); the open ones are added
        # when asked.
        self._closed_counts = dict.fromkeys(COUNTERS, 0)
        self._closed_by_account: dict[str, dict[str, int]] = {}
        self.closed_connections: deque[ClosedConnection] = deque(maxlen=MAX_CLOSED)
        self.slow_consumers = 0
        self.stale_connections = 0
        # Lame duck mode: a connection handed over (ClientConnection.hand_over) keeps its
        # subscriptions after it is lost, until this hook has seen its publishes answered
        # (their PubAcks handed over) and calls `forget`.
        self.on_handed_over: Callable[[ClientConnection], None] | None = None

    def space(self, account: str) -> Subscribers:
        """The subject namespace of `account`."""
        space = self.spaces.get(account)
        if space is None:
            space = self.spaces[account] = Subscribers()
        return space

    def link(self, imports: Mapping[str, Iterable[Import]]) -> None:
        """Each account's stream imports (by importing account, as the config has them now):
        what the exporting account delivers on their subjects reaches the importer too."""
        by_exporter: dict[str, list[tuple[Subscribers, Import]]] = {}
        for importer, imported in imports.items():
            for link in imported:
                if not link.service and link.account != importer:
                    by_exporter.setdefault(link.account, []).append((self.space(importer), link))
        for account, space in list(self.spaces.items()):
            space.exported = by_exporter.pop(account, [])
        for account, links in by_exporter.items():
            self.space(account).exported = links

    # -- connections -----------------------------------------------------------------------

    def admits(self) -> bool:
        """Whether one more connection may open."""
        return len(self.connections) < self.max_connections

    def opened(self, conn: ClientConnection) -> None:
        self.connections[conn.client_id] = conn
        self.total_connections += 1

    def closed(self, conn: ClientConnection) -> None:
        if self.connections.pop(conn.client_id, None) is not None:
            for name in COUNTERS:
                self._closed_counts[name] += getattr(conn, name)
            self._remember_closed(conn)
        if conn.handing_over and self.on_handed_over is not None:
            self.on_handed_over(conn)
            return
        self.forget(conn)

    def forget(self, conn: ClientConnection) -> None:
        """Remove a closed connection's subscriptions."""
        for sub in list(conn.subs.values()):
            conn.remove_subscription(sub)

    def subscription_count(self) -> int:
        return sum(len(space.subscriptions) for space in self.spaces.values())

    def sublist_stats(self, account: str | None = None) -> dict[str, int | float]:
        """nats-server's SublistStats of one account's subscription index, or of all of
        them together."""
        if account is None:
            spaces = list(self.spaces.values())
        else:
            spaces = [self.spaces[account]] if account in self.spaces else []
        each = [space.subscriptions.stats() for space in spaces]
        total: dict[str, int | float] = {
            name: sum(s[name] for s in each)
            for name in ("num_subscriptions", "num_cache", "num_inserts", "num_removes")
        }
        matches = sum(s["num_matches"] for s in each)
        hits = sum(s["cache_hit_rate"] * s["num_matches"] for s in each)
        caches = sum(s["num_cache"] for s in each)
        total["num_matches"] = matches
        total["cache_hit_rate"] = hits / matches if matches else 0.0
        total["max_fanout"] = max((s["max_fanout"] for s in each), default=0)
        fanout = sum(s["avg_fanout"] * s["num_cache"] for s in each)
        total["avg_fanout"] = fanout / caches if caches else 0.0
        return total

    def _remember_closed(self, conn: ClientConnection) -> None:
        identity = conn.identity
        account = identity.account if identity is not None else GLOBAL_ACCOUNT
        counts = self._closed_by_account.setdefault(account, dict.fromkeys(COUNTERS, 0))
        for name in COUNTERS:
            counts[name] += getattr(conn, name)
        reason = conn.close_reason or "Client Closed"
        if reason in (SLOW_CONSUMER, SLOW_CONSUMER_DEADLINE):
            self.slow_consumers += 1
        elif reason == CLOSE_REASONS[STALE_CONNECTION]:
            self.stale_connections += 1
        self.closed_connections.append(
            ClosedConnection(
                client_id=conn.client_id,
                peer=conn.peer,
                started=conn.started,
                last_activity=conn.last_activity,
                stopped=time.time(),
                reason=reason,
                in_msgs=conn.in_msgs,
                out_msgs=conn.out_msgs,
                in_bytes=conn.in_bytes,
                out_bytes=conn.out_bytes,
                options={k: v for k, v in conn.options.items() if k not in SECRETS},
                account=account,
                user=(identity.user or "") if identity is not None else "",
                subs=tuple((s.subject, s.sid, s.queue, s.delivered) for s in conn.subs.values()),
            )
        )

    def counts(self, account: str | None = None) -> dict[str, int]:
        """Messages and bytes in and out, over every connection this agent has had (of
        `account`, if given)."""
        conns = list(self.connections.values())
        closed_counts = self._closed_counts
        if account is not None:
            conns = [c for c in conns if _account(c) == account]
            closed_counts = self._closed_by_account.get(account, dict.fromkeys(COUNTERS, 0))
        return {
            name: closed + sum(getattr(c, name) for c in conns)
            for name, closed in closed_counts.items()
        }

    def total_connections_of(self, account: str) -> int:
        """Connections of `account` this agent has had: open, and the closed ones remembered."""
        open_ = sum(1 for c in self.connections.values() if _account(c) == account)
        return open_ + sum(1 for c in self.closed_connections if c.account == account)

    def pause_all(self, reason: str, paused: bool) -> None:
        """Stop (or resume) reading from every client, for `reason`."""
        for conn in list(self.connections.values()):
            conn.set_paused(reason, paused)

    def inform(self, info: Callable[[int], dict[str, Any]]) -> None:
        """Send each client a fresh INFO (the pool changed: new `connect_urls`).

        As nats-server does when its cluster changes: only to clients that said in CONNECT
        that they understand INFO after the greeting (protocol 1: every current client).
        """
        for conn in list(self.connections.values()):
            if conn.connected and not conn.closed and conn.options.get("protocol", 0) >= 1:
                conn.write(protocol.info(info(conn.client_id)))

    def close_all(self) -> None:
        for conn in list(self.connections.values()):
            conn.close()


class Subscribers:
    """One account's subscriptions, and delivery to them."""

    def __init__(self) -> None:
        self.subscriptions: SubjectIndex[Subscription] = SubjectIndex()
        # Lame duck mode: where the PubAcks of connections being handed over go instead
        # (replies, payloads), to reach their clients on the agent they reconnect to.
        self.divert: Callable[[list[str], list[bytes]], None] | None = None
        self._reply_memo: dict[str, list[Subscription]] = {}
        self._reply_memo_generation = -1
        # Reply subjects of requests that came from another account (a service import).
        self.responses = ResponseRoutes()
        # Stream imports of this account's subjects: the importers' subscribers, each with
        # its import.
        self.exported: list[tuple[Subscribers, Import]] = []

    def subscribe(self, sub: Subscription) -> None:
        self.subscriptions.insert(sub.subject, sub)

    def unsubscribe(self, sub: Subscription) -> None:
        self.subscriptions.remove(sub.subject, sub)

    def subscribers(self, subject: str) -> list[Subscription]:
        # Asked of one-off reply subjects: not worth a place in the match cache.
        return self.subscriptions.match(subject, cache=False)

    # -- delivery --------------------------------------------------------------------------

    def send(self, subject: str, headers: bytes | None, payload: bytes) -> None:
        """Deliver a message from the server to every subscription that matches."""
        self.deliver_many(subject, [(subject, None, headers, payload)])

    def deliver_many(self, inbox: str, messages: list[protocol.Outgoing]) -> None:
        """Deliver to the subscriptions matching `inbox`, matched once for all the messages.

        A pull request's batch: each MSG names its message's own subject and ack reply.
        """
        if inbox.startswith(RESPONSE_PREFIX) and self.responses.forward(inbox, messages):
            return
        for sub in self.subscriptions.match(inbox, cache=False):
            sub.conn.deliver_many(sub, messages)
        if self.exported:
            self._export(inbox, messages, distribute=False)

    def _export(self, subject: str, messages: list[protocol.Outgoing], *, distribute: bool) -> None:
        """Deliver to the accounts that import `subject` as a stream, on their subject."""
        for space, link in self.exported:
            mapped = stream_route((link,), link.account, subject)
            if mapped is None:
                continue
            out = messages
            if mapped != subject:
                out = [(mapped if s == subject else s, r, h, p) for s, r, h, p in messages]
            if distribute:
                space.distribute(mapped, out)
            else:
                space.deliver_many(mapped, out)

    def drained(self, inbox: str) -> Awaitable[object] | None:
        """None if the clients subscribed to `inbox` have read what waits for them down to
        their low-water mark (or left); else what completes when one of them may have: a pull
        request's next chunk waits for None."""
        if inbox.startswith(RESPONSE_PREFIX):
            return self.responses.drained(inbox)
        waits = [
            waiting
            for sub in self.subscriptions.match(inbox, cache=False)
            if (waiting := sub.conn.drained()) is not None
        ]
        return asyncio.gather(*waits) if waits else None

    def distribute(self, subject: str, messages: list[protocol.Outgoing]) -> None:
        """Deliver as a publish to `subject` is delivered: each plain subscription matching it
        gets every message; a queue group's members share them, one member per message."""
        if self.exported:
            self._export(subject, messages, distribute=True)
        groups: dict[str, list[Subscription]] = {}
        for sub in self.subscriptions.match(subject, cache=False):
            if sub.queue is None:
                sub.conn.deliver_many(sub, messages)
            else:
                groups.setdefault(sub.queue, []).append(sub)
        for members in groups.values():
            if len(members) == 1:
                members[0].conn.deliver_many(members[0], messages)
                continue
            shares: list[list[protocol.Outgoing]] = [[] for _ in members]
            # Like nats-server, a member picked at random per message.
            for msg in messages:
                shares[random.randrange(len(members))].append(msg)
            for member, share in zip(members, shares, strict=True):
                if share:
                    member.conn.deliver_many(member, share)

    def has_interest(self, subject: str) -> bool:
        if subject.startswith(RESPONSE_PREFIX):
            return self.responses.has_interest(subject)
        if self.subscriptions.match(subject, cache=False):
            return True
        for space, link in self.exported:
            mapped = stream_route((link,), link.account, subject)
            if mapped is not None and space.has_interest(mapped):
                return True
        return False

    def send_acks(self, replies: list[str | bytes], payloads: list[bytes]) -> None:
        """Deliver a batch's answers to one stream's publishes: PubAcks, or errors.

        Replies come in runs from one client: one reply subject for all its publishes, or one
        inbox with a token per publish. A run shares one lookup (for an inbox, while the memo
        answers for it) and goes to each subscription as one write, its frames formatted in
        one pass. A subscription whose message limit the run reaches gets only its share, as
        one-by-one delivery would give it; the others matched every reply of the run anyway.
        Replies come as text or as the bytes a client sent them in (a run of PUBs).
        """
        if self.responses:
            replies, payloads = self._forward_acks(replies, payloads)
        if self._inbox_run(replies, payloads):
            return
        run_reply: bytes | None = None
        run_inbox: bytes | None = None
        subs: list[Subscription] = []
        run: list[bytes] = []
        answers: list[bytes] = []
        for reply, payload in zip(replies, payloads, strict=True):
            if type(reply) is not bytes:
                reply = reply.encode("utf-8", "surrogateescape")  # type: ignore[union-attr]
            if reply != run_reply:
                inbox = reply.rpartition(b".")[0]
                if inbox != run_inbox:
                    self._deliver_acks(subs, run, answers)
                    run, answers = [], []
                    text = reply.decode("utf-8", "surrogateescape")
                    subs = self._reply_subscriptions(text)
                    memo = self._reply_memo.get(text.rpartition(".")[0])
                    run_inbox = inbox if memo is subs else None
                run_reply = reply
            run.append(reply)
            answers.append(payload)
        self._deliver_acks(subs, run, answers)

    def _inbox_run(self, replies: list[str | bytes], payloads: list[bytes]) -> bool:
        """Deliver the answers to a publisher's run, every reply a token of one inbox, with
        one lookup, if its memo says that lookup holds for them all; False: not such a run."""
        inbox = _one_inbox(replies)
        if inbox is None:
            return False
        first = replies[0]
        assert isinstance(first, bytes)
        subs = self._reply_subscriptions(first.decode("utf-8", "surrogateescape"))
        if self._reply_memo.get(inbox.decode("utf-8", "surrogateescape")) is not subs:
            return False
        self._deliver_acks(subs, cast("list[bytes]", replies), payloads)
        return True

    def _forward_acks(
        self, replies: list[str | bytes], payloads: list[bytes]
    ) -> tuple[list[str | bytes], list[bytes]]:
        """The answers that stay in this account; those to another account's requests
        (a service import) go there."""
        kept: tuple[list[str | bytes], list[bytes]] = ([], [])
        for reply, payload in zip(replies, payloads, strict=True):
            text = reply if isinstance(reply, str) else reply.decode("utf-8", "surrogateescape")
            if not self.responses.forward_acks(text, payload):
                kept[0].append(reply)
                kept[1].append(payload)
        return kept

    def _deliver_acks(
        self, subs: list[Subscription], run: list[bytes], answers: list[bytes]
    ) -> None:
        if run and self.divert is not None and any(s.conn.handing_over for s in subs):
            self.divert([r.decode("utf-8", "surrogateescape") for r in run], answers)
            subs = [sub for sub in subs if not sub.conn.handing_over]
        _deliver_replies(subs, run, answers)

    def _reply_subscriptions(self, reply: str) -> list[Subscription]:
        """Who gets a PubAck: matched once per reply inbox, not once per publish.

        Replies of one client differ only in their last token (`_INBOX.<id>.<n>`); while no
        subscription of that length ends in a literal token, they all match the same
        subscriptions, so the match is remembered by the inbox until subscriptions change.
        """
        index = self.subscriptions
        if index.generation != self._reply_memo_generation:
            self._reply_memo.clear()
            self._reply_memo_generation = index.generation
        inbox = reply.rpartition(".")[0]
        subs = self._reply_memo.get(inbox)
        if subs is None:
            subs = index.match(reply, cache=False)
            if inbox and index.last_token_irrelevant(reply.count(".") + 1):
                if len(self._reply_memo) >= REPLY_MEMO_MAX:
                    self._reply_memo.clear()
                self._reply_memo[inbox] = subs
        return subs


def _account(conn: ClientConnection) -> str:
    return conn.identity.account if conn.identity is not None else GLOBAL_ACCOUNT


def _one_inbox(replies: list[str | bytes]) -> bytes | None:
    """The inbox every reply is a token of (`<inbox>.<token>`, as bytes from a run of PUBs),
    found in a few passes over them all, not a loop turn each; None if there is none."""
    first = replies[0] if replies else None
    if type(first) is not bytes:
        return None
    inbox, dot, _ = first.rpartition(b".")
    if not dot:
        return None
    try:
        joined = b"\n".join(replies)  # type: ignore[arg-type]
    except TypeError:
        return None  # some are text
    # No reply holds a newline, each starts with the inbox and a dot and has no dot after
    # it: its inbox is this one.
    n = len(replies)
    if (
        joined.count(b"\n") != n - 1
        or (b"\n" + joined).count(b"\n" + inbox + b".") != n
        or joined.count(b".") != n * (inbox.count(b".") + 1)
    ):
        return None
    return inbox


def _deliver_replies(
    subs: list[Subscription], subjects: list[bytes], payloads: list[bytes]
) -> None:
    if subjects:
        for sub in subs:
            sub.conn.deliver_replies(sub, subjects, payloads)
            sub.conn.flush_now()
