"""Where a connection's messages go: the JetStream API, consumers' acks and flow control, or a
stream; and what its subscriptions mean to push consumers.

The router is the host every connection talks to (`ConnectionHost`): it greets it, keeps its
subscriptions with the other clients', and routes what it publishes. A publish no stream
captures may be for a stream another agent just created: the catalog is read again before it
is refused, and the connection's later publishes wait behind it so that its order is kept.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from infinistream.consumer.service import ConsumerService
from infinistream.handlers.router import JetStreamApi
from infinistream.server.clients import Clients
from infinistream.server.connection import ClientConnection, Subscription
from infinistream.server.monitoring.accounts_model import account_of
from infinistream.server.monitoring.system import SystemRequests
from infinistream.server.roles import RoleGate
from infinistream.stream.batches import BATCH_ID, AtomicBatches, is_batch_message
from infinistream.stream.catalog import Catalog
from infinistream.stream.schedules import HOLDS_SCHEDULE
from infinistream.stream.schedules import stored_headers as schedule_headers
from infinistream.stream.ttl import TTL_HEADER, stored_headers
from infinistream.stream.write_buffer import WriteBuffer, error_ack

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Router:
    clients: Clients
    catalog: Catalog
    write_buffer: WriteBuffer
    batches: AtomicBatches
    consumers: ConsumerService
    api: JetStreamApi
    # The INFO a new connection is greeted with.
    greeting: Callable[[int], dict[str, Any]]
    # The system account's monitoring requests ($SYS.REQ.SERVER.*).
    system: SystemRequests
    # What this agent refuses for want of a role (--roles).
    roles: RoleGate
    _refreshing: asyncio.Task[None] | None = field(default=None, init=False)
    # API requests in progress: each waits on metadata, so each runs as its own task.
    _requests: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    # -- ConnectionHost --------------------------------------------------------------------

    def info(self, client_id: int) -> dict[str, Any]:
        return self.greeting(client_id)

    def opened(self, conn: ClientConnection) -> None:
        self.clients.opened(conn)

    def closed(self, conn: ClientConnection) -> None:
        self.clients.closed(conn)

    def subscribe(self, sub: Subscription) -> None:
        self.clients.subscribe(sub)
        # It may be the deliver subject of a push consumer, which this agent then serves
        # (if it serves consumers at all: the fetch role).
        if self.roles.fetches:
            self.consumers.subscribed(sub.subject)

    def unsubscribe(self, sub: Subscription) -> None:
        self.clients.unsubscribe(sub)
        if self.roles.fetches:
            self.consumers.unsubscribed(sub.subject)

    def subscribers(self, subject: str) -> list[Subscription]:
        return self.clients.subscribers(subject)

    def publish(
        self,
        conn: ClientConnection,
        subject: str,
        reply: str | None,
        headers: bytes | None,
        payload: bytes,
    ) -> None:
        if conn.deferred:
            conn.deferred.append((subject, reply, headers, payload))
            return
        if self._route(conn, subject, reply, headers, payload):
            return
        # Another agent may have just created the stream: look again before refusing, and
        # hold this connection's later publishes back so its order is kept.
        conn.deferred.append((subject, reply, headers, payload))
        self._refresh_and_replay()

    def acks(self, conn: ClientConnection, subjects: list[str]) -> None:
        if conn.deferred:
            conn.deferred += [(subject, None, None, b"") for subject in subjects]
        else:
            self.consumers.plain_acks(subjects)

    # -- routing ---------------------------------------------------------------------------

    def _route(
        self,
        conn: ClientConnection,
        subject: str,
        reply: str | None,
        headers: bytes | None,
        payload: bytes,
    ) -> bool:
        """Hand a publish to the JetStream API or a stream; False if no stream captures it."""
        if subject.startswith("$SYS.") and self.system.serves(account_of(conn), subject):
            self._start(self._system_request(conn, subject, reply, payload))
            return True
        if subject.startswith("$JS."):
            if subject.startswith("$JS.ACK."):
                # A consumer's client sends one per message: the shortest way in.
                self.consumers.ack(subject, reply, payload, conn.no_responders_reply)
            elif subject.startswith("$JS.API."):
                refusal = self.roles.api_refusal(subject.split("."))
                if refusal is not None:
                    if reply:
                        self.clients.send(reply, *refusal)
                    return True
                self._start(self._api_request(conn, subject, reply, headers, payload))
            elif subject.startswith("$JS.FC."):
                # A push subscriber's answer to flow control, sent to its agent.
                if not self.consumers.flow_control(subject):
                    conn.no_responders_reply(reply)
            else:
                conn.no_responders_reply(reply)
            return True
        stream = self.catalog.stream_for_subject(subject)
        if stream is None:
            return False
        if not self.roles.publishes:
            if reply:
                self.clients.send_acks([reply], [error_ack(stream, self.roles.publish_refusal())])
            return True
        if headers is not None:
            if BATCH_ID in headers and is_batch_message(headers):
                # Staged until its batch commits, then stored with the rest of it.
                self.batches.publish(stream, subject, reply, headers, payload)
                return True
            if TTL_HEADER in headers:
                headers = stored_headers(self.catalog.streams[stream].config, headers)
            if HOLDS_SCHEDULE in headers:
                headers = schedule_headers(self.catalog.streams[stream].config, headers)
        self.write_buffer.append(stream, subject, headers, payload, reply)
        return True

    def _start(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)
        return task

    def _refresh_and_replay(self) -> None:
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = self._start(self._replay_deferred())

    async def _replay_deferred(self) -> None:
        try:
            await self.catalog.refresh()
        except Exception:
            log.exception("catalog refresh failed")
        # No awaits below: each connection's held publishes go out in order, in one go.
        for conn in list(self.clients.connections.values()):
            pending, conn.deferred = conn.deferred, []
            for subject, reply, headers, payload in pending:
                if not self._route(conn, subject, reply, headers, payload):
                    conn.no_responders_reply(reply)

    async def _api_request(
        self,
        conn: ClientConnection,
        subject: str,
        reply: str | None,
        headers: bytes | None,
        payload: bytes,
    ) -> None:
        served = await self.api.handle(subject, reply, headers, payload)
        if not served:
            conn.no_responders_reply(reply)

    async def _system_request(
        self, conn: ClientConnection, subject: str, reply: str | None, payload: bytes
    ) -> None:
        if not reply:
            return
        identity = conn.identity
        user = (identity.user or "") if identity is not None else ""
        answer = await self.system.answer(subject, payload, account_of(conn), user)
        if answer is not None:
            self.clients.send(reply, None, answer)

    # -- shutdown --------------------------------------------------------------------------

    async def settle(self) -> None:
        """Let publishes held back for a catalog refresh reach the write buffer (or get their
        answer), so that draining it answers them too."""
        if self._refreshing is not None:
            await asyncio.gather(self._refreshing, return_exceptions=True)

    async def cancel(self) -> None:
        """Stop the API requests still in progress."""
        for task in list(self._requests):
            task.cancel()
        await asyncio.gather(*self._requests, return_exceptions=True)
