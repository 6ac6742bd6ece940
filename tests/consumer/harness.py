"""One agent's consumer layer over real stores, without its network front end.

A `Node` is what an agent builds for one account below its connections: a SQLite metadata
store (two nodes on one file stand for two agents), an in-memory object store, a write buffer
to publish with, and the `ConsumerService` under test. What the service hands to clients lands
in an `Outbox`, which stands for this agent's connections: it knows which subjects its clients
subscribe to and keeps every message it was given, per subject. Time is a `ManualClock` the
test moves; the loops' own sleeps are real, so a test that moves the clock wakes them.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from infinistream.consumer.clock import Clock
from infinistream.consumer.config import ConsumerConfig, normalize
from infinistream.consumer.directory import target_ops
from infinistream.consumer.progress import starting_point
from infinistream.consumer.records import ConsumerRecord, ConsumerState, encode
from infinistream.consumer.retention import interest_lookup
from infinistream.consumer.service import ConsumerService
from infinistream.consumer.store import ConsumerStore, LoadedConsumer
from infinistream.jetstream.api import StreamConfig
from infinistream.jetstream.subjects import matches
from infinistream.metadata.kv import Compare, Op, Put, TxnResult
from infinistream.metadata.sqlite import SqliteMetadataStore
from infinistream.protocol import Outgoing
from infinistream.storage import ObjectStore, SectionCache
from infinistream.stream.catalog import Catalog
from infinistream.stream.committer import Committer
from infinistream.stream.compression import StreamCodecs
from infinistream.stream.damage import DamageLog
from infinistream.stream.put_budget import PutBudget
from infinistream.stream.reader import MessageReader
from infinistream.stream.write_buffer import WriteBuffer
from support.streamstores import GROUP, Sink, make_streams

STREAM = "ORDERS"
# Long enough for any wait a test means to end by an event; only a safety net.
PATIENCE = 10.0


class ManualClock:
    """Wall and monotonic time that move only when the test says."""

    def __init__(self) -> None:
        self.ns = time.time_ns()
        self.seconds = 1_000.0

    def advance(self, seconds: float) -> None:
        self.ns += int(seconds * 1e9)
        self.seconds += seconds

    @property
    def clock(self) -> Clock:
        return Clock(wall_ns=lambda: self.ns, monotonic=lambda: self.seconds)


def reply_of(msg: Outgoing) -> bytes:
    """A message's reply subject as it goes on the wire (b"" for none)."""
    reply = msg[1]
    return reply.encode() if isinstance(reply, str) else reply or b""


@dataclass
class Outbox:
    """This agent's clients, as the consumer layer sees them."""

    # Subjects (wildcards allowed) some client subscribes to; inboxes of pull requests too.
    subscribed: set[str] = field(default_factory=set)
    got: dict[str, list[Outgoing]] = field(default_factory=dict)
    # Ack replies answered as nats-server answers what nothing serves.
    unserved: list[str] = field(default_factory=list)
    # How many messages each write to an inbox carried, in order.
    writes: dict[str, list[int]] = field(default_factory=dict)
    # Set while the clients read what they are sent; cleared, `drained` waits (a client that
    # stopped reading, its outbound bytes above the low-water mark).
    reading: asyncio.Event = field(default_factory=asyncio.Event)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.reading.set()

    def has_interest(self, subject: str) -> bool:
        return any(matches(s, subject) for s in self.subscribed)

    def send(self, subject: str, headers: bytes | None, payload: bytes) -> None:
        self._add(subject, [(subject, None, headers, payload)])

    def deliver_many(self, inbox: str, msgs: list[Outgoing]) -> None:
        self.writes.setdefault(inbox, []).append(len(msgs))
        self._add(inbox, msgs)

    def drained(self, inbox: str) -> Awaitable[object] | None:
        return None if self.reading.is_set() else asyncio.ensure_future(self.reading.wait())

    def distribute(self, subject: str, msgs: list[Outgoing]) -> None:
        self._add(subject, msgs)

    def _add(self, subject: str, msgs: list[Outgoing]) -> None:
        self.got.setdefault(subject, []).extend(msgs)
        self._changed.set()

    def at(self, subject: str) -> list[Outgoing]:
        return self.got.get(subject, [])

    def messages(self, subject: str) -> list[Outgoing]:
        """What went to `subject` that carries an ack reply: messages, not statuses."""
        return [m for m in self.at(subject) if reply_of(m).startswith(b"$JS.ACK.")]

    def statuses(self, subject: str) -> list[bytes]:
        """The status lines (`NATS/1.0 408 Request Timeout`) that went to `subject`."""
        return [
            (m[2] or b"").split(b"\r\n")[0]
            for m in self.at(subject)
            if not reply_of(m).startswith(b"$JS.ACK.")
        ]

    async def until(self, done: Callable[[], bool], timeout: float = PATIENCE) -> None:
        """Wait until `done()` holds, looking again after each message."""
        async with asyncio.timeout(timeout):
            while not done():
                self._changed.clear()
                await self._changed.wait()


