"""One client connection: an asyncio.Protocol driving the sans-IO parser.

Bytes in go to the parser; its events are handled here or handed to the connection's host
(publishes, API requests, subscriptions), a small protocol the server implements. Bytes out
are gathered and written once per loop iteration, so a batch of PubAcks costs one write.
Reading pauses while the agent's write buffer is behind, and a client that does not read what
it is sent is closed as nats-server closes a slow consumer.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import ssl
import time
from dataclasses import dataclass
from typing import Any, Protocol

from infinistream import protocol
from infinistream.jetstream.subjects import is_valid_subject
from infinistream.protocol import (
    Acks,
    Connect,
    HPub,
    Ping,
    Pong,
    ProtocolError,
    Pub,
    Pubs,
    Sub,
    Unsub,
)
from infinistream.security.auth import Authenticator
from infinistream.security.identity import ANONYMOUS, Identity
from infinistream.security.permissions import PermissionChecker
from infinistream.security.tls import TlsError, TlsSession, certificate_names
from infinistream.settings import Settings

log = logging.getLogger(__name__)

AUTH_VIOLATION = "Authorization Violation"
AUTH_TIMEOUT = "Authentication Timeout"
STALE_CONNECTION = "Stale Connection"
INVALID_SUBJECT = "Invalid Subject"
INVALID_PUBLISH_SUBJECT = "Invalid Publish Subject"
NO_RESPONDERS_NEED_HEADERS = "no responders requires headers support"
INVALID_CLIENT_PROTOCOL = "invalid client protocol"
MAX_CONNECTIONS = "maximum connections exceeded"
# At most this much waits for a client before writers that pace themselves (a pull request's
# batch, written in chunks) wait for it to read: far below max_pending (nats-server: 64 MiB),
# so a long batch holds little memory while a reading client still gets it at full speed.
OUTBOUND_LOW_WATER = 1024 * 1024
# A client that publishes with many in flight answers the PubAcks it reads with as many new
# publishes: for this long after its PubAcks are written, those it owes are taken to be on
# their way (its flush waits a moment for them: see WriteBuffer.append_run).
REFILL_SECONDS = 0.005
NO_RESPONDERS = b"NATS/1.0 503\r\n\r\n"
SLOW_CONSUMER = "Slow Consumer (Pending Bytes)"
SLOW_CONSUMER_DEADLINE = "Slow Consumer (Write Deadline)"
# Why reading pauses while a CONNECT's password is checked.
CHECKING = "password check"
# nats-server's ClosedState names (connz `reason`) for the errors a connection is closed with.
CLOSE_REASONS = {
    AUTH_VIOLATION: "Authentication Failure",
    AUTH_TIMEOUT: "Authentication Timeout",
    MAX_CONNECTIONS: "Maximum Connections Exceeded",
    STALE_CONNECTION: "Stale Connection",
}


@dataclass(slots=True, eq=False)
class Subscription:
    conn: ClientConnection
    subject: str
    sid: str
    queue: str | None
    max_msgs: int = 0
    delivered: int = 0


class ConnectionHost(Protocol):
    """What a connection needs of the server around it."""

    def info(self, client_id: int) -> dict[str, Any]:
        """The INFO a new connection is greeted with."""

    def admits(self) -> bool:
        """Whether a new connection may open (max_connections)."""

    def opened(self, conn: ClientConnection) -> None: ...

    def closed(self, conn: ClientConnection) -> None: ...

    def subscribe(self, sub: Subscription) -> None: ...

    def unsubscribe(self, sub: Subscription) -> None: ...

    def subscribers(self, subject: str) -> list[Subscription]:
        """Every subscription, of any connection, that matches `subject`."""

    def publish(
        self,
        conn: ClientConnection,
        subject: str,
        reply: str | None,
        headers: bytes | None,
        payload: bytes,
    ) -> None: ...

    def publish_run(
        self,
        conn: ClientConnection,
        subjects: list[bytes],
        replies: list[bytes | None],
        payloads: list[bytes | memoryview],
        more: bool = False,
    ) -> None:
        """A run of plain publishes, subjects and replies as the client's bytes (a payload
        may be a view: see `protocol.Pubs`): as many `publish` calls without headers. `more`:
        more of the client's publishes are a moment behind (see `_handle`)."""

    def acks(self, conn: ClientConnection, subjects: list[str]) -> None:
        """A run of plain acks: as many `publish` calls with no reply and no body."""


