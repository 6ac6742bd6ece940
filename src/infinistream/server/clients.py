"""The clients of this agent: their connections, and per account the subscriptions and
delivery to them.

An account is a subject namespace of its own: what the layers below hand to clients (API
answers, pull batches, push deliveries, PubAcks) goes to the matching subscriptions of that
account's connections only, so two accounts may use the same subjects without meeting.
"""

from __future__ import annotations

import random

from infinistream import protocol
from infinistream.jetstream.subjects import SubjectIndex
from infinistream.server.connection import ClientConnection, Subscription

REPLY_MEMO_MAX = 4096
# Message counters /varz reports as server totals, as nats-server does.
COUNTERS = ("in_msgs", "out_msgs", "in_bytes", "out_bytes")


class Clients:
    """Every connection of the agent, whatever its account, and each account's subjects."""

    def __init__(self) -> None:
        self.connections: dict[int, ClientConnection] = {}
        self.total_connections = 0
        # Each account's subscriptions, made when the account first subscribes or is served.
        self.spaces: dict[str, Subscribers] = {}
        # Counters of closed connections; the open ones are added when asked.
        self._closed_counts = dict.fromkeys(COUNTERS, 0)

    def space(self, account: str) -> Subscribers:
        """The subject namespace of `account`."""
        space = self.spaces.get(account)
        if space is None:
            space = self.spaces[account] = Subscribers()
        return space

    # -- connections -----------------------------------------------------------------------

    def opened(self, conn: ClientConnection) -> None:
        self.connections[conn.client_id] = conn
        self.total_connections += 1

    def closed(self, conn: ClientConnection) -> None:
        if self.connections.pop(conn.client_id, None) is not None:
            for name in COUNTERS:
                self._closed_counts[name] += getattr(conn, name)
        for sub in list(conn.subs.values()):
            conn.remove_subscription(sub)

    def subscription_count(self) -> int:
        return sum(len(space.subscriptions) for space in self.spaces.values())

    def counts(self) -> dict[str, int]:
        """Messages and bytes in and out, over every connection this agent has had."""
        conns = list(self.connections.values())
        return {
            name: closed + sum(getattr(c, name) for c in conns)
            for name, closed in self._closed_counts.items()
        }

    def pause_all(self, reason: str, paused: bool) -> None:
        """Stop (or resume) reading from every client, for `reason`."""
        for conn in list(self.connections.values()):
            conn.set_paused(reason, paused)

    def close_all(self) -> None:
        for conn in list(self.connections.values()):
            conn.close()


class Subscribers:
    """One account's subscriptions, and delivery to them."""

    def __init__(self) -> None:
        self.subscriptions: SubjectIndex[Subscription] = SubjectIndex()
        self._reply_memo: dict[str, list[Subscription]] = {}
        self._reply_memo_generation = -1

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
        for sub in self.subscriptions.match(inbox, cache=False):
            sub.conn.deliver_many(sub, messages)

    def distribute(self, subject: str, messages: list[protocol.Outgoing]) -> None:
        """Deliver as a publish to `subject` is delivered: each plain subscription matching it
        gets every message; a queue group's members share them, one member per message."""
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
        return bool(self.subscriptions.match(subject, cache=False))

    def send_acks(self, replies: list[str], payloads: list[bytes]) -> None:
        """Deliver a batch's answers to one stream's publishes: PubAcks, or errors.

        Replies come in runs from one client: one reply subject for all its publishes, or one
        inbox with a token per publish. A run shares one lookup (for an inbox, while the memo
        answers for it) and goes to each subscription as one write. A subscription whose
        message limit the run reaches gets only its share, as one-by-one delivery would give
        it; the others matched every reply of the run anyway.
        """
        run_reply: str | None = None
        run_inbox: str | None = None
        subs: list[Subscription] = []
        run: list[protocol.Outgoing] = []
        for reply, payload in zip(replies, payloads, strict=True):
            if reply != run_reply:
                inbox = reply.rpartition(".")[0]
                if inbox != run_inbox:
                    _deliver_run(subs, run)
                    run = []
                    subs = self._reply_subscriptions(reply)
                    run_inbox = inbox if self._reply_memo.get(inbox) is subs else None
                run_reply = reply
            run.append((reply, None, None, payload))
        _deliver_run(subs, run)

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


def _deliver_run(subs: list[Subscription], run: list[protocol.Outgoing]) -> None:
    if run:
        for sub in subs:
            sub.conn.deliver_many(sub, run)
