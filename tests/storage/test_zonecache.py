"""The zone cache's parts on a real local object store: blocks owned and kept (one GET per
block, memory then disk, within limits), the signed channel between agents, and readers asking
the owner of each block, or nobody when the owner is gone."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from infinistream.storage import (
    BlockStore,
    ObjectNotFoundError,
    ObjectStore,
    Peer,
    PeerClient,
    PeerError,
    PeerServer,
    PoolSecret,
    ZoneCache,
    ZoneCacheStats,
    claim_directory,
)
from infinistream.storage.peers import sign

KB = 1024


def payload(n: int, seed: int = 0) -> bytes:
    return bytes((i * 7 + seed) % 251 for i in range(n))


def secret_of(value: bytes) -> PoolSecret:
    async def load() -> bytes:
        return value

    return PoolSecret(load)


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return ObjectStore.from_url((tmp_path / "objects").as_uri())


def block_store(store: ObjectStore, tmp_path: Path, name: str = "a", **kw: int) -> BlockStore:
    options = {"memory_bytes": 1 << 20, "disk_bytes": 1 << 20, **kw}
    return BlockStore(
        store,
        directory=tmp_path / name,
        stats=ZoneCacheStats(),
        **options,  # type: ignore[arg-type]
    )


async def test_readers_of_one_block_at_once_share_one_get(
    store: ObjectStore, tmp_path: Path
) -> None:
    data = payload(100 * KB)
    await store.put("g/o/1", data)
    blocks = block_store(store, tmp_path)
    ranges = [(i * 5 * KB, (i + 1) * 5 * KB) for i in range(20)]
    got = await asyncio.gather(*(blocks.read_range("g/o/1", s, e) for s, e in ranges))
    assert got == [data[s:e] for s, e in ranges]
    assert store.stats.gets == 1 and blocks.stats.block_gets == 1
    assert await blocks.read_range("g/o/1", 0, 10) == data[:10]
    assert store.stats.gets == 1 and blocks.stats.memory_hits == 1


async def test_a_block_evicted_from_memory_is_read_back_from_disk(
    store: ObjectStore, tmp_path: Path
) -> None:
    a, b = payload(100 * KB, 1), payload(100 * KB, 2)
    await store.put("g/o/a", a)
    await store.put("g/o/b", b)
    blocks = block_store(store, tmp_path, memory_bytes=150 * KB)
    await blocks.read_range("g/o/a", 0, 10)
    await blocks.read_range("g/o/b", 0, 10)  # pushes a out of memory
    await blocks.drain()
    assert blocks.stats.memory_bytes <= 150 * KB
    assert await blocks.read_range("g/o/a", 50 * KB, 100 * KB) == a[50 * KB :]
    assert store.stats.gets == 2 and blocks.stats.disk_hits == 1


async def test_a_block_evicted_before_its_file_is_written_leaves_no_file(
    store: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Disk writes run on threads in any order: the write that evicts a block may unlink its
    path before the block's own write has made the file."""
    first, second = payload(100 * KB, 0), payload(100 * KB, 1)
    await store.put("g/o/0", first)
    await store.put("g/o/1", second)
    later_write_done = threading.Event()
    write = BlockStore._write

    def in_reverse(path: Path, data: bytes, evicted: list[Path]) -> None:
        if data == first:
            assert later_write_done.wait(10)
        write(path, data, evicted)
        if data != first:
            later_write_done.set()

    monkeypatch.setattr(BlockStore, "_write", staticmethod(in_reverse))
    blocks = block_store(store, tmp_path, memory_bytes=0, disk_bytes=150 * KB)
    await blocks.read_range("g/o/0", 0, 100 * KB)
    await blocks.read_range("g/o/1", 0, 100 * KB)  # evicts the first, still being written
    await blocks.drain()
    on_disk = sum(p.stat().st_size for p in (tmp_path / "a").iterdir())
    assert on_disk == blocks.stats.disk_bytes == 100 * KB


