"""The zone cache end to end: agent processes in zones read many uncompacted streams cold.

One agent writes N streams of M messages into shared objects (every object holds a section of
most streams), then stops. Fresh agents (nothing cached) read every stream back through pull
consumers. Without the zone cache each stream section costs a GET; with it, each block (an
L0 object is one) costs one GET per zone, whichever agent of the zone reads it: the GETs per MB
read, counted from the agents' own /varz counters, stay at or under 1 per zone.

Agents stop with SIGTERM between tests so they leave the pool at once (a killed one would stay
in the next test's view for a lease).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import nats
import pytest

from infinistream.settings import PUT_BURST
from infinistream.storage.rendezvous import Peer, owner
from support.agentproc import AgentProcess, agent_args, wait_for
from support.storeinspect import object_keys, objects_of

N_STREAMS = 200
PER_STREAM = 20
SIZE = 1024
READ_MB = N_STREAMS * PER_STREAM * SIZE / (1024 * 1024)
# A long PUT budget makes objects of a MB or more, as a busy agent on S3 writes them: the GETs
# per MB read are then at most 1 when the zone pays one GET per object. (The burst the budget
# allows after a quiet spell is spent first, on another stream, so that it makes no small
# objects of the streams read.)
WRITE_ARGS = ("--linger", "2s")


def body(stream: int, k: int) -> bytes:
    return (b"%d.%d." % (stream, k)).ljust(SIZE, b"x")


def objects_read(store_dir: Path) -> set[str]:
    """The objects holding the streams that the tests read."""
    meta = store_dir / "meta.db"
    return set().union(*(objects_of(meta, f"Z{i}") for i in range(N_STREAMS)))


def varz(agent: AgentProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.http_port}/varz", timeout=10) as r:
        return json.load(r)["infinistream"]  # type: ignore[no-any-return]


def gets(agent: AgentProcess) -> int:
    requests = varz(agent)["object_requests"]
    return int(requests["gets"]) + int(requests["heads"])


def me(agent: AgentProcess) -> dict[str, Any]:
    return next(m for m in varz(agent)["pool"]["members"] if m["self"])


@contextlib.contextmanager
def agents(store_dir: Path, *zones: str, patient: bool = False) -> Iterator[list[AgentProcess]]:
    """Agents in `zones` (one per entry), started and seeing each other as cache agents.

    `patient` agents wait up to 10 s for a block's owner, not the default 1 s: what a test of
    them counts is the GETs a zone shares, and an owner that a loaded machine makes late would
    send its readers to object storage (the fallback, which has tests of its own)."""
    procs: list[AgentProcess] = []
    wait = ("--cache-timeout", "10s") if patient else ()
    try:
        for zone in zones:
            args = agent_args(store_dir, *WRITE_ARGS, "-m", "-1", "--zone", zone, *wait)
            procs.append(AgentProcess(args).start())
        for proc, zone in zip(procs, zones, strict=True):
            same_zone = zones.count(zone)
            wait_for(
                lambda p=proc, n=same_zone, z=zone: (
                    sum(
                        1
                        for m in varz(p)["pool"]["members"]
                        if m["zone"] == z and m["cache_address"]
                    )
                    == n
                ),
                timeout=20,
            )
        yield procs
    finally:
        for proc in procs:
            with contextlib.suppress(Exception):
                proc.stop()
            proc.kill()


async def write_streams(url: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=30)
    for i in range(N_STREAMS):
        await js.add_stream(name=f"Z{i}", subjects=[f"z.{i}"])
    await js.add_stream(name="BURST", subjects=["burst"])
    for _ in range(PUT_BURST):
        await js.publish("burst", b"spends the budget's burst")
    acks = [
        await js.publish_async(f"z.{i}", body(i, k))
        for k in range(PER_STREAM)
        for i in range(N_STREAMS)
    ]
    await asyncio.gather(*acks)
    await nc.close()


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding the streams, written by an agent that has stopped since."""
    store_dir = tmp_path_factory.mktemp("zone") / "store"
    with agents(store_dir, "writer") as (writer,):
        asyncio.run(write_streams(writer.url))
    return store_dir


async def read_some(url: str, streams: list[int], consumer: str) -> None:
    """Read every message of `streams` through `url` (50 streams at a time), checking each."""
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=30)

    async def one(i: int) -> None:
        sub = await js.pull_subscribe(f"z.{i}", durable=consumer, stream=f"Z{i}")
        got: list[bytes] = []
        while len(got) < PER_STREAM:
            msgs = await sub.fetch(PER_STREAM - len(got), timeout=20)
            got += [m.data for m in msgs]
        assert got == [body(i, k) for k in range(PER_STREAM)]

    for j in range(0, len(streams), 50):
        await asyncio.gather(*(one(i) for i in streams[j : j + 50]))
    await nc.close()


