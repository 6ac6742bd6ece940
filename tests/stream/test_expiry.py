"""Expiry: TTL entries written with their messages, never-expiring messages kept from max_age,
and delete markers placed once, against a real metadata store and the real write buffer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from infinistream.jetstream.api import StreamConfig
from infinistream.metadata.sqlite import SqliteMetadataStore
from infinistream.protocol import encode_headers, header_value
from infinistream.storage import ObjectStore, SectionCache
from infinistream.stream.catalog import Catalog
from infinistream.stream.committer import Committer
from infinistream.stream.damage import DamageLog
from infinistream.stream.expiry import Expiry
from infinistream.stream.reader import MessageReader
from infinistream.stream.records import seq_from_key
from infinistream.stream.view import StreamView
from infinistream.stream.write_buffer import WriteBuffer
from support.streamstores import GROUP, Sink, make_streams

S = 1_000_000_000


@pytest.fixture
async def meta(tmp_path: Path) -> AsyncIterator[SqliteMetadataStore]:
    store = SqliteMetadataStore(tmp_path / "meta.db")
    yield store
    await store.close()


class Agent:
    """What expiry needs of an agent: its catalog, committer, reader and write buffer."""

    def __init__(self, catalog: Catalog, objects: ObjectStore, now: list[int]) -> None:
        self.catalog = catalog
        self.committer = Committer(catalog.meta, catalog)
        cache: SectionCache[bytes] = SectionCache(1 << 20)
        self.reader = MessageReader(objects, cache, DamageLog())
        # Views read record directories from the objects, as an agent's do.
        catalog.directories = self.reader.segment
        self.buffer = WriteBuffer(objects, self.committer, cache, Sink(), group=GROUP, agent_id="t")
        self.expiry = Expiry(
            catalog.meta,
            catalog,
            self.committer,
            self.reader,
            self.buffer,
            clock=lambda: now[0],
        )

    async def publish(self, subject: str, ttl: str | None = None, **headers: str) -> None:
        if ttl is not None:
            headers["Nats-TTL"] = ttl
        self.buffer.append("T", subject, encode_headers(headers) if headers else None, b"x", None)
        await self.buffer.drain()

    async def view(self) -> StreamView:
        view = await self.catalog.view("T")
        assert view is not None
        return view


async def agent_on(meta: SqliteMetadataStore, cfg: StreamConfig, now: list[int]) -> Agent:
    catalog = await make_streams(meta, T=cfg)
    return Agent(catalog, ObjectStore.from_url("memory://"), now)


async def test_ttls_are_kept_in_metadata_and_expire_there(meta: SqliteMetadataStore) -> None:
    now = [0]
    agent = await agent_on(meta, StreamConfig(name="T", subjects=["t.>"], allow_msg_ttl=True), now)
    await agent.publish("t.a", "2s")
    await agent.publish("t.b", "never")
    await agent.publish("t.c")
    keys = agent.catalog.keys("T")
    entries = await meta.range(keys.expiry_prefix)
    assert [seq_from_key(e.key) for e in entries] == [1]
    view = await agent.view()
    assert view.never == {2}
    # Another agent rebuilds the same from metadata alone.
    other = Catalog(meta, GROUP)
    await other.refresh(force=True)
    rebuilt = await other.view("T")
    assert rebuilt is not None and await other.answer(rebuilt.nevers) == {2}
    # Not due yet: nothing happens.
    stamp = await agent.catalog.answer(lambda: view.ts_of(1))
    now[0] = stamp + S
    await agent.expiry.expire_once()
    assert list((await agent.view()).live_seqs()) == [1, 2, 3]
    now[0] = stamp + 2 * S
    await agent.expiry.expire_once()
    assert list((await agent.view()).live_seqs()) == [2, 3]
    assert await meta.range(keys.expiry_prefix) == []


async def test_never_is_exempt_from_max_age(meta: SqliteMetadataStore) -> None:
    now = [0]
    cfg = StreamConfig(name="T", subjects=["t.>"], allow_msg_ttl=True, max_age=S)
    agent = await agent_on(meta, cfg, now)
    await agent.publish("t.a")
    await agent.publish("t.b", "never")
    await agent.publish("t.c")
    view = await agent.view()
    now[0] = await agent.catalog.answer(lambda: view.ts_of(3)) + 2 * S
    await agent.expiry.expire_once()
    view = await agent.view()
    assert list(view.live_seqs()) == [2]
    assert (view.first_seq, view.never) == (2, {2})
    # Deleting it by other means drops its key too.
    await agent.committer.change_stream("T", lambda e, changes: changes.kill(2))
    assert await meta.range(agent.catalog.keys("T").never_prefix) == []
    assert (await agent.view()).never == set()


async def test_two_agents_place_one_marker(meta: SqliteMetadataStore) -> None:
    now = [0]
    cfg = StreamConfig(name="T", subjects=["t.>"], max_age=S, subject_delete_marker_ttl=S)
    objects = ObjectStore.from_url("memory://")
    first = Agent(await make_streams(meta, T=cfg), objects, now)
    other_catalog = Catalog(meta, GROUP)
    await other_catalog.refresh(force=True)
    second = Agent(other_catalog, objects, now)
    await first.publish("t.a")
    await first.publish("t.a")
    await first.publish("t.b")
    view = await first.view()
    now[0] = await first.catalog.answer(lambda: view.ts_of(3)) + 2 * S
    # Both agents run the pass before either marker is committed.
    await first.expiry.expire_once()
    await second.expiry.expire_once()
    await first.buffer.drain()
    await second.buffer.drain()
    view = await first.view()
    assert view.last_seq == 5
    assert list(view.live_seqs()) == [4, 5]
    for seq, subject in ((4, "t.a"), (5, "t.b")):
        assert await first.catalog.answer(lambda s=seq: view.subject_of(s)) == subject
        seg = await first.catalog.answer(lambda s=seq: view.segment_for(s))
        assert seg is not None
        msg = await first.reader.read(seg, seq)
        assert header_value(msg.headers, b"Nats-Marker-Reason") == b"MaxAge"