async def test_the_disk_holds_no_more_than_its_limit(store: ObjectStore, tmp_path: Path) -> None:
    for i in range(5):
        await store.put(f"g/o/{i}", payload(100 * KB, i))
    blocks = block_store(store, tmp_path, memory_bytes=0, disk_bytes=250 * KB)
    for i in range(5):
        assert await blocks.read_range(f"g/o/{i}", 0, 100 * KB) == payload(100 * KB, i)
    await blocks.drain()
    on_disk = sum(p.stat().st_size for p in (tmp_path / "a").iterdir())
    assert on_disk == blocks.stats.disk_bytes == 200 * KB
    # The two newest are kept; the oldest must be read from the store again.
    gets = store.stats.gets
    await blocks.read_range("g/o/4", 0, 10)
    assert store.stats.gets == gets
    await blocks.read_range("g/o/0", 0, 10)
    assert store.stats.gets == gets + 1


async def test_an_erased_objects_blocks_leave_memory_and_disk_and_stay_out(
    store: ObjectStore, tmp_path: Path
) -> None:
    gone, kept = payload(100 * KB, 1), payload(100 * KB, 2)
    await store.put("g/o/gone", gone)
    await store.put("g/o/kept", kept)
    blocks = block_store(store, tmp_path)
    await blocks.read_range("g/o/gone", 0, 10)
    await blocks.read_range("g/o/kept", 0, 10)
    await blocks.drain()
    assert len(list((tmp_path / "a").iterdir())) == 2
    assert blocks.evict("g/o/gone") == 2  # its block in memory and on disk
    files = list((tmp_path / "a").iterdir())
    assert [f.read_bytes() for f in files] == [kept]
    assert blocks.stats.disk_bytes == 100 * KB and blocks.stats.memory_bytes == 100 * KB
    # Read again before the janitor deletes it: served, from the store, and not kept.
    gets = store.stats.gets
    assert await blocks.read_range("g/o/gone", 0, 100 * KB) == gone
    await blocks.drain()
    assert store.stats.gets == gets + 1 and len(list((tmp_path / "a").iterdir())) == 1
    # Readmitted (its erase complete), an object is cached again.
    blocks.readmit("g/o/gone")
    await blocks.read_range("g/o/gone", 0, 10)
    await blocks.drain()
    assert len(list((tmp_path / "a").iterdir())) == 2


async def test_a_block_evicted_while_its_write_is_under_way_leaves_no_file(
    store: ObjectStore, tmp_path: Path
) -> None:
    await store.put("g/o/gone", payload(100 * KB))
    blocks = block_store(store, tmp_path)
    await blocks.read_range("g/o/gone", 0, 10)  # its disk write is scheduled, not done
    blocks.evict("g/o/gone")
    await blocks.drain()
    await asyncio.sleep(0)  # the write's done callback
    assert list((tmp_path / "a").iterdir()) == []


async def test_a_large_object_is_read_in_aligned_blocks_cut_at_its_end(
    store: ObjectStore, tmp_path: Path
) -> None:
    data = payload(150 * KB)
    await store.put("g/o/big", data)
    blocks = block_store(store, tmp_path, block_bytes=64 * KB)
    assert await blocks.read_range("g/o/big", 130 * KB, 140 * KB) == data[130 * KB : 140 * KB]
    assert blocks.stats.block_bytes_got == 150 * KB - 128 * KB  # only the last block
    # Asked past the end: the bytes there are, no more.
    assert await blocks.read_range("g/o/big", 140 * KB, 192 * KB) == data[140 * KB :]
    with pytest.raises(ValueError, match="one block"):
        await blocks.read_range("g/o/big", 60 * KB, 70 * KB)


