"""The scheduler pass: schedule entries written with their messages, each due time producing one
message however many agents run the pass, and spent entries cleared; against a real metadata
store, the real committer and the real write buffer."""

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
from infinistream.stream.reader import MessageReader, StoredMessage
from infinistream.stream.records import due_from_key, seq_from_key
from infinistream.stream.scheduler import LEAD_NS, Scheduler
from infinistream.stream.schedules import round_second
from infinistream.stream.view import StreamView
from infinistream.stream.write_buffer import WriteBuffer
from support.streamstores import GROUP, Sink, make_streams

S = 1_000_000_000
CFG = StreamConfig(name="T", subjects=["sched.>", "out.>"], allow_msg_schedules=True)


@pytest.fixture
async def meta(tmp_path: Path) -> AsyncIterator[SqliteMetadataStore]:
    store = SqliteMetadataStore(tmp_path / "meta.db")
    yield store
    await store.close()


class Agent:
    """What the scheduler needs of an agent: catalog, committer, reader and write buffer."""

    def __init__(self, catalog: Catalog, objects: ObjectStore, now: list[int]) -> None:
        self.catalog = catalog
        self.committer = Committer(catalog.meta, catalog)
        cache: SectionCache[bytes] = SectionCache(1 << 20)
        self.reader = MessageReader(objects, cache, DamageLog())
        # Views read record directories from the objects, as an agent's do.
        catalog.directories = self.reader.segment
        self.sink = Sink()
        self.buffer = WriteBuffer(
            objects, self.committer, cache, self.sink, group=GROUP, agent_id="t"
        )
        self.scheduler = Scheduler(
            catalog.meta, catalog, self.committer, self.reader, self.buffer, clock=lambda: now[0]
        )

    async def publish(self, subject: str, **headers: str) -> None:
        hdr = encode_headers(headers) if headers else None
        self.buffer.append("T", subject, hdr, b"body", "reply")
        await self.buffer.drain()
        [answer] = [a for r, a in self.sink.answers().items() if r == "reply"]
        assert "error" not in answer, answer
        self.sink.calls.clear()

    async def view(self) -> StreamView:
        view = await self.catalog.view("T")
        assert view is not None
        return view

    async def read(self, seq: int) -> StoredMessage:
        view = await self.view()
        seg = await self.catalog.answer(lambda: view.segment_for(seq))
        assert seg is not None
        return await self.reader.read(seg, seq)

    async def fire(self) -> None:
        await self.scheduler.fire_once()
        await self.buffer.drain()


async def two_agents(meta: SqliteMetadataStore, now: list[int]) -> tuple[Agent, Agent]:
    objects = ObjectStore.from_url("memory://")
    first = Agent(await make_streams(meta, T=CFG), objects, now)
    other = Catalog(meta, GROUP)
    await other.refresh(force=True)
    return first, Agent(other, objects, now)


async def entries(meta: SqliteMetadataStore, agent: Agent) -> list[tuple[int, int]]:
    """(due, seq) of every schedule entry."""
    items = await meta.range(agent.catalog.keys("T").schedule_prefix)
    return [(due_from_key(i.key), seq_from_key(i.key)) for i in items]


async def test_an_every_schedule_fires_once_per_due_time_from_two_agents(
    meta: SqliteMetadataStore,
) -> None:
    now = [0]
    first, second = await two_agents(meta, now)
    await first.publish(
        "sched.a", **{"Nats-Schedule": "@every 5s", "Nats-Schedule-Target": "out.a"}
    )
    view = await first.view()
    ts = await first.catalog.answer(lambda: view.ts_of(1))
    due = round_second(ts) + 5 * S
    # Written with the message, so any agent finds it.
    assert await entries(meta, first) == [(due, 1)]
    # Not before the pass's lead: it prepares the message then, and publishes at `due`.
    now[0] = due - LEAD_NS - 1
    await first.fire()
    assert (await first.view()).last_seq == 1
    now[0] = due
    # Both agents produce before either commits: one copy is stored, the other refused.
    await first.scheduler.fire_once()
    await second.scheduler.fire_once()
    await first.buffer.drain()
    await second.buffer.drain()
    view = await first.view()
    assert (view.last_seq, list(view.live_seqs())) == (2, [1, 2])
    fired = await first.read(2)
    assert fired.subject == "out.a"
    assert header_value(fired.headers, b"Nats-Scheduler") == b"sched.a"
    # The next entry went in with the produced message, in the same commit.
    assert await entries(meta, first) == [(due + 5 * S, 1)]
    assert header_value(fired.headers, b"Nats-Schedule-Next") is not None
    # The same agent passing again before the next due time does nothing.
    await first.fire()
    await second.fire()
    assert (await first.view()).last_seq == 2


async def test_an_at_schedule_fires_once_and_purges_itself(meta: SqliteMetadataStore) -> None:
    now = [0]
    first, second = await two_agents(meta, now)
    await first.publish(
        "sched.b",
        **{"Nats-Schedule": "@at 2030-01-01T00:00:00Z", "Nats-Schedule-Target": "out.b"},
    )
    due = 1_893_456_000 * S
    assert await entries(meta, first) == [(due, 1)]
    now[0] = due + S
    await second.scheduler.fire_once()
    await first.scheduler.fire_once()
    await second.buffer.drain()
    await first.buffer.drain()
    view = await first.view()
    assert (view.last_seq, list(view.live_seqs())) == (2, [2])
    assert header_value((await first.read(2)).headers, b"Nats-Schedule-Next") == b"purge"
    assert await entries(meta, first) == []


async def test_a_restarted_agent_finds_the_schedules(meta: SqliteMetadataStore) -> None:
    now = [0]
    first, _ = await two_agents(meta, now)
    await first.publish(
        "sched.c", **{"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "out.c"}
    )
    [(due, _)] = await entries(meta, first)
    # A new agent (a restart) holds nothing but what it reads from metadata.
    fresh = Catalog(meta, GROUP)
    await fresh.refresh(force=True)
    restarted = Agent(fresh, first.reader.objects, now)
    now[0] = due
    await restarted.fire()
    assert (await restarted.view()).last_seq == 2


async def test_entries_of_stopped_schedules_are_cleared(meta: SqliteMetadataStore) -> None:
    now = [0]
    first, _ = await two_agents(meta, now)
    every = {"Nats-Schedule": "@every 1s", "Nats-Schedule-Target": "out.d"}
    await first.publish("sched.d", **every)
    await first.publish("sched.e", **every)
    # A plain message after it stops one; a replacement leaves the old one's entry spent.
    await first.publish("sched.d")
    await first.publish("sched.e", **every)
    assert len(await entries(meta, first)) == 3
    now[0] = max(due for due, _ in await entries(meta, first))
    await first.fire()
    view = await first.view()
    # Only the replacement fired; every spent entry went.
    assert await first.catalog.answer(lambda: [view.subject_of(s) for s in view.live_seqs()]) == [
        "sched.d",
        "sched.d",
        "sched.e",
        "out.d",
    ]
    assert [seq for _, seq in await entries(meta, first)] == [4]
