"""The etcd store compacts the history of its own writes (etcd_history.py): the policy with a
clock of its own, then on a real etcd, plain and with TLS and authentication."""

from __future__ import annotations

import asyncio
import base64
import logging
import urllib.error

import pytest

from infinistream.metadata import EtcdMetadataStore, Put, open_metadata
from infinistream.metadata.etcd_history import DEFAULT_HISTORY_SECONDS, HistoryTrim
from support.etcdserver import EtcdServer

# -- the policy ----------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_compacts_to_the_commit_marked_seconds_before() -> None:
    clock, asked = Clock(), []

    async def compact(revision: int) -> None:
        asked.append(revision)

    trim = HistoryTrim(10, compact, clock)
    trim.written(5)  # the first mark
    clock.now += 9
    trim.written(6)
    await asyncio.sleep(0)
    assert asked == []  # not 10 s yet
    clock.now += 1
    trim.written(7)  # 10 s after the mark: back to the mark, and this commit is the next one
    await asyncio.sleep(0)
    assert asked == [5] and trim.compacted_to == 5
    clock.now += 5
    trim.written(8)
    clock.now += 5
    trim.written(9)
    await asyncio.sleep(0)
    assert asked == [5, 7]
    await trim.close()


async def test_one_compaction_at_a_time_and_the_mark_waits_for_it() -> None:
    clock, asked, release = Clock(), [], asyncio.Event()

    async def compact(revision: int) -> None:
        asked.append(revision)
        await release.wait()

    trim = HistoryTrim(1, compact, clock)
    trim.written(1)
    clock.now += 1
    trim.written(2)
    await asyncio.sleep(0)
    clock.now += 1
    trim.written(3)  # the compaction to 1 still runs: none started, the mark (2) kept
    await asyncio.sleep(0)
    assert asked == [1]
    release.set()
    await asyncio.sleep(0)
    trim.written(4)  # it ended: compacts to the kept mark
    await asyncio.sleep(0)
    assert asked == [1, 2]
    await trim.close()


async def test_zero_seconds_never_compacts() -> None:
    asked: list[int] = []

    async def compact(revision: int) -> None:
        asked.append(revision)

    clock = Clock()
    trim = HistoryTrim(0, compact, clock)
    for revision in range(1, 5):
        trim.written(revision)
        clock.now += 100
    await asyncio.sleep(0)
    assert asked == []


async def test_a_failed_compaction_fails_no_write_and_is_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()

    async def compact(revision: int) -> None:
        raise OSError("connection refused")

    trim = HistoryTrim(1, compact, clock)
    with caplog.at_level(logging.WARNING, logger="infinistream.metadata.etcd_history"):
        for revision in range(1, 6):
            trim.written(revision)
            clock.now += 1
            await asyncio.sleep(0)
    assert trim.compacted_to == 0
    assert [r.getMessage() for r in caplog.records] == [
        "etcd history compaction to revision 1 failed: connection refused"
    ]


def test_the_url_sets_how_old_history_gets() -> None:
    default = open_metadata("etcd://127.0.0.1:2379")
    set_ = open_metadata("etcd://127.0.0.1:2379?history=2.5")
    off = open_metadata("etcd://127.0.0.1:2379?history=0")
    assert isinstance(default, EtcdMetadataStore)
    assert isinstance(set_, EtcdMetadataStore) and isinstance(off, EtcdMetadataStore)
    assert default.history.seconds == DEFAULT_HISTORY_SECONDS
    assert (set_.history.seconds, off.history.seconds) == (2.5, 0)
    with pytest.raises(ValueError, match="history"):
        open_metadata("etcd://127.0.0.1:2379?history=-1")


# -- a real etcd ---------------------------------------------------------------------------------


def _readable_at(server: EtcdServer, key: str, revision: int) -> bool:
    body = {"key": base64.b64encode(key.encode()).decode(), "revision": revision}
    try:
        server.call("/v3/kv/range", body)
    except urllib.error.HTTPError as e:
        assert "compacted" in e.read().decode()
        return False
    return True


async def _writes_apart(store: EtcdMetadataStore, seconds: float, times: int) -> list[int]:
    revisions = []
    for i in range(times):
        revisions.append((await store.txn([], [Put("h/k", b"v%d" % i)])).revision)
        await asyncio.sleep(seconds)
    return revisions


@pytest.mark.parametrize("secure", [False, True], ids=["plain", "tls-auth"])
async def test_writes_compact_the_history_older_than_asked(
    request: pytest.FixtureRequest, secure: bool
) -> None:
    server: EtcdServer = request.getfixturevalue("secure_etcd_server" if secure else "etcd_server")
    url = server.url_as("agent") if secure else server.url
    store = open_metadata(url + ("&" if "?" in url else "?") + "history=0.3")
    assert isinstance(store, EtcdMetadataStore)
    try:
        revisions = await _writes_apart(store, 0.35, 4)
        await store.history.close()  # the last compaction started, if still running, is done
        assert store.history.compacted_to >= revisions[1]
        if not secure:  # the test's own client reads etcd without credentials
            assert not _readable_at(server, "h/k", revisions[0])
            assert _readable_at(server, "h/k", revisions[-1])
        assert (await store.get("h/k")) is not None
        assert (await store.get("h/k")).value == b"v3"  # type: ignore[union-attr]
    finally:
        await store.close()


async def test_history_zero_leaves_the_history_to_etcd(etcd_server: EtcdServer) -> None:
    store = open_metadata(etcd_server.url + "?history=0")
    assert isinstance(store, EtcdMetadataStore)
    try:
        revisions = await _writes_apart(store, 0.05, 3)
        assert _readable_at(etcd_server, "h/k", revisions[0])
        assert store.history.compacted_to == 0
    finally:
        await store.close()


def test_a_store_closed_from_another_loop_stops_its_compaction() -> None:
    clock, started = Clock(), []

    async def compact(revision: int) -> None:
        started.append(revision)
        await asyncio.sleep(3600)

    trim = HistoryTrim(1, compact, clock)

    async def write() -> None:
        trim.written(1)
        clock.now += 1
        trim.written(2)
        await asyncio.sleep(0)

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(write())
        assert started == [1]
        asyncio.run(trim.close())  # another loop: cancels, does not wait
        loop.run_until_complete(asyncio.sleep(0))
        assert all(task.cancelled() for task in asyncio.all_tasks(loop) if task.done())
        assert not [task for task in asyncio.all_tasks(loop) if not task.done()]
    finally:
        loop.close()