async def test_an_agents_own_reads_are_kept_on_disk_not_in_memory(
    store: ObjectStore, tmp_path: Path
) -> None:
    """What the agent reads for itself its section and index caches keep: a copy in the
    memory tier would be a second one. The disk saves the GETs, its pending writes included."""
    data = payload(100 * KB)
    await store.put("g/o/1", data)
    blocks = block_store(store, tmp_path)
    assert await blocks.read_range("g/o/1", 0, 10 * KB, own=True) == data[: 10 * KB]
    # Its file may not be written yet: the block is read from the write under way.
    assert await blocks.read_range("g/o/1", 50 * KB, 60 * KB, own=True) == data[50 * KB : 60 * KB]
    await blocks.drain()
    assert await blocks.read_range("g/o/1", 90 * KB, 100 * KB, own=True) == data[90 * KB :]
    assert store.stats.gets == 1 and blocks.stats.disk_hits == 2
    assert blocks.stats.memory_bytes == 0 and len(blocks.memory) == 0
    # A range another agent asks for is kept in memory, where the zone's readers find it.
    assert await blocks.read_range("g/o/1", 0, 10) == data[:10]
    assert blocks.stats.memory_bytes == 100 * KB
    assert await blocks.read_range("g/o/1", 0, 10, own=True) == data[:10]
    assert store.stats.gets == 1 and blocks.stats.memory_hits == 1


async def test_with_no_disk_an_agents_own_reads_are_kept_in_memory(
    store: ObjectStore, tmp_path: Path
) -> None:
    data = payload(100 * KB)
    await store.put("g/o/1", data)
    blocks = BlockStore(
        store, memory_bytes=1 << 20, disk_bytes=0, directory=None, stats=ZoneCacheStats()
    )
    await blocks.read_range("g/o/1", 0, 10, own=True)
    assert await blocks.read_range("g/o/1", 10, 20, own=True) == data[10:20]
    assert store.stats.gets == 1 and blocks.stats.memory_bytes == 100 * KB


async def test_an_erase_drops_a_block_whose_write_is_under_way(
    store: ObjectStore, tmp_path: Path
) -> None:
    await store.put("g/o/gone", payload(100 * KB))
    blocks = block_store(store, tmp_path)
    await blocks.read_range("g/o/gone", 0, 10, own=True)
    blocks.evict("g/o/gone")
    gets = store.stats.gets
    # Not served from the pending write: read from the store, and not kept.
    assert await blocks.read_range("g/o/gone", 0, 10, own=True) == payload(100 * KB)[:10]
    await blocks.drain()
    await asyncio.sleep(0)
    assert store.stats.gets == gets + 1 and list((tmp_path / "a").iterdir()) == []


async def test_a_failed_get_is_not_kept(store: ObjectStore, tmp_path: Path) -> None:
    blocks = block_store(store, tmp_path)
    with pytest.raises(ObjectNotFoundError):
        await blocks.read_range("g/o/late", 0, 10)
    await store.put("g/o/late", b"0123456789")
    assert await blocks.read_range("g/o/late", 0, 10) == b"0123456789"


def test_each_process_claims_a_directory_of_its_own_and_starts_it_empty(tmp_path: Path) -> None:
    first, lock1 = claim_directory(tmp_path)
    (first / "old-block").write_bytes(b"x")
    second, lock2 = claim_directory(tmp_path)
    assert first != second
    lock1.close()  # the first agent is gone
    third, lock3 = claim_directory(tmp_path)
    assert third == first and [p.name for p in third.iterdir()] == ["lock"]
    lock2.close()
    lock3.close()


# --- the channel between agents ------------------------------------------------------------


@dataclass
class Owner:
    blocks: BlockStore
    server: PeerServer
    peer: Peer


@pytest.fixture
async def owners(store: ObjectStore, tmp_path: Path) -> AsyncIterator[list[Owner]]:
    made: list[Owner] = []
    for name in ("NA", "NB"):
        # Each agent has its own connection to the store, so each counts its own GETs.
        own_store = ObjectStore.from_url(store.url)
        stats = ZoneCacheStats()
        blocks = BlockStore(
            own_store, memory_bytes=1 << 20, disk_bytes=0, directory=None, stats=stats
        )
        server = PeerServer(secret_of(b"pool secret"), blocks.read_range, stats)
        port = await server.start("127.0.0.1", 0)
        made.append(Owner(blocks, server, Peer(name, f"http://127.0.0.1:{port}")))
    yield made
    for o in made:
        await o.server.close()


async def test_a_signed_request_gets_its_range(store: ObjectStore, owners: list[Owner]) -> None:
    data = payload(10 * KB)
    await store.put("g/o/1", data)
    client = PeerClient(secret_of(b"pool secret"), timeout=5)
    assert await client.fetch(owners[0].peer.url, "g/o/1", 100, 200) == data[100:200]
    with pytest.raises(ObjectNotFoundError):
        await client.fetch(owners[0].peer.url, "g/o/none", 0, 10)
    await client.close()
    assert owners[0].blocks.stats.served == 1


