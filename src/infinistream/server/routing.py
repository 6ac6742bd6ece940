"""Where a connection's messages go: the JetStream API, consumers' acks and flow control, or a
stream; and what its subscriptions mean to push consumers.

The router is the host every connection talks to (`ConnectionHost`): it greets it, keeps its
subscriptions with the other clients' of its account, and routes what it publishes to its
account's tenant: every subject a connection uses (publishes, the JetStream API, acks, flow
control, its subscriptions) means something in its own account only. A publish no stream
captures may be for a stream another agent just created: the catalog is read again before it
is refused, and the connection's later publishes wait behind it so that its order is kept.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from infinistream.handlers.disabled import JetStreamDisabled
from infinistream.jetstream import errors
from infinistream.jetstream.accounts import GLOBAL_ACCOUNT
from infinistream.protocol import remove_status
from infinistream.security.exports import JS_API, Import, service_route, stream_origins, streamed
from infinistream.server.clients import Clients, Subscribers
from infinistream.server.connection import ClientConnection, Subscription
from infinistream.server.monitoring.system import SystemRequests
from infinistream.server.roles import RoleGate
from infinistream.server.tenants import Tenant, Tenants
from infinistream.storage.segment import record_length
from infinistream.stream.batches import BATCH_ID, is_batch_message
from infinistream.stream.counters import INCR
from infinistream.stream.fastbatches import is_fast_batch
from infinistream.stream.schedules import HOLDS_SCHEDULE
from infinistream.stream.schedules import stored_headers as schedule_headers
from infinistream.stream.sizes import message_size
from infinistream.stream.subject_transform import stored_subject
from infinistream.stream.ttl import TTL_HEADER, stored_headers
from infinistream.stream.write_buffer import SubjectRun, error_ack

log = logging.getLogger(__name__)

# Subjects decoded once and remembered, per router: publishers use few subjects.
SUBJECT_MEMO_MAX = 4096
# Publishes no stream captured, held for a catalog refresh: replayed this many of one
# connection at a time, and with this many held the connection's reading pauses.
REPLAY_SLICE = 1_000
HELD_MOST = 10_000
HOLDING = "publishes held"
# The start of every JetStream API request's subject: `$JS.API.<request>`.
_API = JS_API + "."

# An account's `$JS.API.>`: True if something serves the subject.
ApiHandler = Callable[[str, str | None, bytes | None, bytes], Coroutine[Any, Any, bool]]


def _reply_text(reply: bytes | None) -> str | None:
    """A reply subject as a lone PUB's parser gives it (bytes that are not UTF-8 kept)."""
    return None if reply is None else reply.decode("utf-8", "surrogateescape")


def account_of(conn: ClientConnection) -> str:
    """The account a connection's subjects live in (`$G` until its CONNECT is accepted; it
    can do nothing before)."""
    identity = conn.identity
    return GLOBAL_ACCOUNT if identity is None else identity.account


def _watched(
    space: Subscribers, subject: str, reply: str | None, headers: bytes | None, payload: bytes
) -> bool:
    """Deliver an API request to the account's clients that subscribe to its subject (`nats
    events`, an auditor on `$JS.API.>`), as nats-server, whose JetStream is one subscriber of
    the subject among others; True if any did, which makes it no request without responders."""
    # Cached: API subjects repeat (a consumer's pull requests), and most have no one watching.
    if not space.subscriptions.match(subject):
        return False
    space.distribute(subject, [(subject, reply, headers, payload)])
    return True


# What nats-server maps `$JS.<domain>.API.<suffix>` to (jetstream_api.go
# generateJSMappingTable): the API's own areas, and the Key-Value and Object Store subjects,
# which a client that reaches JetStream through a domain publishes under that prefix.
_DOMAIN_MAPPED = ("STREAM.", "CONSUMER.", "DIRECT.", "META.", "SERVER.", "ACCOUNT.")


def _any_fast_batch(replies: list[bytes | None]) -> bool:
    """Whether a reply of a run may end in `.$FI` (a fast batch's), in one pass over them all:
    a run's replies hold no newline (the parser splits on it), so one that ends so is
    followed by one in the join; a false yes only sends the run the way of each publish."""
    return b".$FI\n" in b"\n".join(filter(None, replies)) + b"\n"