class ClientConnection(asyncio.Protocol):
    def __init__(
        self,
        host: ConnectionHost,
        settings: Settings,
        client_id: int,
        authenticator: Authenticator,
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        self.host = host
        self.settings = settings
        self.client_id = client_id
        self.authenticator = authenticator
        # Who the client is: its account, user and permissions, known once its CONNECT is
        # accepted (from the start when no auth is configured: nats-server's global account).
        # The routing layer reads it to know which account a subject belongs to.
        self.identity: Identity | None = None if authenticator.required else ANONYMOUS
        # The server side of TLS (settings.tls), and while the connection is being upgraded.
        self.tls_context = tls_context
        # The TLS session once the connection speaks TLS (settings.tls); None: plain text.
        self.tls: TlsSession | None = None
        self._tls_timer: asyncio.TimerHandle | None = None
        # verify_and_map: the names in the client's certificate, tried as users.
        self.certificate_names: list[str] | None = None
        # What the client may publish and subscribe to; None: anything (the fast path).
        self.permissions: PermissionChecker | None = None
        # The nonce nkey clients sign, sent in INFO (nats-server: 11 random bytes, base64url).
        self.nonce: bytes | None = None
        self.parser = protocol.Parser(max_payload=settings.max_payload)
        # nats-server accepts HPUB only after a CONNECT with "headers":true; the parser
        # still negotiates it on every CONNECT (it keeps headers *supported*).
        self.parser.headers = False
        self.transport: asyncio.Transport | None = None
        self.subs: dict[str, Subscription] = {}
        self.options: dict[str, Any] = {}
        self.connected = False
        # nats-server's default client options have verbose on, until a CONNECT says otherwise.
        self.verbose = True
        self.pedantic = False
        self.headers = False
        self.no_responders = False
        self.closed = False
        # Lame duck mode's close (hand_over): nothing more is written, what the client still
        # sends is read, and its PubAcks go to the agent it reconnects to (server/handover.py).
        self.handing_over = False
        self.pings_out = 0
        self._out: list[bytes] = []
        # Bytes in `_out`, and the write deadline's timer while the transport holds bytes.
        self._out_bytes = 0
        self._pending_check = settings.max_pending // 2
        # The low-water mark of what waits for the client: the transport pauses the protocol
        # above it, and a pull request's next chunk is read only once it is back below it.
        self._drain_mark = min(settings.max_pending // 4, OUTBOUND_LOW_WATER)
        self._writing_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._deadline: asyncio.TimerHandle | None = None
        self._flush_scheduled = False
        self._ping_timer: asyncio.TimerHandle | None = None
        self._auth_timer: asyncio.TimerHandle | None = None
        self._paused_by: set[str] = set()
        # While a CONNECT is checked off the loop: the events that came after it, and the
        # parser's error that ended them, if any.
        self._checking: list[protocol.Event] | None = None
        self._checking_error: ProtocolError | None = None
        self.in_msgs = 0
        self.in_bytes = 0
        # PubAcks written to it that it has not yet answered with new publishes, and until
        # when those are expected (REFILL_SECONDS).
        self._refills_owed = 0
        self._refills_by = 0.0
        self.out_msgs = 0
        self.out_bytes = 0
        # For /connz: when it connected, when it last sent anything, and why it closed
        # (nats-server's reasons; "Client Closed" unless the server closed it).
        self.started = time.time()
        self.last_activity = self.started
        self.close_reason = ""
        self.peer: tuple[str, int] = ("", 0)
        # Publishes that wait for a catalog refresh, kept in order behind one another.
        self.deferred: list[tuple[str, str | None, bytes | None, bytes]] = []

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses; they behave as one.
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer = (str(peer[0]), int(peer[1]))
        mark = self._drain_mark
        transport.set_write_buffer_limits(high=mark, low=mark)  # type: ignore[attr-defined]
        if not self.host.admits():
            # As nats-server: INFO, then the refusal, and the connection is not counted.
            log.error("%s:%d - cid:%d - %s", *self.peer, self.client_id, MAX_CONNECTIONS)
            self.write(protocol.info(self._info()))
            self.error_and_close(MAX_CONNECTIONS)
            return
        self.host.opened(self)
        tls = self.settings.tls
        if self.tls_context is not None and tls is not None:
            # As nats-server: INFO in plain text, then the client starts TLS; with
            # handshake_first, TLS first and INFO inside it. Either way nothing but the
            # handshake is accepted until it is done, within the TLS timeout.
            self.tls = TlsSession(self.tls_context)
            if not tls.handshake_first:
                transport.write(protocol.info(self._info()))  # type: ignore[attr-defined]
            self._tls_timer = asyncio.get_running_loop().call_later(
                tls.timeout, self._tls_timed_out
            )
            return
        self.write(protocol.info(self._info()))
        self._greeted()

    def _info(self) -> dict[str, Any]:
        info = self.host.info(self.client_id)
        tls = self.settings.tls
        if tls is not None:
            info["tls_required"] = True
            if tls.verify:
                info["tls_verify"] = True
        authenticator = self.authenticator
        if authenticator.required:
            # As nats-server: with a no_auth_user, a client need not present credentials.
            if authenticator.config.no_auth_user is None:
                info["auth_required"] = True
            if authenticator.uses_nkeys:
                self.nonce = base64.urlsafe_b64encode(os.urandom(11)).rstrip(b"=")
                info["nonce"] = self.nonce.decode()
        return info

    def _greeted(self) -> None:
        """After INFO (and the TLS handshake): keepalive, and the auth deadline."""
        self._schedule_ping()
        timeout = self.authenticator.timeout
        if self.authenticator.required and timeout > 0:
            # As nats-server: a client that never authenticates does not hold a connection.
            self._auth_timer = asyncio.get_running_loop().call_later(timeout, self._auth_timed_out)

    def _tls_received(self, data: bytes) -> bytes:
        """Ciphertext in, plaintext out (b"" while the handshake goes on or if it failed)."""
        assert self.tls is not None and self.transport is not None
        try:
            plain, reply = self.tls.receive(data)
        except TlsError as exc:
            # A plain client, a wrong or expired certificate: the alert goes out, the
            # connection closes, nobody else notices. Or the client closed TLS: ours goes out.
            if not exc.clean:
                log.info("client %d: TLS error: %s", self.client_id, exc.reason)
            self._out.clear()  # no more plaintext can go out
            if exc.reply:
                self.transport.write(exc.reply)
            self.close()
            return b""
        if reply:
            self.transport.write(reply)
        if self._tls_timer is not None and self.tls.handshake_done:
            self._tls_established()
        return plain

    def _tls_established(self) -> None:
        assert self.tls is not None and self._tls_timer is not None
        self._tls_timer.cancel()
        self._tls_timer = None
        tls = self.settings.tls
        if tls is not None and tls.verify_and_map:
            self.certificate_names = certificate_names(self.tls.peer_certificate())
        if tls is not None and tls.handshake_first:
            self.write(protocol.info(self._info()))
        self._greeted()

    def _tls_timed_out(self) -> None:
        self._tls_timer = None
        if not self.closed:
            log.info("client %d: TLS handshake timeout", self.client_id)
            self.close()

    def data_received(self, data: bytes) -> None:
        self.last_activity = time.time()
        if self.tls is not None:
            data = self._tls_received(data)
            if not data or self.closed:
                return
        self.received(data)

    def received(self, data: bytes) -> None:
        """Protocol bytes from the client, in plain text (after TLS)."""
        parser = self.parser
        try:
            parser.receive_data(data)
            if self._checking is not None:
                return  # read in order once the CONNECT being checked is decided
            events = parser.events()
        except ProtocolError as exc:
            self._dispatch(exc.events, exc)
            return
        self._dispatch(events)

    def _dispatch(self, events: list[protocol.Event], error: ProtocolError | None = None) -> None:
        """Handle events in order; when a CONNECT's check goes off the loop, the rest (and
        the parser's error after them) wait for it in `_checking`."""
        for n, event in enumerate(events):
            if self.closed:
                return
            self._handle(event)
            if self._checking is not None:
                self._checking.extend(events[n + 1 :])
                self._checking_error = error
                return
        if error is not None and not self.closed:
            if error.send_err:
                self.write(protocol.err(error.message))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for timer in (self._ping_timer, self._auth_timer, self._tls_timer, self._deadline):
            if timer is not None:
                timer.cancel()
        self._release_drain_waiters()
        self.host.closed(self)

    def pause_writing(self) -> None:
        # Past the low-water mark: writers that pace themselves (drained) wait. Past
        # max_pending the client is not reading: the slow consumer cut.
        self._writing_paused = True
        if self._outbound() > self.settings.max_pending:
            self._slow_consumer(f"MaxPending of {self.settings.max_pending} Exceeded")

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._release_drain_waiters()

    def _outbound(self) -> int:
        """Bytes that wait for the client: not yet handed to the transport, and in it."""
        waiting = self.transport.get_write_buffer_size() if self.transport is not None else 0
        return self._out_bytes + waiting

    def drained(self) -> asyncio.Future[None] | None:
        """None once what waits for the client is down to the low-water mark, or the
        connection closed; else a future done when that may have changed (ask again then). A
        writer of a long run (a pull request's batch) holds at most a chunk more than the mark,
        and a client that stops reading is cut by write_deadline or max_pending rather than
        making the agent hold the rest of the run."""
        if self.closed or self._outbound() <= self._drain_mark:
            return None
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        return waiter

    def _release_drain_waiters(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _deadline_passed(self, before: int) -> None:
        """write_deadline after a write: a client whose socket took no bytes since (what
        waits has not shrunk) is a slow consumer; one that read some is given another."""
        self._deadline = None
        if self.closed or self.transport is None:
            return
        waiting = self.transport.get_write_buffer_size()
        if not waiting:
            return
        if before <= waiting:
            seconds = self.settings.write_deadline
            self._slow_consumer(
                f"WriteDeadline of {seconds:g}s exceeded with {waiting} total bytes",
                reason=SLOW_CONSUMER_DEADLINE,
            )
            return
        self._deadline = asyncio.get_running_loop().call_later(
            self.settings.write_deadline, self._deadline_passed, waiting
        )

    def _slow_consumer(self, why: str, reason: str = SLOW_CONSUMER) -> None:
        """Close a client that does not read what it is sent, as nats-server does: logged in
        its words, counted, and what waits for it dropped (closing would wait for it)."""
        if self.closed:
            return
        log.info("%s:%d - cid:%d - Slow Consumer Detected: %s", *self.peer, self.client_id, why)
        self.close_reason = reason
        self._out.clear()
        self._out_bytes = 0
        self.closed = True
        self._release_drain_waiters()
        if self.transport is not None:
            self.transport.abort()

    # -- events ----------------------------------------------------------------------------

    def _handle(self, event: protocol.Event) -> None:
        cls = type(event)
        if self.identity is None and cls is not Connect:
            self.error_and_close(AUTH_VIOLATION)
            return
        if cls is Pubs:
            assert isinstance(event, Pubs)
            if self.verbose or self.pedantic or self.permissions is not None:
                # Frame by frame, as lone PUBs: a +OK each, each subject checked.
                for pub in event.pubs():
                    if self.closed:
                        return
                    self._handle(pub)
                return
            n = len(event.subjects)
            self.in_msgs += n
            self.in_bytes += event.payload_bytes
            # More of this client's publishes are on their way when the read ended inside a
            # frame, or when it has read more PubAcks than it has sent publishes since (a
            # pipelined client refilling its window, often in several writes).
            owed = self._refills_owed - n
            self._refills_owed = owed if owed > 0 else 0
            more = self.parser.partial or (owed > 0 and time.monotonic() < self._refills_by)
            self.host.publish_run(self, event.subjects, event.replies, event.payloads, more)
            return
        if cls is Pub:
            assert isinstance(event, Pub)
            self.in_msgs += 1
            self.in_bytes += len(event.payload)
            subject = self._publish_subject(event.subject)
            if self.permissions is not None and not self.permissions.may_publish(subject):
                self._publish_violation(subject)
                return
            self.host.publish(self, subject, event.reply, None, event.payload)
        elif cls is Acks:
            assert isinstance(event, Acks)
            self.in_msgs += len(event.subjects)
            self.in_bytes += event.payload_bytes
            subjects = event.subjects
            if not all(map(str.isascii, subjects)):
                subjects = [_text(subject) for subject in subjects]
            if self.permissions is not None:
                subjects = self._permitted_acks(subjects)
            self.host.acks(self, subjects)
            if self.verbose and not self.closed:
                self.write(protocol.OK * len(subjects))
            return
        elif cls is HPub:
            assert isinstance(event, HPub)
            self.in_msgs += 1
            self.in_bytes += len(event.payload) + len(event.headers)
            subject = self._publish_subject(event.subject)
            if self.permissions is not None and not self.permissions.may_publish(subject):
                self._publish_violation(subject)
                return
            self.host.publish(self, subject, event.reply, event.headers, event.payload)
        elif cls is Ping:
            self.write(protocol.PONG)
            return
        elif cls is Pong:
            self.pings_out = 0
            return
        elif cls is Sub:
            assert isinstance(event, Sub)
            if not self._subscribe(event):
                return  # refused with -ERR; nats-server sends no +OK after it
        elif cls is Unsub:
            assert isinstance(event, Unsub)
            self._unsubscribe(event)
        elif cls is Connect:
            assert isinstance(event, Connect)
            if not self._connect(event.options):
                return
        if self.verbose and not self.closed:
            self.write(protocol.OK)

    def _publish_subject(self, subject: str) -> str:
        """The subject a publish goes on with, after nats-server's pedantic check.

        As nats-server, a pedantic client is told about a subject that is not a valid literal
        one, and the message goes on all the same. Bytes that are not UTF-8 become U+FFFD (as
        nats-server's JSON answers show them): stored subjects are text in metadata and JSON.
        """
        if self.pedantic and not is_valid_subject(subject, allow_wildcards=False):
            self.write(protocol.err(INVALID_PUBLISH_SUBJECT))
        return subject if subject.isascii() else _text(subject)

    def _connect(self, options: dict[str, Any]) -> bool:
        if self._auth_timer is not None:
            # As nats-server: the CONNECT came in time, however long its check takes.
            self._auth_timer.cancel()
            self._auth_timer = None
        if self.authenticator.slow:
            # A password check that may take a core for a while: off the loop, and nothing
            # more of this client is read until it is decided (see _checked).
            self._checking = []
            self.set_paused(CHECKING, True)
            task = asyncio.ensure_future(
                self.authenticator.check(options, self.peer[0], self.nonce, self.certificate_names)
            )
            task.add_done_callback(lambda done: self._checked(options, done))
            return False
        identity = self.authenticator.authenticate(options, self.nonce, self.certificate_names)
        return self._authenticated(options, identity)

    def _checked(self, options: dict[str, Any], done: asyncio.Future[Identity | None]) -> None:
        """A CONNECT's check is decided: accept it or refuse it, then handle what the client
        sent after it, in order."""
        held, error = self._checking or [], self._checking_error
        self._checking, self._checking_error = None, None
        if self.closed:
            return
        identity = None if done.cancelled() or done.exception() else done.result()
        if self._authenticated(options, identity) and self.verbose and not self.closed:
            self.write(protocol.OK)
        self._dispatch(held, error)
        if self.closed or self._checking is not None:
            return
        self.set_paused(CHECKING, False)
        self.received(b"")

    def _authenticated(self, options: dict[str, Any], identity: Identity | None) -> bool:
        if identity is None:
            log.info("client %d: authorization violation", self.client_id)
            self.error_and_close(AUTH_VIOLATION)
            return False
        if options.get("protocol", 0) not in (0, 1):
            # As nats-server (client.go processConnect): only protocols 0 and 1 exist.
            self.error_and_close(INVALID_CLIENT_PROTOCOL)
            return False
        self.options = options
        self.connected = True
        self.set_identity(identity)
        # A CONNECT that leaves the field out keeps nats-server's default: verbose on.
        self.verbose = bool(options.get("verbose", True))
        self.pedantic = bool(options.get("pedantic", False))
        self.headers = bool(options.get("headers", False))
        self.parser.headers = self.headers
        self.no_responders = bool(options.get("no_responders", False))
        if self.no_responders and not self.headers:
            # As nats-server (client.go processConnect): refused with -ERR, then closed.
            self.error_and_close(NO_RESPONDERS_NEED_HEADERS)
            return False
        return True

    def set_identity(self, identity: Identity) -> None:
        """Who the client is (at CONNECT, and again when a reload changes its user)."""
        self.identity = identity
        self.permissions = (
            PermissionChecker(identity.permissions) if identity.permissions is not None else None
        )

    def reauthenticate(self) -> bool:
        """After a reload: the same CONNECT against the new configuration. False (and closed)
        if its user is gone or moved to another account, or (with an Authorization Violation)
        if its credentials no longer pass; else the new identity, and the subscriptions its
        permissions no longer allow are removed, each with nats-server's -ERR."""
        if self.identity is not None and self.authenticator.moved(self.identity):
            # As nats-server: a user that is gone, or now in another account, is closed
            # without a word (it may connect again, into its new account).
            log.info("client %d: user removed or moved by reload, closing", self.client_id)
            self.close()
            return False
        identity = self.authenticator.authenticate(self.options, self.nonce, self.certificate_names)
        if identity is None:
            log.info("client %d: authorization violation after reload", self.client_id)
            self.error_and_close(AUTH_VIOLATION)
            return False
        self.set_identity(identity)
        permissions = self.permissions
        if permissions is not None:
            for sub in list(self.subs.values()):
                if not permissions.may_subscribe(sub.subject, sub.queue):
                    text = f"Permissions Violation for Subscription to {_quoted(sub.subject)}"
                    if sub.queue:
                        text += f" using queue {_quoted(sub.queue)}"
                    self.write(protocol.err(f"{text} (sid {_quoted(sub.sid)})"))
                    self.remove_subscription(sub)
        return True

    def _subscribe(self, event: Sub) -> bool:
        if not protocol_subject_ok(event.subject):
            self.write(protocol.err(INVALID_SUBJECT))
            return False
        if event.sid in self.subs:
            return True
        if self.permissions is not None and not self.permissions.may_subscribe(
            event.subject, event.queue
        ):
            # As nats-server: refused with -ERR, and the connection stays open.
            text = f"Permissions Violation for Subscription to {_quoted(event.subject)}"
            if event.queue:
                text += f" using queue {_quoted(event.queue)}"
            log.warning("client %d: %s", self.client_id, text)
            self.write(protocol.err(text))
            return False
        sub = Subscription(self, event.subject, event.sid, event.queue)
        self.subs[event.sid] = sub
        self.host.subscribe(sub)
        return True

    def _publish_violation(self, subject: str) -> None:
        # As nats-server: the message is dropped, -ERR says why, the connection stays open.
        text = f"Permissions Violation for Publish to {_quoted(subject)}"
        log.warning("client %d: %s", self.client_id, text)
        self.write(protocol.err(text))

    def _permitted_acks(self, subjects: list[str]) -> list[str]:
        """The acks this client may publish; each other one is a violation."""
        permissions = self.permissions
        assert permissions is not None
        allowed = []
        for subject in subjects:
            if permissions.may_publish(subject):
                allowed.append(subject)
            else:
                self._publish_violation(subject)
        return allowed

    def _unsubscribe(self, event: Unsub) -> None:
        sub = self.subs.get(event.sid)
        if sub is None:
            return
        if event.max_msgs and event.max_msgs > sub.delivered:
            sub.max_msgs = event.max_msgs
            return
        self.remove_subscription(sub)

    def remove_subscription(self, sub: Subscription) -> None:
        if self.subs.pop(sub.sid, None) is not None:
            self.host.unsubscribe(sub)

    # -- output ----------------------------------------------------------------------------

    def deliver_many(self, sub: Subscription, messages: list[protocol.Outgoing]) -> None:
        """Write messages to a subscription as one buffer, up to its message limit (then end
        it, as an auto-unsubscribe does)."""
        if sub.max_msgs:
            messages = messages[: max(sub.max_msgs - sub.delivered, 0)]
        if not messages:
            return
        permissions = self.permissions
        if permissions is not None and permissions.tracks_replies:
            # allow_responses: the client may answer what it was sent.
            for message in messages:
                reply = message[1]
                if reply:
                    permissions.delivered_reply(reply if isinstance(reply, str) else reply.decode())
        self.write(protocol.msgs(sub.sid, messages, self.headers))
        self.out_msgs += len(messages)
        self.out_bytes += sum(len(m[3]) for m in messages)
        sub.delivered += len(messages)
        if sub.max_msgs and sub.delivered >= sub.max_msgs:
            self.remove_subscription(sub)

    def deliver_replies(
        self, sub: Subscription, subjects: list[bytes], payloads: list[bytes]
    ) -> None:
        """Write messages without reply or headers, each on its own subject (a run of
        PubAcks to their reply subjects), to a subscription, as `deliver_many` would."""
        if sub.max_msgs:
            room = max(sub.max_msgs - sub.delivered, 0)
            subjects, payloads = subjects[:room], payloads[:room]
        if not subjects:
            return
        self.write(protocol.msg_run(sub.sid, subjects, payloads))
        self._refills_owed += len(subjects)
        self._refills_by = time.monotonic() + REFILL_SECONDS
        self.out_msgs += len(subjects)
        self.out_bytes += sum(map(len, payloads))
        sub.delivered += len(subjects)
        if sub.max_msgs and sub.delivered >= sub.max_msgs:
            self.remove_subscription(sub)

    def write(self, data: bytes) -> None:
        if self.closed or self.handing_over:
            return
        self._out_bytes += len(data)
        if self._writing_paused or self._out_bytes > self._pending_check:
            # Rarely: the transport holds more than the low-water mark, or one large write
            # could take what waits past max_pending.
            transport = self.transport
            waiting = transport.get_write_buffer_size() if transport is not None else 0
            if self._out_bytes + waiting > self.settings.max_pending:
                self._slow_consumer(f"MaxPending of {self.settings.max_pending} Exceeded")
                return
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def flush_now(self) -> None:
        """Write what is queued now, not at the loop's next turn: PubAcks go out the moment
        their commit is durable, ahead of the work the commit wakes (pull requests, the
        next flush)."""
        if self._flush_scheduled:
            self._flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self.closed or self.transport is None or not self._out:
            self._out.clear()
            self._release_drain_waiters()
            return
        tls = self.tls
        if tls is not None and not tls.handshake_done:
            return  # nothing goes out in plain text once TLS is expected
        out = self._out
        self._out = []
        self._out_bytes = 0
        if tls is None:
            # Handed over as they are: the loop writes them with one writev, no join.
            if len(out) == 1:
                self.transport.write(out[0])
            else:
                self.transport.writelines(out)
        else:
            self.transport.write(tls.send(out[0] if len(out) == 1 else b"".join(out)))
        if self._deadline is None and not self.closed and self.settings.write_deadline > 0:
            waiting = self.transport.get_write_buffer_size()
            if waiting:  # the socket did not take it all: the write deadline runs
                self._deadline = asyncio.get_running_loop().call_later(
                    self.settings.write_deadline, self._deadline_passed, waiting
                )
        if self._drain_waiters:
            self._release_drain_waiters()

    def error_and_close(self, message: str) -> None:
        self.write(protocol.err(message))
        self.close_reason = CLOSE_REASONS.get(message, "Protocol Violation")
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self._flush()
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def hand_over(self) -> None:
        """Lame duck mode's close: what is written goes out, then the end of the stream, so the
        client reconnects elsewhere; what it sent meanwhile is still read and served (the
        client closes its side once it sees the end, and the connection is lost then)."""
        if self.closed or self.transport is None or self.handing_over:
            return
        self._flush()
        self.handing_over = True
        if self.tls is not None or not self.transport.can_write_eof():
            self.close()
        else:
            self.transport.write_eof()

    def no_responders_reply(self, reply: str | None) -> None:
        """Answer a request nothing serves with the 503 status, if the client asked for it."""
        if not reply or not self.no_responders:
            return
        for sub in self.host.subscribers(reply):
            if sub.conn is self:
                self.deliver_many(sub, [(reply, None, NO_RESPONDERS, b"")])
                return

    # -- flow control and keepalive --------------------------------------------------------

    def set_paused(self, reason: str, paused: bool) -> None:
        if self.transport is None or self.closed:
            return
        was = bool(self._paused_by)
        if paused:
            self._paused_by.add(reason)
        else:
            self._paused_by.discard(reason)
        now = bool(self._paused_by)
        if now and not was:
            self.transport.pause_reading()
        elif was and not now:
            self.transport.resume_reading()

    def _schedule_ping(self) -> None:
        interval = self.settings.ping_interval
        if interval > 0:
            self._ping_timer = asyncio.get_running_loop().call_later(interval, self._ping)

    def _auth_timed_out(self) -> None:
        if not self.connected:
            self.error_and_close(AUTH_TIMEOUT)

    def _ping(self) -> None:
        if self.closed:
            return
        if self.pings_out >= self.settings.max_pings_out:
            self.error_and_close(STALE_CONNECTION)
            return
        self.pings_out += 1
        self.write(protocol.PING)
        self._schedule_ping()


def _quoted(text: str) -> str:
    """Go's %q of plain text, as nats-server's error messages quote subjects."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _text(subject: str) -> str:
    """A subject as text: the parser keeps bytes that are not UTF-8 as surrogate escapes,
    which metadata keys and JSON can not hold; they become U+FFFD."""
    return subject.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def protocol_subject_ok(subject: str) -> bool:
    return is_valid_subject(subject)