async def test_a_request_without_the_pools_secret_is_refused(
    store: ObjectStore, owners: list[Owner]
) -> None:
    await store.put("g/o/1", payload(10 * KB))
    url = owners[0].peer.url
    stranger = PeerClient(secret_of(b"guessed"), timeout=5)
    with pytest.raises(PeerError, match="403"):
        await stranger.fetch(url, "g/o/1", 0, 10)
    await stranger.close()
    params = {"key": "g/o/1", "start": "0", "end": "10"}
    old = int(time.time()) - 3600
    replayed = {
        "X-InfiniStream-Time": str(old),
        "X-InfiniStream-Signature": sign(b"pool secret", "g/o/1", 0, 10, old),
    }
    async with aiohttp.ClientSession() as http:
        for headers in ({}, replayed):
            async with http.get(f"{url}/range", params=params, headers=headers) as r:
                assert r.status == 403
                assert await r.read() == b""
    assert owners[0].blocks.stats.refused == 3
    assert owners[0].blocks.stats.block_gets == 0


def zone_cache(me: Owner, owners: list[Owner]) -> ZoneCache:
    return ZoneCache(
        me.blocks,
        PeerClient(secret_of(b"pool secret"), timeout=2),
        me.blocks.stats,
        self_id=me.peer.id,
        members=lambda: [o.peer for o in owners],
    )


async def test_an_agent_alone_in_its_zone_over_a_local_directory_reads_directly(
    store: ObjectStore, owners: list[Owner]
) -> None:
    """Alone, it shares its blocks with no one, and its GETs are file reads: a block kept on
    its disk would save nothing. With another agent in the zone, reads go through the zone."""
    data = payload(100 * KB)
    await store.put("g/o/1", data)
    me = owners[0]
    alone = zone_cache(me, owners[:1])
    assert await alone.read("g/o/1", 0, 10) is None  # the reader goes to the store instead
    assert me.blocks.stats.reads == 0 and me.blocks.objects.stats.gets == 0
    assert me.blocks.stats.fallbacks == 0 and len(me.blocks.memory) == 0
    zone = zone_cache(me, owners)
    key = next(k for k in (f"g/o/{n}" for n in range(1, 100)) if zone.owner_of(k, 0) == me.peer)
    await store.put(key, data)
    assert await zone.read(key, 0, 10) == data[:10]
    assert me.blocks.stats.owned_reads == 1 and me.blocks.objects.stats.gets == 1


async def test_a_zone_pays_one_get_per_block_whichever_agent_reads(
    store: ObjectStore, owners: list[Owner]
) -> None:
    objects = {f"g/o/{i}": payload(20 * KB, i) for i in range(12)}
    for key, data in objects.items():
        await store.put(key, data)
    readers = [zone_cache(o, owners) for o in owners]
    for key, data in objects.items():
        for r, reader in enumerate(readers):
            for start in range(r * KB, 20 * KB, 4 * KB):
                assert await reader.read(key, start, start + KB) == data[start : start + KB]
    gets = [o.blocks.objects.stats.gets for o in owners]
    assert sum(gets) == len(objects)
    assert all(g > 0 for g in gets)  # both own some
    assert sum(o.blocks.stats.served for o in owners) > 0
    for reader in readers:
        await reader.close()


async def test_an_owner_gone_costs_a_direct_read_then_its_blocks_move(
    store: ObjectStore, owners: list[Owner]
) -> None:
    a, b = owners
    reader = zone_cache(a, owners)
    key = next(f"g/o/{i}" for i in range(100) if reader.owner_of(f"g/o/{i}", 0) == b.peer)
    await store.put(key, payload(10 * KB))
    await b.server.close()
    # The owner does not answer: no bytes from the cache, the reader goes to the store.
    assert await reader.read(key, 0, 10) is None
    assert a.blocks.stats.peer_failures == 1 and a.blocks.stats.fallbacks == 1
    # Passed over from now on: the block is the runner-up's, this agent's.
    assert reader.owner_of(key, 0) == a.peer
    assert await reader.read(key, 0, 10) == payload(10 * KB)[:10]
    await reader.close()


