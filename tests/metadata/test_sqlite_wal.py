"""The SQLite store's WAL: grown ahead once a store is busy, and read back after a crash."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
from pathlib import Path

from infinistream.metadata.kv import Put
from infinistream.metadata.sqlite import (
    CHECKPOINT_WAL_BYTES,
    WAL_RESERVE_AFTER_COMMITS,
    WAL_RESERVE_BYTES,
    SqliteMetadataStore,
)


async def _commit(store: SqliteMetadataStore, i: int) -> None:
    result = await store.txn([], [Put(f"k/{i % 50:03d}", b"v%d" % i), Put("state", b"s%d" % i)])
    assert result.succeeded


async def test_a_busy_store_grows_its_wal_ahead_and_reads_back_after_a_crash(
    tmp_path: Path,
) -> None:
    path = tmp_path / "meta.db"
    store = SqliteMetadataStore(path)
    wal = Path(f"{path}-wal")
    try:
        for i in range(WAL_RESERVE_AFTER_COMMITS - 1):
            await _commit(store, i)
        assert wal.stat().st_size < WAL_RESERVE_BYTES  # not yet: a quiet store reserves nothing
        await _commit(store, WAL_RESERVE_AFTER_COMMITS - 1)
        for _ in range(1000):  # the worker thread grows it
            if wal.stat().st_size >= WAL_RESERVE_BYTES:
                break
            await asyncio.sleep(0.01)
        assert wal.stat().st_size == WAL_RESERVE_BYTES
        # Commits go on, past a checkpoint (the WAL then starts again from its beginning,
        # within the reserved size), and each is read back.
        commits = WAL_RESERVE_AFTER_COMMITS + 2 * CHECKPOINT_WAL_BYTES // (3 * 4096)
        for i in range(WAL_RESERVE_AFTER_COMMITS, commits):
            await _commit(store, i)
        assert wal.stat().st_size == WAL_RESERVE_BYTES
        state = await store.get("state")
        assert state is not None and state.value == b"s%d" % (commits - 1)
        # A crash: the files as they are on disk now, opened by a new process. SQLite reads
        # the WAL up to its last valid frame; the zeros after it are not frames.
        crashed = tmp_path / "crashed"
        crashed.mkdir()
        shutil.copy(path, crashed / "meta.db")
        shutil.copy(wal, crashed / "meta.db-wal")
    finally:
        await store.close()
    con = sqlite3.connect(crashed / "meta.db")
    try:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        (value,) = con.execute("SELECT value FROM kv WHERE key = ?", (b"state",)).fetchone()
        assert value == b"s%d" % (commits - 1)
        assert con.execute("SELECT count(*) FROM kv").fetchone() == (51,)
    finally:
        con.close()


async def test_the_wal_is_reserved_only_where_the_file_system_can_spare_it(
    tmp_path: Path,
) -> None:
    store = SqliteMetadataStore(tmp_path / "meta.db")
    try:
        stat = os.statvfs(tmp_path)
        for i in range(WAL_RESERVE_AFTER_COMMITS + 5):
            await _commit(store, i)
        await asyncio.sleep(0.2)
        size = Path(f"{tmp_path / 'meta.db'}-wal").stat().st_size
        roomy = stat.f_bavail * stat.f_frsize >= 64 * WAL_RESERVE_BYTES
        assert (size >= WAL_RESERVE_BYTES) == roomy
    finally:
        await store.close()
