"""`MetadataStore.watch`: a waiter wakes soon after another handle commits, and only then."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from infinistream.metadata import MetadataStore, Put, SqliteMetadataStore
from infinistream.metadata.sqlite import DataVersionWatch
from infinistream.pipeline.lease import Fence, FencedMetadataStore
from infinistream.stream.sealed_index import SealedIndex
from support.metadatabackends import SHARED_BACKENDS

shared_backends = pytest.mark.parametrize("backend", SHARED_BACKENDS, indirect=True)


@shared_backends
async def test_a_commit_through_another_handle_wakes_the_waiter(
    store: MetadataStore, second_handle: MetadataStore
) -> None:
    watcher, writer = store, second_handle
    watch = watcher.watch("g/")
    try:
        assert await watch.wait(1.0)  # the first wait knows nothing yet: it returns at once
        await writer.txn([], [Put("g/warm", b"0")])
        while await watch.wait(0.3):  # let the warm-up commit (and the watch's opening) settle
            pass
        start = time.monotonic()
        assert not await watch.wait(0.2)  # quiet: the full timeout, then False
        assert time.monotonic() - start >= 0.19

        delays = []
        for i in range(10):
            waiting = asyncio.ensure_future(watch.wait(5.0))
            await asyncio.sleep(0.05)  # the waiter is waiting
            committed = time.monotonic()
            await writer.txn([], [Put(f"g/k{i}", b"v")])
            assert await waiting
            delays.append(time.monotonic() - committed)
        # Generous for a shared machine, yet far below what a 100 ms poll would give.
        assert sorted(delays)[len(delays) // 2] < 0.03, delays
    finally:
        await watch.close()


@shared_backends
async def test_a_change_between_waits_is_not_lost(
    store: MetadataStore, second_handle: MetadataStore
) -> None:
    watcher, writer = store, second_handle
    watch = watcher.watch("g/")
    try:
        await watch.wait(1.0)
        await writer.txn([], [Put("g/first", b"1")])
        await watch.wait(1.0)
        # Committed while nobody waits: the next wait returns at once.
        await writer.txn([], [Put("g/between", b"2")])
        await asyncio.sleep(0.1)
        start = time.monotonic()
        assert await watch.wait(5.0)
        assert time.monotonic() - start < 1.0
    finally:
        await watch.close()


async def test_wrapping_stores_hand_out_their_inner_stores_watch(tmp_path: Path) -> None:
    """A store wrapped by the agent (sealed index entries) or a job (a lease's fence) keeps its
    own watch: the default 100 ms poll would undo the cross-agent wakeups."""
    inner = SqliteMetadataStore(tmp_path / "meta.db")
    try:
        for wrapper in (SealedIndex(inner, None), FencedMetadataStore(inner, Fence("f", 1))):
            assert isinstance(wrapper.watch("g/"), DataVersionWatch)
    finally:
        await inner.close()