def undomained(subject: str, domain: str) -> str:
    """The subject a publish to `$JS.<domain>.API.>` stands for (as nats-server's account
    mappings for its domain have it); any other subject unchanged."""
    prefix = f"$JS.{domain}.API."
    if not subject.startswith(prefix):
        return subject
    rest = subject[len(prefix) :]
    if rest == "INFO" or rest.startswith(_DOMAIN_MAPPED):
        return _API + rest
    if rest.startswith(("$KV.", "$OBJ.")):
        return rest
    return subject


@dataclass(eq=False)
class Router:
    clients: Clients
    tenants: Tenants
    # The API of every account without JetStream: nats-server's refusals.
    disabled: Callable[[str], JetStreamDisabled]
    # The INFO a new connection is greeted with.
    greeting: Callable[[int], dict[str, Any]]
    # The system account's monitoring requests ($SYS.REQ.SERVER.*).
    system: SystemRequests
    # What this agent refuses for want of a role (--roles).
    roles: RoleGate
    # nats-server's `jetstream { domain }`: its API answers on `$JS.<domain>.API.>` too.
    domain: str = ""
    _refreshing: asyncio.Task[None] | None = field(default=None, init=False)
    # The account each subscription was placed in, by the subscription's id.
    _placed: dict[int, str] = field(default_factory=dict, init=False)
    # API requests in progress: each waits on metadata, so each runs as its own task.
    _requests: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    # Subjects that arrived as bytes (runs of PUBs): their text, and the bytes stored.
    _subjects: dict[bytes, tuple[str, bytes]] = field(default_factory=dict, init=False)

    # -- ConnectionHost --------------------------------------------------------------------

    def info(self, client_id: int) -> dict[str, Any]:
        return self.greeting(client_id)

    def admits(self) -> bool:
        return self.clients.admits()

    def opened(self, conn: ClientConnection) -> None:
        self.clients.opened(conn)

    def closed(self, conn: ClientConnection) -> None:
        self.clients.closed(conn)

    def subscribe(self, sub: Subscription) -> None:
        account = account_of(sub.conn)
        # Remembered: a reload may move the user to another account before it unsubscribes.
        self._placed[id(sub)] = account
        self.clients.space(account).subscribe(sub)
        # It may be the deliver subject of a push consumer, which this agent then serves
        # (if it serves consumers at all: the fetch role).
        if self.roles.fetches and (tenant := self.tenants.get(account)) is not None:
            tenant.consumers.subscribed(sub.subject)
        # Or of a push consumer of an account it imports the subject from.
        for tenant, subject in self._exporters(account, sub.subject):
            tenant.consumers.subscribed(subject)

    def unsubscribe(self, sub: Subscription) -> None:
        account = self._placed.pop(id(sub), None) or account_of(sub.conn)
        self.clients.space(account).unsubscribe(sub)
        if self.roles.fetches and (tenant := self.tenants.get(account)) is not None:
            tenant.consumers.unsubscribed(sub.subject)
        for tenant, subject in self._exporters(account, sub.subject):
            tenant.consumers.unsubscribed(subject)

    def _exporters(self, account: str, subject: str) -> list[tuple[Tenant, str]]:
        """The tenants whose deliveries on a subject reach `subject` in `account` through its
        stream imports, each with its subject."""
        links = self.tenants.accounts.get(account)
        if links is None or not links.imports or not self.roles.fetches:
            return []
        found = []
        for exporter, theirs in stream_origins(links.imports, subject):
            tenant = self.tenants.get(exporter)
            if tenant is not None:
                found.append((tenant, theirs))
        return found

    def subscribers(self, subject: str) -> list[Subscription]:
        # Asked by a connection for its own subscriptions: every account's are searched, the
        # connection keeps only its own.
        found: list[Subscription] = []
        for space in self.clients.spaces.values():
            found += space.subscribers(subject)
        return found

    def publish(
        self,
        conn: ClientConnection,
        subject: str,
        reply: str | None,
        headers: bytes | None,
        payload: bytes,
    ) -> None:
        if conn.deferred:
            self._hold(conn, [(subject, reply, headers, payload)])
            return
        if self._route(conn, subject, reply, headers, payload):
            return
        # Another agent may have just created the stream: look again before refusing, and
        # hold this connection's later publishes back so its order is kept.
        self._hold(conn, [(subject, reply, headers, payload)])
        self._refresh_and_replay()

    def _hold(
        self, conn: ClientConnection, held: list[tuple[str, str | None, bytes | None, bytes]]
    ) -> None:
        """Hold publishes behind those already held; with HELD_MOST held, the connection's
        reading pauses until the replay has caught up (its memory is bounded)."""
        conn.deferred += held
        if len(conn.deferred) >= HELD_MOST:
            conn.set_paused(HOLDING, True)

    def publish_run(
        self,
        conn: ClientConnection,
        subjects: list[bytes],
        replies: list[bytes | None],
        payloads: list[bytes | memoryview],
        more: bool = False,
    ) -> None:
        """Route a run of publishes without headers: those of one subject in a row go to
        their stream together (one lookup, one append), as `publish` would send each. Only
        that append takes payloads that are views of the bytes read (protocol.Pubs): what
        goes any other way, or waits, is bytes. `more`: more of the client's publishes are
        a moment behind (the write buffer's flush waits a moment for them)."""
        n = len(subjects)
        i = 0
        while i < n and not conn.deferred:
            subject_b = subjects[i]
            j = i + 1
            while j < n and subjects[j] == subject_b:
                j += 1
            subject, stored = self._subject(subject_b)
            run = SubjectRun(subject, stored, replies[i:j], payloads[i:j])
            if not self._route_run(conn, run, more):
                break
            i = j
        if i < n:
            # No stream captured this run (yet): it and what follows wait for a catalog
            # refresh, in order, behind anything already waiting.
            self._hold(
                conn,
                [
                    (self._subject(s)[0], _reply_text(r), None, bytes(p))
                    for s, r, p in zip(subjects[i:], replies[i:], payloads[i:], strict=True)
                ],
            )
            self._refresh_and_replay()

    def _subject(self, subject: bytes) -> tuple[str, bytes]:
        """A subject as text, and as stored (UTF-8): bytes that are not UTF-8 become U+FFFD,
        as a lone PUB's do."""
        known = self._subjects.get(subject)
        if known is None:
            if len(self._subjects) >= SUBJECT_MEMO_MAX:
                self._subjects.clear()
            text = subject.decode("utf-8", "replace")
            stored = subject if subject.isascii() else text.encode()
            known = self._subjects[subject] = (text, stored)
        return known

    def _route_run(self, conn: ClientConnection, run: SubjectRun, more: bool = False) -> bool:
        """Route publishes of one subject; False if no stream captures them (none routed)."""
        identity = conn.identity
        account = GLOBAL_ACCOUNT if identity is None else identity.account
        tenant = self.tenants.get(account)
        subject, replies, payloads = run.subject, run.replies, run.payloads
        if tenant is not None and not subject.startswith(("$JS.", "$SYS.")):
            stored = self._store_run(tenant, run, more)
            if stored is not None:
                return stored
        # The JetStream API, a system request, an account without JetStream, a quota to
        # check message by message: each on its own, as a lone PUB.
        for k, (reply, payload) in enumerate(zip(replies, payloads, strict=True)):
            if not self._route(conn, subject, _reply_text(reply), None, bytes(payload)):
                self._hold(
                    conn,
                    [
                        (subject, _reply_text(r), None, bytes(p))
                        for r, p in zip(replies[k:], payloads[k:], strict=True)
                    ],
                )
                self._refresh_and_replay()
                return True
        return True

    def _store_run(self, tenant: Tenant, run: SubjectRun, more: bool = False) -> bool | None:
        """Store publishes of one subject in its stream; False if no stream captures it,
        None if each must be stored on its own (a storage quota, a fast-ingest batch)."""
        replies = run.replies
        stream = tenant.catalog.stream_for_subject(run.subject)
        if stream is None:
            return False
        if not self.roles.publishes:
            refusal = error_ack(stream, self.roles.publish_refusal())
            asked: list[str | bytes] = [r for r in replies if r]
            if asked:
                tenant.space.send_acks(asked, [refusal] * len(asked))
            return True
        entry = tenant.catalog.streams[stream]
        if (
            tenant.quota.policy.limits.max_file >= 0
            or entry.config.allow_msg_counter
            or _any_fast_batch(replies)
        ):
            return None
        transform = entry.transform
        if transform is not None:
            subject = stored_subject(transform, run.subject)
            run = SubjectRun(subject, subject.encode(), replies, run.payloads)
        tenant.write_buffer.append_run(stream, run, more=more)
        return True

    def acks(self, conn: ClientConnection, subjects: list[str]) -> None:
        if conn.deferred:
            self._hold(conn, [(subject, None, None, b"") for subject in subjects])
            return
        tenant = self.tenants.get(account_of(conn))
        if tenant is not None:
            tenant.consumers.plain_acks(subjects)

    # -- routing ---------------------------------------------------------------------------

    def _route(
        self,
        conn: ClientConnection,
        subject: str,
        reply: str | None,
        headers: bytes | None,
        payload: bytes,
    ) -> bool:
        """Hand a publish to its account's JetStream API or stream (or a system request to
        monitoring); False if no stream captures it."""
        # account_of, inlined: every publish asks.
        identity = conn.identity
        account = GLOBAL_ACCOUNT if identity is None else identity.account
        if subject.startswith("$SYS.") and self.system.serves(account, subject):
            self._start(self._system_request(conn, subject, reply, payload))
            return True
        links = self.tenants.accounts.get(account)
        if (
            links is not None
            and links.imports
            and self._imported(conn, links.imports, subject, reply, headers, payload)
        ):
            return True
        if self.domain and subject.startswith("$JS.") and not subject.startswith(_API):
            subject = undomained(subject, self.domain)
        tenant = self.tenants.get(account)
        if tenant is None:
            # No JetStream in this account: its API answers as nats-server's does, and no
            # stream captures anything.
            if subject.startswith(_API):
                api = self.disabled(account)
                seen = _watched(self.clients.space(account), subject, reply, headers, payload)
                self._start(
                    self._api_request(conn, api.handle, subject, reply, headers, payload, seen)
                )
            else:
                conn.no_responders_reply(reply)
            return True
        if subject.startswith("$JS."):
            if subject.startswith("$JS.ACK."):
                # A consumer's client sends one per message: the shortest way in.
                tenant.consumers.ack(subject, reply, payload, conn.no_responders_reply)
            elif subject.startswith(_API):
                seen = _watched(tenant.space, subject, reply, headers, payload)
                refusal = self.roles.api_refusal(subject.split("."))
                if refusal is not None:
                    if reply:
                        tenant.space.send(reply, *refusal)
                    return True
                handle = tenant.api.handle
                self._start(self._api_request(conn, handle, subject, reply, headers, payload, seen))
            elif subject.startswith("$JS.FC."):
                # A push subscriber's answer to flow control, sent to its agent.
                if not tenant.consumers.flow_control(subject):
                    conn.no_responders_reply(reply)
            else:
                conn.no_responders_reply(reply)
            return True
        return self._store(tenant, subject, reply, headers, payload)

    def _imported(
        self,
        conn: ClientConnection,
        imports: tuple[Import, ...],
        subject: str,
        reply: str | None,
        headers: bytes | None,
        payload: bytes,
    ) -> bool:
        """Serve a request on a subject the account imports as a service: in the exporting
        account, on its subject, the answers coming back to `reply` (server.responses);
        False if no import takes the subject."""
        route = service_route(imports, subject)
        if route is None:
            return False
        exporter, subject = route
        spec = self.tenants.accounts.get(exporter)
        tenant = self.tenants.get(exporter)
        their_reply = None
        if reply:
            many = spec is not None and streamed(spec.exports, subject)
            importer = self.clients.space(account_of(conn))
            their_reply = self.clients.space(exporter).responses.open(
                importer, reply, streamed=many
            )
        if tenant is not None and subject.startswith(_API):
            self._start(
                self._imported_api(conn, tenant, subject, reply, their_reply, headers, payload)
            )
        elif tenant is not None and subject.startswith("$JS.ACK."):
            tenant.consumers.ack(subject, their_reply, payload, lambda _: None)
        elif tenant is None or not self._store(tenant, subject, their_reply, headers, payload):
            conn.no_responders_reply(reply)
        return True

    async def _imported_api(
        self,
        conn: ClientConnection,
        tenant: Tenant,
        subject: str,
        reply: str | None,
        their_reply: str | None,
        headers: bytes | None,
        payload: bytes,
    ) -> None:
        """An API request through a service import: answered on the exporter's reply
        subject, or no-responders on the requester's own when nothing serves it."""
        if not await tenant.api.handle(subject, their_reply, headers, payload):
            conn.no_responders_reply(reply)

    def _store(
        self,
        tenant: Tenant,
        subject: str,
        reply: str | None,
        headers: bytes | None,
        payload: bytes,
    ) -> bool:
        catalog = tenant.catalog
        stream = catalog.stream_for_subject(subject)
        if stream is None:
            return False
        if not self.roles.publishes:
            if reply:
                refusal = error_ack(stream, self.roles.publish_refusal())
                tenant.space.send_acks([reply], [refusal])
            return True
        entry = catalog.streams[stream]
        if entry.transform is not None:
            subject = stored_subject(entry.transform, subject)
        if headers is not None and headers[8:9] != b"\r":
            # A stream keeps no status line, as nats-server (removeHeaderStatusIfPresent).
            headers = remove_status(headers) or None
        if (entry.config.allow_msg_counter or (headers is not None and INCR in headers)) and (
            tenant.counters.publish(stream, entry.config, subject, headers, payload, reply)
        ):
            return True
        if reply is not None and is_fast_batch(reply):
            # Stored as its batch says, never as a plain message.
            tenant.fast_batches.publish(stream, subject, reply, headers, payload)
            return True
        if headers is not None:
            if BATCH_ID in headers and is_batch_message(headers):
                # Staged until its batch commits, then stored with the rest of it.
                tenant.batches.publish(stream, subject, reply, headers, payload)
                return True
            if TTL_HEADER in headers:
                headers = stored_headers(catalog.streams[stream].config, headers)
            if HOLDS_SCHEDULE in headers:
                headers = schedule_headers(catalog.streams[stream].config, headers)
        quota = tenant.quota
        if quota.policy.limits.max_file >= 0:
            if not quota.ready:
                # Held back until the account's stored bytes are read (see _replay_deferred).
                return False
            sizes = (len(subject.encode()), len(headers or b""), len(payload))
            storage = catalog.streams[stream].config.storage
            if not quota.admits(message_size(storage, *sizes), record_length(*sizes)):
                # As nats-server: refused before it is stored, the account's limit named.
                if reply:
                    error = errors.account_resources_exceeded()
                    tenant.space.send_acks([reply], [error_ack(stream, error)])
                return True
        tenant.write_buffer.append(stream, subject, headers, payload, reply)
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
        # The catalogs of the accounts whose publishes wait.
        waiting = {account_of(c) for c in self.clients.connections.values() if c.deferred}
        for account in sorted(waiting):
            tenant = self.tenants.get(account)
            if tenant is None:
                continue
            try:
                await tenant.catalog.refresh()
                if not tenant.quota.ready:
                    await tenant.quota.refresh()
            except Exception:
                log.exception("catalog refresh of account %s failed", account)
        # Each connection's held publishes go out in order, a slice of each connection's at
        # a time, the loop free for everyone else between slices: a connection holding a
        # million does not stall the others. What a connection publishes meanwhile joins the
        # end of its held ones (publish sees them waiting), so its order is kept.
        while waiting_conns := [c for c in self.clients.connections.values() if c.deferred]:
            for conn in waiting_conns:
                held = conn.deferred
                pending = held[:REPLAY_SLICE]
                del held[:REPLAY_SLICE]
                for subject, reply, headers, payload in pending:
                    if not self._route(conn, subject, reply, headers, payload):
                        conn.no_responders_reply(reply)
                if len(held) < HELD_MOST:
                    conn.set_paused(HOLDING, False)
            await asyncio.sleep(0)

    async def _api_request(
        self,
        conn: ClientConnection,
        handle: ApiHandler,
        subject: str,
        reply: str | None,
        headers: bytes | None,
        payload: bytes,
        seen: bool = False,
    ) -> None:
        served = await handle(subject, reply, headers, payload)
        if not served and not seen:
            conn.no_responders_reply(reply)

    async def _system_request(
        self, conn: ClientConnection, subject: str, reply: str | None, payload: bytes
    ) -> None:
        if not reply:
            return
        identity = conn.identity
        user = (identity.user or "") if identity is not None else ""
        account = account_of(conn)
        answer = await self.system.answer(subject, payload, account, user)
        if answer is not None:
            self.clients.space(account).send(reply, None, answer)

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