def read_split(procs: list[AgentProcess], consumer: str) -> None:
    """Every stream read once, the streams spread over `procs`."""

    async def run() -> None:
        n = len(procs)
        await asyncio.gather(
            *(read_some(p.url, list(range(k, N_STREAMS, n)), consumer) for k, p in enumerate(procs))
        )

    asyncio.run(run())


def test_two_agents_of_one_zone_pay_at_most_one_get_per_mb_read(written: Path) -> None:
    with agents(written, "a", "a", patient=True) as procs:
        before = [gets(p) for p in procs]
        read_split(procs, "ONEZONE")
        spent = sum(gets(p) - b for p, b in zip(procs, before, strict=True))
        stats = [varz(p)["zone_cache"] for p in procs]
    objects = len(objects_read(written))
    assert spent <= READ_MB, (spent, READ_MB, stats)
    # One GET per object for the zone, whichever agent owns it; the other asked the owner.
    assert spent == objects, (spent, objects, stats)
    assert sum(s["peer_reads"] for s in stats) > 0
    assert sum(s["served"] for s in stats) == sum(s["peer_reads"] for s in stats)
    assert all(s["peer_failures"] == 0 for s in stats)


def test_two_zones_of_two_agents_each_pay_at_most_one_get_per_mb_read(written: Path) -> None:
    with agents(written, "a", "a", "b", "b", patient=True) as procs:
        before = [gets(p) for p in procs]
        # Each zone reads every stream, its two agents half each.
        read_split(procs[:2], "ZONEA")
        read_split(procs[2:], "ZONEB")
        spent = [gets(p) - b for p, b in zip(procs, before, strict=True)]
        stats = [varz(p)["zone_cache"] for p in procs]
    objects = len(objects_read(written))
    for zone in (spent[:2], spent[2:]):
        assert sum(zone) <= READ_MB, (spent, READ_MB, stats)
        assert sum(zone) == objects, (spent, objects, stats)
    # No agent asked an agent of the other zone: what each zone served, its own agents read.
    for pair in (stats[:2], stats[2:]):
        assert sum(s["served"] for s in pair) == sum(s["peer_reads"] for s in pair)


def test_every_message_arrives_when_the_owner_is_killed_mid_read(written: Path) -> None:
    with agents(written, "k", "k") as procs:
        ids = [me(p)["id"] for p in procs]
        peers = [Peer(i, "") for i in ids]
        keys = sorted(objects_read(written))
        owned = [sum(1 for k in keys if owner(f"{k}#0", peers) == peer) for peer in peers]
        # Kill an agent that owns objects; read through the other.
        victim = 0 if owned[0] else 1
        reader = procs[1 - victim]
        half = N_STREAMS // 2

        async def run() -> None:
            await read_some(reader.url, list(range(half)), "KILL")
            procs[victim].kill()  # kill -9, mid-read: the consumers stay open
            await read_some(reader.url, list(range(half, N_STREAMS)), "KILL")

        asyncio.run(run())
        stats = varz(reader)["zone_cache"]
    assert stats["peer_reads"] > 0  # before the kill, the owner served
    assert stats["peer_failures"] >= 1 and stats["fallbacks"] >= 1  # then it was gone


async def test_a_client_without_the_pools_secret_gets_nothing_from_the_cache_port(
    written: Path,
) -> None:
    with agents(written, "s") as (proc,):
        host, _, port = me(proc)["cache_address"].rpartition(":")
        key = sorted(object_keys(written / "objects"))[0]
        async with aiohttp.ClientSession() as http:
            params = {"key": key, "start": "0", "end": "100"}
            for headers in (
                {},
                {"X-InfiniStream-Time": "0", "X-InfiniStream-Signature": "00" * 32},
            ):
                async with http.get(
                    f"http://{host}:{port}/range", params=params, headers=headers
                ) as r:
                    assert r.status == 403
                    assert await r.read() == b""
        # A NATS client on that port is not spoken to.
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"CONNECT {}\r\nPING\r\n")
            reply = s.recv(4096)
        assert b"PONG" not in reply and b"INFO" not in reply
        stats = varz(proc)["zone_cache"]
    assert stats["refused"] == 2 and stats["block_gets"] == 0 and stats["served"] == 0
