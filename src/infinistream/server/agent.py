"""The agent: one process that NATS clients connect to, holding nothing of its own.

It wires the pieces together: client connections and their subscriptions, the JetStream API,
the write buffer that turns publishes into objects and commits, and the background work that
keeps the catalog fresh and expires old messages.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import platform
import resource
import time
from typing import Any

from infinistream import __version__, protocol
from infinistream.consumer.service import ConsumerService
from infinistream.handlers.router import JetStreamApi, account_info_response
from infinistream.handlers.streams import StreamApi
from infinistream.jetstream.subjects import SubjectIndex
from infinistream.metadata import open_metadata
from infinistream.metadata.kv import MetadataStore
from infinistream.server.connection import ClientConnection, Subscription
from infinistream.server.monitor import MonitorServer
from infinistream.settings import Settings
from infinistream.storage import ObjectStore, SectionCache
from infinistream.stream.catalog import Catalog
from infinistream.stream.committer import Committer
from infinistream.stream.limits import expire
from infinistream.stream.reader import MessageReader
from infinistream.stream.records import decode_state
from infinistream.stream.write_buffer import WriteBuffer

log = logging.getLogger(__name__)

# The nats-server release whose client protocol and JetStream API this agent speaks. Clients
# choose API features by the server version they see, so INFO reports this one.
NATS_COMPAT_VERSION = "2.11.0"
CATALOG_POLL_SECONDS = 0.25
REPLY_MEMO_MAX = 4096
EXPIRY_POLL_SECONDS = 1.0


class Agent:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.server_id = "N" + os.urandom(27).hex().upper()[:55]
        self.subscriptions: SubjectIndex[Subscription] = SubjectIndex()
        self.connections: dict[int, ClientConnection] = {}
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None
        self._monitor: MonitorServer | None = None
        self._refreshing: asyncio.Task[None] | None = None
        self.started = time.time()
        self._reply_memo: dict[str, list[Subscription]] = {}
        self._reply_memo_generation = -1
        self.total_connections = 0
        # Message counters of closed connections: /varz reports server totals, as nats-server.
        self.closed_counts = {"in_msgs": 0, "out_msgs": 0, "in_bytes": 0, "out_bytes": 0}
        self.port = settings.port
        self.http_port = settings.http_port
        self.meta: MetadataStore
        self.objects: ObjectStore
        self.catalog: Catalog
        self.write_buffer: WriteBuffer
        self.api: JetStreamApi

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        s = self.settings
        if not s.objects or not s.metadata:
            os.makedirs(s.store_dir, exist_ok=True)
        self.meta = open_metadata(s.metadata_url)
        self.objects = ObjectStore.from_url(
            s.objects_url,
            endpoint=s.s3_endpoint,
            region=s.s3_region,
            access_key_id=s.s3_access_key_id,
            secret_access_key=s.s3_secret_access_key,
        )
        self.catalog = Catalog(self.meta, s.group)
        await self.catalog.refresh(force=True)
        self.committer = Committer(self.meta, self.catalog)
        self.cache: SectionCache[bytes] = SectionCache(s.cache_bytes)
        self.reader = MessageReader(self.objects, self.cache)
        self.write_buffer = WriteBuffer(
            self.objects,
            self.committer,
            self.cache,
            self._send_ack,
            group=s.group,
            agent_id=self.server_id[-8:],
            linger=s.linger,
            batch_bytes=s.batch_bytes,
        )
        self.write_buffer.on_pressure.append(self._pressure)
        self.streams = StreamApi(
            self.meta, self.catalog, self.committer, self.reader, server_name=s.server_name
        )
        self.api = JetStreamApi(self.streams, self.send, self._account_info)
        self.consumers = ConsumerService(
            self.meta,
            self.catalog,
            self.committer,
            self.reader,
            self.send,
            self.deliver_many,
            self.has_interest,
            server_name=s.server_name,
        )
        self.api.consumer_handler = self.consumers.handle_api
        self.api.next_handler = self.consumers.next_request
        self.streams.consumer_count = self.consumers.count
        self.streams.on_purged = self.consumers.purged
        self.write_buffer.on_commit.append(
            lambda outcomes: self.consumers.streams_committed(list(outcomes))
        )
        self.consumers.start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: ClientConnection(self, next(self._ids)),
            s.host,
            max(s.port, 0),  # -1 (nats-server's RANDOM_PORT) and 0 both mean any free port
            reuse_address=True,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        if s.http_port:
            self._monitor = MonitorServer({"/healthz": self._healthz, "/varz": self._varz})
            # 0 means no monitoring; -1 (nats-server's RANDOM_PORT) means any free port.
            self.http_port = await self._monitor.start(s.http_host, max(s.http_port, 0))
        self._spawn(self._poll_catalog())
        self._spawn(self._expire_loop())
        # Jobs role (off by default): compaction and the janitor on a schedule, one agent per
        # job at a time by lease. Stopping the agent cancels it, which stops a running job.
        if s.jobs:
            from infinistream.pipeline.scheduler import JobScheduler

            self.jobs = JobScheduler(s, self.meta, holder=f"{s.server_name}/{self.server_id}")
            self._spawn(self.jobs.run())

    async def stop(self) -> None:
        """Stop taking connections, answer every publish in flight, then close."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections.values()):
            conn.set_paused("shutdown", True)
        # Publishes held back for a catalog refresh are pending too: let them reach the write
        # buffer (or get their answer) before it drains, rather than cancelling them below.
        if self._refreshing is not None:
            await asyncio.gather(self._refreshing, return_exceptions=True)
        await self.write_buffer.drain()
        await self.consumers.stop()
        # Let the acks just written reach the sockets before closing them.
        await asyncio.sleep(0)
        for conn in list(self.connections.values()):
            conn.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._monitor is not None:
            await self._monitor.close()
        await self.meta.close()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- connections -----------------------------------------------------------------------

    def connection_opened(self, conn: ClientConnection) -> None:
        self.connections[conn.client_id] = conn
        self.total_connections += 1

    def connection_closed(self, conn: ClientConnection) -> None:
        if self.connections.pop(conn.client_id, None) is not None:
            for name in self.closed_counts:
                self.closed_counts[name] += getattr(conn, name)
        for sub in list(conn.subs.values()):
            conn.remove_subscription(sub)

    def info(self, client_id: int) -> dict[str, Any]:
        s = self.settings
        info: dict[str, Any] = {
            "server_id": self.server_id,
            "server_name": s.server_name,
            "version": NATS_COMPAT_VERSION,
            "proto": 1,
            "go": f"infinistream {__version__} (python {platform.python_version()})",
            "host": s.host,
            "port": self.port,
            "headers": True,
            "max_payload": s.max_payload,
            "jetstream": True,
            "client_id": client_id,
            "connect_urls": [f"{_advertised(s.host)}:{self.port}"],
        }
        if s.auth_required:
            info["auth_required"] = True
        return info

    def _pressure(self, pressured: bool) -> None:
        for conn in list(self.connections.values()):
            conn.set_paused("write-buffer", pressured)

    # -- messages --------------------------------------------------------------------------

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
        """A run of plain acks (no reply, no body to read): as many `publish` calls, in one."""
        if conn.deferred:
            conn.deferred += [(subject, None, None, b"") for subject in subjects]
        else:
            self.consumers.plain_acks(subjects)

    def _route(
        self,
        conn: ClientConnection,
        subject: str,
        reply: str | None,
        headers: bytes | None,
        payload: bytes,
    ) -> bool:
        """Hand a publish to the JetStream API or a stream; False if no stream captures it."""
        if subject.startswith("$JS."):
            if subject.startswith("$JS.ACK."):
                # A consumer's client sends one per message: the shortest way in.
                self.consumers.ack(subject, reply, payload, conn.no_responders_reply)
            elif subject.startswith("$JS.API."):
                self._spawn(self._api_request(conn, subject, reply, headers, payload))
            else:
                conn.no_responders_reply(reply)
            return True
        stream = self.catalog.stream_for_subject(subject)
        if stream is None:
            return False
        self.write_buffer.append(stream, subject, headers, payload, reply)
        return True

    def _refresh_and_replay(self) -> None:
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = self._spawn(self._replay_deferred())

    async def _replay_deferred(self) -> None:
        try:
            await self.catalog.refresh()
        except Exception:
            log.exception("catalog refresh failed")
        # No awaits below: each connection's held publishes go out in order, in one go.
        for conn in list(self.connections.values()):
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

    def send(self, subject: str, headers: bytes | None, payload: bytes) -> None:
        """Deliver a message from the server to every subscription that matches."""
        self.deliver_many(subject, [(subject, None, headers, payload)])

    def deliver_many(self, inbox: str, messages: list[protocol.Outgoing]) -> None:
        """Deliver to the subscriptions matching `inbox`, matched once for all the messages.

        A pull request's batch: each MSG names its message's own subject and ack reply.
        """
        for sub in self.subscriptions.match(inbox, cache=False):
            sub.conn.deliver_many(sub, messages)

    def has_interest(self, subject: str) -> bool:
        return bool(self.subscriptions.match(subject, cache=False))

    def _send_ack(self, replies: list[str], payloads: list[bytes]) -> None:
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

    # -- background ------------------------------------------------------------------------

    async def _poll_catalog(self) -> None:
        while True:
            await asyncio.sleep(CATALOG_POLL_SECONDS)
            try:
                await self.catalog.refresh()
            except Exception:
                log.exception("catalog refresh failed")

    async def _expire_loop(self) -> None:
        """max_age applies even when nothing is published."""
        while True:
            await asyncio.sleep(EXPIRY_POLL_SECONDS)
            for name, entry in list(self.catalog.streams.items()):
                if entry.config.max_age <= 0:
                    continue
                try:
                    view = await self.catalog.view(name)
                    if view is None or not view.msgs:
                        continue
                    if view.first_ts > time.time_ns() - entry.config.max_age:
                        continue
                    await self.committer.change_stream(
                        name, lambda e, changes: expire(e, changes, time.time_ns())
                    )
                except Exception:
                    log.exception("expiring stream %s failed", name)

    # -- reports ---------------------------------------------------------------------------

    async def _account_info(self) -> dict[str, Any]:
        await self.catalog.refresh()
        keys = [e.keys.state for e in self.catalog.streams.values()]
        items = await self.meta.get_many(keys)
        storage = sum(decode_state(i.value).bytes for i in items.values())
        return account_info_response(
            streams=len(self.catalog.streams),
            consumers=0,
            storage=storage,
            total=self.api.total,
            errors_count=self.api.errors,
        )

    def _healthz(self) -> dict[str, Any]:
        return {"status": "ok"}

    def _varz(self) -> dict[str, Any]:
        s = self.settings
        usage = resource.getrusage(resource.RUSAGE_SELF)
        conns = list(self.connections.values())
        stats = self.write_buffer.stats
        return {
            "server_id": self.server_id,
            "server_name": s.server_name,
            "version": NATS_COMPAT_VERSION,
            "proto": 1,
            "host": s.host,
            "port": self.port,
            "http_port": self.http_port,
            "max_payload": s.max_payload,
            "max_pending": s.max_pending,
            "ping_interval": int(s.ping_interval * 1e9),
            "ping_max": s.max_pings_out,
            "auth_required": s.auth_required,
            "auth_timeout": s.auth_timeout,
            "jetstream": {
                "config": {"store_dir": s.store_dir, "objects": s.objects_url},
                "stats": {"streams": len(self.catalog.streams)},
            },
            "start": _rfc3339(self.started),
            "now": _rfc3339(time.time()),
            "uptime": f"{int(time.time() - self.started)}s",
            "mem": usage.ru_maxrss * 1024,
            "cores": os.cpu_count(),
            "cpu": 0,
            "connections": len(conns),
            "total_connections": self.total_connections,
            **{
                name: closed + sum(getattr(c, name) for c in conns)
                for name, closed in self.closed_counts.items()
            },
            "subscriptions": len(self.subscriptions),
            "infinistream": {
                "version": __version__,
                "group": s.group,
                "objects": s.objects_url,
                "metadata": s.metadata_url,
                "linger_ms": s.linger * 1000,
                "batch_bytes": s.batch_bytes,
                "flushes": stats.flushes,
                "objects_written": stats.objects,
                "messages_written": stats.messages,
                "bytes_written": stats.bytes,
                "failed_batches": stats.failed_batches,
                "commit_conflicts": self.committer.conflicts,
                "consumer_commits": self.consumers.store.commits,
                "consumer_conflicts": self.consumers.store.conflicts,
                "object_requests": dataclasses.asdict(self.objects.stats),
                "cache_bytes": self.cache.size_bytes,
            },
        }


def _deliver_run(subs: list[Subscription], run: list[protocol.Outgoing]) -> None:
    if run:
        for sub in subs:
            sub.conn.deliver_many(sub, run)


def _advertised(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
