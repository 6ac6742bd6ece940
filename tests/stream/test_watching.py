"""`other_commits`: a commit through another handle is seen, a quiet wait says so, and a
failing watch is logged and waited out rather than raised into the loop that follows it."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from infinistream.metadata import Put, SqliteMetadataStore
from infinistream.stream.watching import other_commits

log = logging.getLogger("test_watching")


async def test_a_commit_is_seen_and_a_quiet_wait_is_not(tmp_path: Path) -> None:
    watcher = SqliteMetadataStore(tmp_path / "meta.db")
    writer = SqliteMetadataStore(tmp_path / "meta.db")
    watch = watcher.watch("g/")
    try:
        await watch.wait(1.0)  # the first wait knows nothing yet: it returns at once
        await writer.txn([], [Put("g/k", b"v")])
        assert await other_commits(watch, 5.0, retry_after=0.0, log=log)
        while await other_commits(watch, 0.3, retry_after=0.0, log=log):
            pass  # the commit (and the watch's opening) settled
        assert not await other_commits(watch, 0.1, retry_after=0.0, log=log)
    finally:
        await watch.close()
        await writer.close()
        await watcher.close()


async def test_a_failing_watch_is_logged_and_waited_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SqliteMetadataStore(tmp_path / "meta.db")
    watch = store.watch("g/")
    await watch.wait(1.0)
    await store.close()  # every wait from now on fails
    start = time.monotonic()
    with caplog.at_level(logging.ERROR, logger=log.name):
        assert not await other_commits(watch, 5.0, retry_after=0.2, log=log)
    assert time.monotonic() - start >= 0.19
    [record] = [r for r in caplog.records if r.name == log.name]
    assert record.getMessage() == "watching metadata for other agents' commits"
    assert record.exc_info is not None
    await watch.close()
