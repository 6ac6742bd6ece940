"""An erase reaches the zone cache's disk on every agent, within seconds and before the pipeline.

Two agents of one zone, the zone cache on (the default cache size). A message with a marker
shares an object with others; the agent that does not own that object's block reads the
stream, so the owner keeps the block on its disk (the scan sees the marker there). The erase
goes through the reader, so the owner learns of it only from metadata: within seconds no file
under either agent's cache directory holds the marker. Reading the other messages of the
object again, through both agents, serves them but does not put the erased bytes back on disk
(the object stays out of the caches until its erase is complete).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.errors import NotFoundError

from infinistream.metadata import SqliteMetadataStore
from infinistream.metadata.kv import Put
from infinistream.server.erase_evictions import EraseEvictions
from infinistream.storage import SectionCache
from infinistream.storage.rendezvous import Peer, owner
from infinistream.stream.erase import EraseRequest, encode_request, request_key
from support.agentproc import AgentProcess, running_agent, wait_for
from support.storeinspect import record_of

MARKER = b"CaChEdErAsE5d1"
# Erased bytes leave every agent's cache within this (the watch wakes within a second or two;
# generous for a loaded machine).
EVICTED_WITHIN = 10.0


def _pool(agent: AgentProcess) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.http_port}/varz", timeout=10) as r:
        return json.load(r)["infinistream"]["pool"]["members"]  # type: ignore[no-any-return]


def _cache_files_with_marker(store_dir: Path) -> list[Path]:
    found = []
    for path in (store_dir / "cache").rglob("*"):
        with contextlib.suppress(FileNotFoundError):  # a block replaced or evicted meanwhile
            if path.is_file() and MARKER in path.read_bytes():
                found.append(path)
    return found


@contextlib.contextmanager
def _two_cache_agents(store_dir: Path) -> Iterator[list[AgentProcess]]:
    with (
        running_agent(store_dir, "--linger", "20ms", "-m", "-1") as a,
        running_agent(store_dir, "--linger", "20ms", "-m", "-1") as b,
    ):
        for agent in (a, b):
            wait_for(
                lambda p=agent: sum(1 for m in _pool(p) if m["cache_address"]) == 2, timeout=20
            )
        yield [a, b]


async def test_erased_bytes_leave_every_agents_cache_disk_within_seconds(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with _two_cache_agents(store_dir) as agents:
        ids = [next(m["id"] for m in _pool(p) if m["self"]) for p in agents]
        ncs = [await nats.connect(p.url, allow_reconnect=False) for p in agents]
        try:
            js = [nc.jetstream(timeout=10) for nc in ncs]
            peers = [Peer(i, "") for i in ids]
            # Agent 0 writes; agent 1, which has none of it in its section cache, reads. The
            # owner of the marked message's object must be agent 0: new streams until it is
            # (each a new object; the owner is either agent, by the object's name).
            for n in range(30):
                stream = f"PEOPLE{n}"
                await js[0].add_stream(name=stream, subjects=[f"p{n}.>"], allow_direct=True)
                # One batch: the marked message shares its object with the others.
                acks = await asyncio.gather(
                    *(js[0].publish(f"p{n}.{i}", f"person {i}".encode()) for i in range(5)),
                    js[0].publish(f"p{n}.secret", b"payload " + MARKER),
                    *(js[0].publish(f"p{n}.{i}", f"person {i}".encode()) for i in range(5, 10)),
                )
                secret = acks[5].seq
                obj, _, _ = record_of(store_dir / "meta.db", stream, secret)
                holder = owner(f"{obj}#0", peers)
                if holder is not None and holder.id == ids[0]:
                    break
            else:
                raise AssertionError("agent 0 owns none of 30 objects")
            kept = {a.seq: f"person {i}".encode() for i, a in enumerate(acks[:5] + acks[6:])}
            reader = 1

            # The non-owner reads: the owner gets the block and keeps it on its disk.
            for seq in [*kept, secret]:
                await js[reader].get_msg(stream, seq, direct=True)
            await asyncio.to_thread(wait_for, lambda: _cache_files_with_marker(store_dir))

            # Erased through the reader: the owner learns of it from metadata only.
            assert await js[reader].delete_msg(stream, secret)
            started = time.monotonic()
            while _cache_files_with_marker(store_dir):
                assert time.monotonic() - started < EVICTED_WITHIN, "erased bytes stay cached"
                await asyncio.sleep(0.1)
            print(f"evicted from the cache disk in {time.monotonic() - started:.2f}s")

            # The object's other messages still read back, through both agents (so through
            # the owner's block store again), and the erased bytes are not cached again.
            for side in js:
                for seq, data in kept.items():
                    assert (await side.get_msg(stream, seq, direct=True)).data == data
                    assert (await side.get_msg(stream, seq)).data == data
                with pytest.raises(NotFoundError):
                    await side.get_msg(stream, secret, direct=True)
            await asyncio.sleep(1.0)  # block writes are asynchronous: give any a chance
            assert _cache_files_with_marker(store_dir) == []
            # The cache still keeps other objects: a later message's block lands on a disk.
            before = set((store_dir / "cache").rglob("*.0"))
            later = await js[0].publish(f"p{n}.later", b"later")
            await js[reader].get_msg(stream, later.seq, direct=True)
            await asyncio.to_thread(
                wait_for, lambda: set((store_dir / "cache").rglob("*.0")) - before
            )
        finally:
            for nc in ncs:
                await nc.close()


async def test_each_request_is_applied_once_and_its_objects_readmitted_when_complete(
    tmp_path: Path,
) -> None:
    meta = SqliteMetadataStore(tmp_path / "meta.db")
    cache: SectionCache[bytes] = SectionCache(1000)
    evictions = EraseEvictions(meta, lambda: ["g", "g@acct"], [cache], meta.watch("g"))
    try:
        for obj in ("g/a", "g/b", "g@acct/c"):
            cache.put(obj, 0, b"x" * 10)
        first = EraseRequest(stream="S", uid="u", ranges=[(1, 1)], requested_ns=1, kind="delete")
        first.holders = ["g/a", "g/b"]
        other = EraseRequest(stream="T", uid="u", ranges=[(2, 2)], requested_ns=2, kind="delete")
        other.holders = ["g@acct/c", "g/b"]
        keys = [request_key("g", "S", 1), request_key("g@acct", "T", 2)]
        pairs = zip(keys, (first, other), strict=True)
        await meta.txn([], [Put(k, encode_request(r)) for k, r in pairs])
        assert await evictions.apply() == 3 and len(cache) == 0
        assert await evictions.apply() == 0  # applied once
        assert not cache.put("g/a", 0, b"x") and not cache.put("g@acct/c", 0, b"x")
        # The first complete: its objects come back, but g/b is still named by the other.
        first.completed_ns = 5
        await meta.txn([], [Put(keys[0], encode_request(first))])
        await evictions.apply()
        assert cache.put("g/a", 0, b"x") and not cache.put("g/b", 0, b"x")
        assert not cache.put("g@acct/c", 0, b"x")
    finally:
        await meta.close()