async def test_a_slow_owner_is_not_waited_for(store: ObjectStore, tmp_path: Path) -> None:
    released = asyncio.Event()

    async def stuck(key: str, start: int, end: int) -> bytes:
        await asyncio.wait_for(released.wait(), 30)
        return b""

    stats = ZoneCacheStats()
    server = PeerServer(secret_of(b"pool secret"), stuck, stats)
    port = await server.start("127.0.0.1", 0)
    blocks = BlockStore(store, memory_bytes=1 << 20, disk_bytes=0, directory=None, stats=stats)
    slow = Peer("slow", f"http://127.0.0.1:{port}")
    reader = ZoneCache(
        blocks,
        PeerClient(secret_of(b"pool secret"), timeout=0.2),
        stats,
        self_id="me",
        members=lambda: [slow],
    )
    started = time.monotonic()
    assert await reader.read("g/o/1", 0, 10) is None  # the reader goes to the store instead
    assert time.monotonic() - started < 20  # far less than the owner's 30 s
    assert stats.peer_failures == 1 and reader.owner_of("g/o/1", 0) is None
    released.set()
    await reader.close()
    await server.close()


async def test_hostile_requests_are_refused_before_anything_is_parsed(
    store: ObjectStore, owners: list[Owner]
) -> None:
    """Nothing a stranger sends reaches the parsing of numbers or keys: every request without
    the pool's signature is 403 (never 500), and a signed but malformed one is 400."""
    await store.put("g/o/1", payload(10 * KB))
    url = owners[0].peer.url
    now = str(int(time.time()))
    good = sign(b"pool secret", "g/o/1", 0, 10, int(now))
    params = {"key": "g/o/1", "start": "0", "end": "10"}
    strangers: list[tuple[dict[str, str], dict[str, str]]] = [
        (params, {"X-InfiniStream-Time": now, "X-InfiniStream-Signature": "é" * 64}),
        (params, {"X-InfiniStream-Time": "1e400", "X-InfiniStream-Signature": good}),
        (params, {"X-InfiniStream-Time": "1" + "0" * 400, "X-InfiniStream-Signature": good}),
        (params, {"X-InfiniStream-Time": "9" * 5000, "X-InfiniStream-Signature": good}),
        ({**params, "start": "9" * 5000}, {"X-InfiniStream-Time": now}),
        ({**params, "key": "../../etc/passwd"}, {"X-InfiniStream-Time": now}),
        (params, {"X-InfiniStream-Signature": good}),
    ]
    async with aiohttp.ClientSession() as http:
        for query, headers in strangers:
            async with http.get(f"{url}/range", params=query, headers=headers) as r:
                assert (r.status, await r.read()) == (403, b""), (query, headers)
        # Signed by the pool but not a range: 400, still nothing read.
        huge = "1" + "0" * 400
        signed_huge = {
            "X-InfiniStream-Time": now,
            "X-InfiniStream-Signature": sign_text(b"pool secret", "g/o/1", huge, huge, now),
        }
        async with http.get(
            f"{url}/range", params={**params, "start": huge, "end": huge}, headers=signed_huge
        ) as r:
            assert (r.status, await r.read()) == (400, b"")
        # A time of 10^400 signed by the pool is not a time: refused as stale.
        signed_future = {
            "X-InfiniStream-Time": huge,
            "X-InfiniStream-Signature": sign_text(b"pool secret", "g/o/1", "0", "10", huge),
        }
        async with http.get(f"{url}/range", params=params, headers=signed_future) as r:
            assert (r.status, await r.read()) == (403, b"")
    assert owners[0].blocks.stats.refused == len(strangers) + 2
    assert owners[0].blocks.stats.block_gets == 0


def sign_text(secret: bytes, key: str, start: str, end: str, when: str) -> str:
    """A signature over the fields as sent, whatever they hold."""
    message = f"{key}\n{start}\n{end}\n{when}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()