@dataclass
class Node:
    meta: Interleaving
    catalog: Catalog
    service: ConsumerService
    outbox: Outbox
    write_buffer: WriteBuffer
    time: ManualClock

    @property
    def store(self) -> ConsumerStore:
        return self.service.store

    async def publish(self, *messages: tuple[str, bytes], headers: bytes | None = None) -> None:
        """Publish and wait until committed (as the agent acks a publish)."""
        for subject, data in messages:
            self.write_buffer.append(STREAM, subject, headers, data, None)
        await self.write_buffer.drain()

    async def create(self, name: str, **fields: object) -> LoadedConsumer:
        """A consumer as the create API stores it (config checked and completed)."""
        entry = self.catalog.streams[STREAM]
        requested = ConsumerConfig(durable_name=name, **fields)  # type: ignore[arg-type]
        cfg = normalize(requested, stream_config=entry.config, name_in_subject=name)
        view = await self.catalog.view(STREAM)
        assert view is not None
        start, start_seqs = starting_point(cfg, view, 0)
        uid = os.urandom(8).hex()
        now = self.time.ns
        record = ConsumerRecord(config=cfg, created_ns=now, uid=uid)
        state = ConsumerState(
            uid=uid,
            stream_seq=start,
            ack_floor_stream=start_seqs[0] - 1 if start_seqs else start,
            start_seqs=start_seqs,
            last_active_ns=now,
        )
        keys = self.store.keys(STREAM, name)
        result = await self.meta.txn(
            [Compare(keys.config, 0)],
            [
                Put(keys.config, encode(record)),
                Put(keys.state, encode(state)),
                *target_ops(GROUP, keys, None, record.target()),
            ],
        )
        assert result.succeeded
        self.service.target_changed(STREAM, name, record.target())
        loaded = await self.store.load(STREAM, name)
        assert loaded is not None
        return loaded

    async def reconfigure(self, name: str, **changes: object) -> None:
        """Change a consumer's config as the create API's update does."""
        loaded = await self.store.load(STREAM, name)
        assert loaded is not None
        cfg = msgspec.structs.replace(loaded.record.config, **changes)
        record = msgspec.structs.replace(loaded.record, config=cfg)
        old, new = loaded.record.target(), record.target()
        result = await self.meta.txn(
            [Compare(loaded.keys.config, loaded.record_rev)],
            [Put(loaded.keys.config, encode(record)), *target_ops(GROUP, loaded.keys, old, new)],
        )
        assert result.succeeded
        self.store.forget(STREAM, name)
        if new != old:
            self.service.target_changed(STREAM, name, new)
        self.service.consumer_changed(STREAM, name)

    async def fetch(self, name: str, inbox: str, body: bytes) -> None:
        """A MSG.NEXT request from a client listening on `inbox`."""
        self.outbox.subscribed.add(inbox)
        assert await self.service.next_request(STREAM, name, inbox, body)

    def ack(self, msg: Outgoing, body: bytes = b"", reply: str | None = None) -> None:
        """A client's ack of `msg` (with `reply`: one that waits for its answer)."""
        self.service.ack(reply_of(msg).decode(), reply, body, self.outbox.unserved.append)

    def subscribe(self, subject: str) -> None:
        self.outbox.subscribed.add(subject)
        self.service.subscribed(subject)

    def unsubscribe(self, subject: str) -> None:
        self.outbox.subscribed.discard(subject)
        self.service.unsubscribed(subject)

    async def state(self, name: str) -> LoadedConsumer:
        await self.service.acks.commit_queued(STREAM, name)
        loaded = await self.store.load(STREAM, name)
        assert loaded is not None
        return loaded

    async def close(self) -> None:
        for engine in (self.service.pulls, self.service.push):
            for served in list(engine.active.values()):
                engine.consumer_deleted(served.stream, served.name)
        await self.service.stop()
        await self.write_buffer.drain()
        await self.meta.close()


class Interleaving(SqliteMetadataStore):
    """The real SQLite store, where another agent may commit just before this one's next
    transaction (`before_next_txn`): what a race between two agents looks like, made certain."""

    before_next_txn: Callable[[], Awaitable[None]] | None = None

    async def txn(
        self, compares: list[Compare], ops: list[Op], *, durable: bool = True
    ) -> TxnResult:
        step, self.before_next_txn = self.before_next_txn, None
        if step is not None:
            await step()
        return await super().txn(compares, ops, durable=durable)


async def make_node(
    path: Path, manual: ManualClock | None = None, *, start: bool = False, **stream: object
) -> Node:
    """A node on the SQLite file `path`; the stream ORDERS (`orders.>`) is created if missing.

    `start`: run the service's background work too (the watch for other agents' commits).
    """
    meta = Interleaving(path)
    cfg = StreamConfig(name=STREAM, subjects=["orders.>"], **stream)  # type: ignore[arg-type]
    catalog = Catalog(meta, GROUP)
    await catalog.refresh(force=True)
    if STREAM not in catalog.streams:
        catalog = await make_streams(meta, **{STREAM: cfg})
    manual = manual or ManualClock()
    # Objects beside the metadata file: nodes on one file share them, as agents share a bucket.
    (path.parent / "objects").mkdir(exist_ok=True)
    objects = ObjectStore.from_url(str(path.parent / "objects"))
    cache: SectionCache[bytes] = SectionCache(1 << 24)
    store = ConsumerStore(meta, catalog)
    committer = Committer(meta, catalog, interest=interest_lookup(store))
    outbox = Outbox()
    reader = MessageReader(objects, cache, DamageLog())
    # Views read record directories from the objects, as an agent's do.
    catalog.directories = reader.segment
    service = ConsumerService(
        meta,
        catalog,
        store,
        committer,
        reader,
        outbox.send,
        outbox.deliver_many,
        outbox.distribute,
        outbox.has_interest,
        meta.watch(f"{GROUP}/"),
        clock=manual.clock,
        drained=outbox.drained,
    )
    write_buffer = WriteBuffer(
        objects,
        committer,
        cache,
        Sink(),
        group=GROUP,
        agent_id=os.urandom(4).hex(),
        budget=PutBudget(rate=1e6, burst=1000),
        on_commit=service.streams_committed,
        codec_of=StreamCodecs(catalog),
    )
    if start:
        service.start()
    return Node(meta, catalog, service, outbox, write_buffer, manual)
