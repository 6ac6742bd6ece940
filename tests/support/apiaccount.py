"""One account's JetStream API over a real SQLite metadata store and an in-memory object store,
wired as the agent wires it (server/wiring.py), without connections: what the API sends is
collected, and publishes go through the write buffer. For the unit tests of handlers/.

    async with api_account(tmp_path) as account:
        await account.create_stream(name="S")
        info = await account.request("STREAM.INFO.S")
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infinistream.consumer.service import ConsumerService
from infinistream.consumer.store import ConsumerStore
from infinistream.handlers.consumers import ConsumerApi
from infinistream.handlers.router import JetStreamApi
from infinistream.handlers.streams import StreamApi
from infinistream.metadata.sqlite import SqliteMetadataStore
from infinistream.protocol import Outgoing
from infinistream.storage import ObjectStore, SectionCache
from infinistream.stream.catalog import Catalog
from infinistream.stream.committer import Committer
from infinistream.stream.damage import DamageLog
from infinistream.stream.put_budget import PutBudget
from infinistream.stream.reader import MessageReader
from infinistream.stream.write_buffer import WriteBuffer
from support.committers import Reads

GROUP = "g"


@dataclass
class Outbox:
    """What the API hands the agent to send: (subject, headers, payload), in order."""

    sent: list[tuple[str, bytes | None, bytes]] = field(default_factory=list)
    acks: dict[str, bytes] = field(default_factory=dict)

    def send(self, subject: str, headers: bytes | None, payload: bytes) -> None:
        self.sent.append((subject, headers, payload))

    def deliver_many(self, inbox: str, messages: list[Outgoing]) -> None:
        self.sent += [(inbox, headers, data) for _, _, headers, data in messages]

    def distribute(self, subject: str, messages: list[Outgoing]) -> None:
        self.deliver_many(subject, messages)

    def send_acks(self, replies: list[str], payloads: list[bytes]) -> None:
        self.acks.update(zip(replies, payloads, strict=True))

    def to(self, reply: str) -> list[tuple[bytes | None, bytes]]:
        """What was sent to `reply`, and forget it."""
        got = [(h, p) for s, h, p in self.sent if s == reply]
        self.sent = [m for m in self.sent if m[0] != reply]
        return got


@dataclass
class Account:
    meta: SqliteMetadataStore
    catalog: Catalog
    consumers: ConsumerService
    write_buffer: WriteBuffer
    streams: StreamApi
    consumer_api: ConsumerApi
    api: JetStreamApi
    outbox: Outbox
    _n: int = 0

    async def request(
        self, subject: str, body: Any = b"", headers: bytes | None = None
    ) -> dict[str, Any]:
        """The JSON answer to `$JS.API.<subject>` (a body that is not bytes is sent as JSON)."""
        self._n += 1
        reply = f"_R.{self._n}"
        served = await self.api.handle("$JS.API." + subject, reply, headers, _body(body))
        assert served, subject
        ((_, payload),) = self.outbox.to(reply)
        return json.loads(payload)  # type: ignore[no-any-return]

    async def messages(self, subject: str, body: Any = b"") -> list[tuple[bytes | None, bytes]]:
        """What a request answered with messages sent to its reply (none: nothing serves it)."""
        self._n += 1
        reply = f"_R.{self._n}"
        if not await self.api.handle("$JS.API." + subject, reply, None, _body(body)):
            return []
        return self.outbox.to(reply)

    async def create_stream(self, **config: Any) -> dict[str, Any]:
        config.setdefault("subjects", [f"{config['name'].lower()}.>"])
        response = await self.request(f"STREAM.CREATE.{config['name']}", config)
        assert "error" not in response, response
        return response

    async def publish(
        self, stream: str, subject: str, data: bytes = b"", headers: bytes | None = None
    ) -> dict[str, Any]:
        """Publish through the write buffer and wait for the PubAck."""
        self._n += 1
        reply = f"_P.{self._n}"
        self.write_buffer.append(stream, subject, headers, data, reply)
        await self.write_buffer.drain()
        return json.loads(self.outbox.acks.pop(reply))  # type: ignore[no-any-return]


def _body(body: Any) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


@contextlib.asynccontextmanager
async def api_account(tmp_path: Path) -> AsyncIterator[Account]:
    meta = SqliteMetadataStore(tmp_path / "meta.db")
    objects = ObjectStore.from_url("memory://")
    cache: SectionCache[bytes] = SectionCache(1 << 20)
    reader = MessageReader(objects, cache, DamageLog())
    outbox = Outbox()
    catalog = Catalog(meta, GROUP, directories=reader.segment)
    store = ConsumerStore(meta, catalog)
    committer = Committer(meta, catalog)
    consumers = ConsumerService(
        meta,
        catalog,
        store,
        committer,
        reader,
        outbox.send,
        outbox.deliver_many,
        outbox.distribute,
        lambda subject: False,
        meta.watch(f"{GROUP}/"),
    )
    write_buffer = WriteBuffer(
        objects,
        committer,
        cache,
        outbox.send_acks,
        group=GROUP,
        agent_id="test",
        # A local directory's budget (settings.LOCAL_LINGER): publishes are not held back.
        budget=PutBudget(rate=4000, burst=4),
        on_commit=consumers.streams_committed,
    )
    streams = StreamApi(meta, catalog, committer, reader, consumers, server_name="agent")
    consumer_api = ConsumerApi(meta, catalog, consumers)
    api = JetStreamApi(streams, consumer_api, consumers, outbox.send)
    yield Account(meta, catalog, consumers, write_buffer, streams, consumer_api, api, outbox)
    await write_buffer.drain()
    await consumers.stop()
    await meta.close()


async def fresh_agent(account: Account) -> tuple[StreamApi, Reads]:
    """The streams API of another agent started just now on the account's stores: its catalog
    read (as an account's start reads it), nothing of any stream's index, an empty section
    cache; and its metadata store, counting."""
    meta = Reads(account.meta)
    shared = account.streams.reader
    reader = MessageReader(shared.objects, SectionCache(1 << 20), DamageLog())
    catalog = Catalog(meta, GROUP, directories=reader.segment)
    await catalog.refresh(force=True)
    streams = dataclasses.replace(
        account.streams,
        meta=meta,
        catalog=catalog,
        committer=Committer(meta, catalog),
        reader=reader,
    )
    meta.counted()
    return streams, meta
