"""PubAcks that follow their client to the agent it reconnects to.

When an agent in lame duck mode lets a client go (`ClientConnection.hand_over`), the end of the
stream it sends races what the client is sending: a publish the client wrote before it saw the
end still reaches this agent, is stored, and its PubAck can no longer be written to the
socket. Nor can the acks of publishes still being committed. A client of a nats-server cluster
would get such a reply through the route to its new server; agents share no routes, so the
reply goes through metadata instead:

    {account group}/handover/{server_id}-{n}   HandedOver: the account, the reply subjects
                                               and PubAcks, until when they are worth giving
    {group}/handovers                          bumped with every record: the agents' signal

Only PubAcks and publish errors travel (a stream name and a sequence, or an error): never a
message's bytes, so metadata still holds no payloads (invariant 5). Every agent watches the
signal; an agent that has a subscription matching a record's replies (the client resubscribed
its reply inbox after reconnecting) deletes the record with a compare on its revision and
delivers it, so one agent delivers it once. Records nobody takes are deleted once expired.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import msgspec

from infinistream.metadata.kv import Compare, Delete, Item, MetadataError, MetadataStore, Op, Put
from infinistream.server.clients import Clients

log = logging.getLogger(__name__)

# Longer than any client waits for a PubAck (nats-py and nats.js: 5 s by default).
RECORD_TTL = 30.0
# While records wait for their client to reconnect, how often the subscriptions are looked at.
RETRY_INTERVAL = 0.05
# How long the watch is waited on before the signal is read anyway.
WATCH_TIMEOUT = 1.0


class HandedOver(msgspec.Struct, kw_only=True):
    account: str
    replies: list[str]
    payloads: list[bytes]
    expires_ns: int


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(HandedOver).decode


def handover_prefix(group: str) -> str:
    return f"{group}/handover/"


def signal_key(group: str) -> str:
    return f"{group}/handovers"


@dataclass(eq=False)
class ReplyHandover:
    """The leaving agent's side: PubAcks of connections handed over, written to metadata."""

    meta: MetadataStore
    # The base group (the signal's) and each account's group (the records').
    group: str
    group_of: Callable[[str], str]
    server_id: str
    written: int = field(default=0, init=False)
    _queue: list[HandedOver] = field(default_factory=list, init=False)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1), init=False)
    _writer: asyncio.Task[None] | None = field(default=None, init=False)

    def divert(self, account: str) -> Callable[[list[str], list[bytes]], None]:
        """The function an account's subscribers hand diverted PubAcks to."""

        def hand_over(replies: list[str], payloads: list[bytes]) -> None:
            expires = time.time_ns() + int(RECORD_TTL * 1e9)
            self._queue.append(
                HandedOver(account=account, replies=replies, payloads=payloads, expires_ns=expires)
            )
            if self._writer is None or self._writer.done():
                self._writer = asyncio.get_running_loop().create_task(self._write())

        return hand_over

    async def settle(self) -> None:
        """Until every record queued so far is written."""
        while self._writer is not None and not self._writer.done():
            await asyncio.gather(self._writer, return_exceptions=True)

    async def _write(self) -> None:
        # One transaction for what queued up meanwhile: the records and one bump of the signal.
        while self._queue:
            records, self._queue = self._queue, []
            ops: list[Op] = [
                Put(
                    f"{handover_prefix(self.group_of(r.account))}{self.server_id}-{next(self._ids)}",
                    _encode(r),
                )
                for r in records
            ]
            ops.append(Put(signal_key(self.group), self.server_id.encode()))
            try:
                await self.meta.txn([], ops)
            except Exception:
                # Those clients' publishes stay unanswered: indeterminate, as any lost reply.
                log.exception(
                    "handing over %d PubAck(s) failed", sum(len(r.replies) for r in records)
                )
                continue
            self.written += sum(len(r.replies) for r in records)


@dataclass(eq=False)
class HandoverDelivery:
    """Every agent's side: records whose client is connected here are delivered here."""

    meta: MetadataStore
    group: str
    # The groups of the accounts whose records may be for this agent's clients, as now.
    groups: Callable[[], list[str]]
    clients: Clients
    delivered: int = field(default=0, init=False)
    _pending: dict[str, Item] = field(default_factory=dict, init=False)
    _signal_revision: int = field(default=-1, init=False)

    async def run(self) -> None:
        watch = self.meta.watch(signal_key(self.group))
        try:
            while True:
                timeout = RETRY_INTERVAL if self._pending else WATCH_TIMEOUT
                await watch.wait(timeout)
                try:
                    await self.deliver()
                except MetadataError as exc:
                    log.warning("handed-over PubAcks: %s", exc)
        finally:
            await watch.close()

    async def deliver(self) -> int:
        """Read new records if the signal moved, and deliver those whose client is here."""
        item = await self.meta.get(signal_key(self.group))
        revision = item.mod_revision if item is not None else 0
        if revision != self._signal_revision:
            # What is there now: records another agent took meanwhile are gone from it.
            self._signal_revision = revision
            self._pending = {
                record.key: record
                for group in self.groups()
                for record in await self.meta.range(handover_prefix(group))
            }
        delivered = 0
        now = time.time_ns()
        for key, record in list(self._pending.items()):
            handed = _decode(record.value)
            expired = handed.expires_ns < now
            space = self.clients.spaces.get(handed.account)
            # Not a connection being handed over itself: its client is going elsewhere.
            here = space is not None and any(
                not sub.conn.handing_over and not sub.conn.closed
                for sub in space.subscribers(handed.replies[0])
            )
            if not (here or expired):
                continue
            del self._pending[key]
            with contextlib.suppress(MetadataError):
                taken = await self.meta.txn([Compare(key, record.mod_revision)], [Delete(key)])
                if taken.succeeded and here and space is not None:
                    space.send_acks(list[str | bytes](handed.replies), handed.payloads)
                    delivered += len(handed.replies)
                elif taken.succeeded:
                    log.warning(
                        "%d handed-over PubAck(s) expired: their client did not come back",
                        len(handed.replies),
                    )
        if delivered:
            log.info("Delivered %d PubAck(s) handed over by an agent in lame duck mode", delivered)
        self.delivered += delivered
        return delivered
