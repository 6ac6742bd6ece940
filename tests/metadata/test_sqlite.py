"""What only the SQLite backend promises: durability settings, sharing a file between processes,
errors that name the file, the URL forms, and a thread that never blocks the event loop."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from infinistream.metadata import (
    Compare,
    Delete,
    DeletePrefix,
    Item,
    MetadataError,
    Op,
    Put,
    SqliteMetadataStore,
    open_metadata,
    prefix_end,
)
from infinistream.metadata.sqlite import CHECKPOINT_WAL_BYTES, _range_sql
from support.comparereads import CompareReads


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "meta.db"


@pytest.fixture
async def store(db: Path) -> AsyncIterator[SqliteMetadataStore]:
    s = SqliteMetadataStore(db)
    yield s
    await s.close()


# -- durability -------------------------------------------------------------------------------


async def test_pragmas_are_durable(store: SqliteMetadataStore) -> None:
    pragmas = await store.pragmas()
    assert pragmas["journal_mode"] == "wal"
    assert pragmas["synchronous"] == 2  # FULL: the WAL is fsynced at every commit
    assert pragmas["fullfsync"] == 1 and pragmas["checkpoint_fullfsync"] == 1
    assert int(pragmas["busy_timeout"]) >= 1000


async def test_only_durable_commits_wait_for_the_fsync(store: SqliteMetadataStore) -> None:
    async def synchronous() -> int:
        return int(
            await store._run_on_connection(lambda c: c.execute("PRAGMA synchronous").fetchone()[0])
        )

    await store.txn([], [Put("k", b"1")], durable=False)
    assert await synchronous() == 1  # NORMAL: the WAL is synced by a later commit or checkpoint
    await store.txn([], [Put("k", b"2")])
    assert await synchronous() == 2  # FULL again, which syncs the WAL with both commits in it
    assert (await store.get("k")) is not None


async def test_wal_mode_is_persistent_in_the_file(store: SqliteMetadataStore, db: Path) -> None:
    await store.revision()
    raw = sqlite3.connect(db)
    try:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("SELECT DISTINCT typeof(key) FROM kv").fetchall() in ([], [("blob",)])
    finally:
        raw.close()


async def test_reopen_keeps_everything(db: Path) -> None:
    first = SqliteMetadataStore(db)
    await first.txn([], [Put(f"r/{i}", str(i).encode()) for i in range(100)])
    result = await first.txn([], [Delete("r/7"), Put("r/é", b"x")])
    before = await first.range("")
    await first.close()

    again = SqliteMetadataStore(db)
    try:
        assert await again.revision() == result.revision
        assert await again.range("") == before
        assert await again.get("r/7") is None
        assert await again.get("r/é") == Item("r/é", b"x", result.revision)
        # and the revision keeps counting from where it was
        assert (await again.txn([], [Put("r/next", b"")])).revision == result.revision + 1
    finally:
        await again.close()


_ACKING_WRITER = """
import asyncio, sys
from infinistream.metadata import Put, SqliteMetadataStore

async def main() -> None:
    store = SqliteMetadataStore(sys.argv[1])
    i = 0
    while True:
        # Every other commit not durable: those too are written before txn returns, so only a
        # machine crash (not a killed process) could lose them.
        result = await store.txn([], [Put(f"acked/{i:06d}", b"x" * 100)], durable=i % 2 == 0)
        print(i, result.revision, flush=True)  # the "ack": only after the commit returned
        i += 1

asyncio.run(main())
"""


async def test_kill_9_loses_no_acknowledged_commit(db: Path) -> None:
    """Invariant 4 at the metadata layer: a commit that returned survives the process dying."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _ACKING_WRITER, str(db), stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    acked: list[tuple[int, int]] = []
    while len(acked) < 200:
        line = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert line, "writer died"
        index, revision = map(int, line.split())
        acked.append((index, revision))
    proc.send_signal(signal.SIGKILL)
    await proc.wait()

    store = SqliteMetadataStore(db)
    try:
        got = await store.get_many([f"acked/{i:06d}" for i, _ in acked])
        assert [got[f"acked/{i:06d}"].mod_revision for i, _ in acked] == [r for _, r in acked]
        assert await store.revision() >= acked[-1][1]
    finally:
        await store.close()


# -- several processes on one file ------------------------------------------------------------

_CAS_INCREMENTER = """
import asyncio, json, sys
from infinistream.metadata import Compare, Put, SqliteMetadataStore

async def main(path: str, rounds: int) -> None:
    store = SqliteMetadataStore(path)
    await store.revision()
    print("ready", flush=True)
    sys.stdin.readline()  # start together with the other process
    revisions, failures = [], 0
    for _ in range(rounds):
        while True:
            item = await store.get("counter")
            count = 0 if item is None else int(item.value)
            expected = 0 if item is None else item.mod_revision
            result = await store.txn(
                [Compare("counter", expected)], [Put("counter", str(count + 1).encode())]
            )
            if result.succeeded:
                revisions.append(result.revision)
                break
            failures += 1
    await store.close()
    print(json.dumps({"revisions": revisions, "failures": failures}), flush=True)

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


async def test_cas_across_two_processes(db: Path) -> None:
    rounds = 300
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CAS_INCREMENTER,
            str(db),
            str(rounds),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(2)
    ]
    for proc in procs:
        assert proc.stdout is not None
        assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"ready\n"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
    reports = []
    for proc in procs:
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0
        reports.append(json.loads(out))

    revisions = [r for report in reports for r in report["revisions"]]
    store = SqliteMetadataStore(db)
    try:
        item = await store.get("counter")
        assert item is not None
        # no lost update: the count is exactly the number of successful transactions
        assert int(item.value) == len(revisions) == 2 * rounds
        assert len(set(revisions)) == len(revisions)  # each success had its own revision
        assert item.mod_revision == max(revisions) == await store.revision()
    finally:
        await store.close()
    # The processes really raced (otherwise this test would prove little).
    assert sum(report["failures"] for report in reports) > 0


async def test_waiting_for_another_writer_does_not_block_the_loop(db: Path) -> None:
    store = SqliteMetadataStore(db)
    await store.revision()
    other = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process holding the write lock
        txn = asyncio.create_task(store.txn([], [Put("k", b"v")]))
        ticks = 0
        for _ in range(30):
            await asyncio.sleep(0.01)
            ticks += 1
        assert not txn.done()
        assert ticks == 30
        other.execute("ROLLBACK")
        result = await asyncio.wait_for(txn, 10)
        assert result.succeeded
    finally:
        other.close()
        await store.close()


async def test_lock_timeout_raises_metadata_error(db: Path) -> None:
    store = SqliteMetadataStore(db, lock_timeout=0.2)
    await store.txn([], [Put("k", b"v")])
    rev = await store.revision()
    other = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(MetadataError, match="locked") as error:
            await store.txn([], [Put("k", b"w")])
        assert str(db) in str(error.value)
        other.execute("ROLLBACK")
        # reads are never blocked by a writer in WAL mode, and the store is still usable
        assert await store.get("k") == Item("k", b"v", rev)
        assert (await store.txn([], [Put("k", b"w")])).succeeded
    finally:
        other.close()
        await store.close()


# -- errors name the file ---------------------------------------------------------------------


async def test_unreachable_path(tmp_path: Path) -> None:
    path = tmp_path / "no-such-dir" / "meta.db"
    store = SqliteMetadataStore(path)
    try:
        with pytest.raises(MetadataError, match="directory") as error:
            await store.revision()
        assert str(path) in str(error.value)
    finally:
        await store.close()


async def test_corrupt_file(db: Path) -> None:
    db.write_bytes(os.urandom(8192))
    store = SqliteMetadataStore(db)
    try:
        with pytest.raises(MetadataError) as error:
            await store.get("k")
        assert str(db) in str(error.value)
    finally:
        await store.close()


async def test_foreign_sqlite_file_is_refused(db: Path) -> None:
    raw = sqlite3.connect(db)
    raw.execute("CREATE TABLE orders (id INTEGER)")
    raw.commit()
    raw.close()
    store = SqliteMetadataStore(db)
    try:
        with pytest.raises(MetadataError, match="not an InfiniStream metadata file"):
            await store.revision()
    finally:
        await store.close()


async def test_newer_schema_is_refused(db: Path) -> None:
    store = SqliteMetadataStore(db)
    await store.revision()
    await store.close()
    raw = sqlite3.connect(db)
    raw.execute("PRAGMA user_version = 99")
    raw.commit()
    raw.close()
    store = SqliteMetadataStore(db)
    try:
        with pytest.raises(MetadataError, match="newer"):
            await store.revision()
    finally:
        await store.close()


async def test_disk_full_rolls_back_and_names_the_file(
    store: SqliteMetadataStore, db: Path
) -> None:
    rev = (await store.txn([], [Put("k/0", b"before")])).revision
    # A page budget is SQLite's own way to make the "disk" full (SQLITE_FULL) on demand.
    pages = await store._run_on_connection(lambda c: c.execute("PRAGMA page_count").fetchone()[0])
    await store._run_on_connection(lambda c: c.execute(f"PRAGMA max_page_count = {pages}"))
    with pytest.raises(MetadataError, match="full") as error:
        await store.txn([], [Put(f"k/{i}", os.urandom(1000)) for i in range(1, 1000)])
    assert str(db) in str(error.value)
    assert await store.revision() == rev
    assert await store.range("k/") == [Item("k/0", b"before", rev)]
    await store._run_on_connection(lambda c: c.execute("PRAGMA max_page_count = 1073741823"))
    assert (await store.txn([], [Put("k/1", b"after")])).revision == rev + 1


async def test_str_value_is_refused_and_changes_nothing(store: SqliteMetadataStore) -> None:
    rev = await store.revision()
    with pytest.raises(TypeError):
        await store.txn([], [Put("a", b"ok"), Put("b", "not bytes")])  # type: ignore[arg-type]
    assert await store.revision() == rev
    assert await store.get("a") is None


# -- keys, ranges and indexes -----------------------------------------------------------------


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("keys_only", [False, True])
async def test_prefix_ranges_use_the_primary_key(
    store: SqliteMetadataStore, reverse: bool, keys_only: bool
) -> None:
    await store.txn([], [Put(f"p/é/{i}", b"x") for i in range(1000)])
    sql = _range_sql(bounded=True, reverse=reverse, keys_only=keys_only, limited=True)
    low = "p/é/".encode()
    params = (low, prefix_end(low), 10)

    def plan(conn: sqlite3.Connection) -> str:
        return " | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))

    detail = await store._run_on_connection(plan)
    assert "SEARCH kv USING PRIMARY KEY (key>? AND key<?)" in detail
    assert "TEMP B-TREE" not in detail  # the index gives the order, forwards and backwards


@pytest.mark.parametrize(
    ("sql", "params"),
    [
        ("DELETE FROM kv WHERE key >= ? AND key < ?", (b"a", b"b")),
        ("SELECT key, value, mod_revision FROM kv WHERE key IN (?,?,?,?)", (b"a",) * 4),
        ("SELECT value, mod_revision FROM kv WHERE key = ?", (b"a",)),
    ],
)
async def test_deletes_and_lookups_use_the_primary_key(
    store: SqliteMetadataStore, sql: str, params: tuple[bytes, ...]
) -> None:
    rows = await store._run_on_connection(
        lambda c: c.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall()
    )
    detail = " | ".join(row[3] for row in rows)
    assert "USING PRIMARY KEY" in detail


async def test_big_txn_with_mixed_ops(store: SqliteMetadataStore) -> None:
    await store.txn([], [Put(f"b/{i:05d}", b"1") for i in range(10_000)])
    ops: list[Op] = [Delete(f"b/{i:05d}") for i in range(0, 10_000, 2)]
    ops.append(DeletePrefix("b/09"))
    result = await store.txn([Compare("b/00001", await store.revision())], ops)
    assert result.succeeded
    items = await store.range("b/", keys_only=True)
    assert len(items) == 4500
    assert all(int(item.key[2:]) % 2 == 1 and not item.key.startswith("b/09") for item in items)


# -- URLs and lifecycle -----------------------------------------------------------------------


async def test_open_metadata_absolute_path(db: Path) -> None:
    store = open_metadata(f"sqlite://{db}")
    assert isinstance(store, SqliteMetadataStore) and store.path == str(db)
    await store.txn([], [Put("k", b"v")])
    await store.close()
    assert db.exists()


async def test_open_metadata_relative_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    store = open_metadata("sqlite://data/meta.db")
    assert isinstance(store, SqliteMetadataStore)
    assert store.path == str(tmp_path / "data" / "meta.db")
    await store.revision()
    await store.close()
    assert (tmp_path / "data" / "meta.db").exists()


async def test_open_metadata_quoted_path_and_memory(tmp_path: Path) -> None:
    spaced = open_metadata(f"sqlite://{tmp_path}/with%20space.db")
    assert isinstance(spaced, SqliteMetadataStore)
    assert spaced.path == str(tmp_path / "with space.db")
    await spaced.close()
    memory = open_metadata("sqlite://:memory:")
    assert (await memory.txn([], [Put("k", b"v")])).succeeded
    assert (await memory.get("k")) is not None
    await memory.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("etcd2://h:1", "unknown metadata URL scheme 'etcd2'"),
        ("redis://localhost:6379", "unknown metadata URL scheme 'redis'"),
        ("/var/lib/meta.db", "has no scheme"),
        ("sqlite://", "names no file"),
        ("sqlite:///var/lib/", "names no file"),
        ("sqlite:///tmp/meta.db?mode=ro", "no query"),
    ],
)
def test_open_metadata_bad_urls(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        open_metadata(url)


def _store_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("metadata-sqlite[")]


async def test_calls_that_need_not_wait_run_on_the_loop(db: Path) -> None:
    store = SqliteMetadataStore(db)
    try:
        rev = (await store.txn([], [Put("k", b"v")])).revision
        assert await store.get("k") == Item("k", b"v", rev)
        assert await store.range("k") == [Item("k", b"v", rev)]
        assert await store.get_many(["k", "missing"]) == {"k": Item("k", b"v", rev)}
        # The worker thread starts only for a call that would wait: none did.
        assert _store_threads() == []
    finally:
        await store.close()


async def test_close_ends_the_thread(db: Path) -> None:
    store = SqliteMetadataStore(db)
    await store.pragmas()  # runs on the worker thread
    assert len(_store_threads()) == 1
    await store.close()
    assert _store_threads() == []
    with pytest.raises(MetadataError, match="closed"):
        await store.revision()


async def test_the_worker_thread_checkpoints_the_wal(db: Path) -> None:
    store = SqliteMetadataStore(db)
    try:
        await store.txn([], [Put("k/0", b"x")])
        before = db.stat().st_size
        value = os.urandom(1024 * 1024)
        mib = CHECKPOINT_WAL_BYTES // len(value)
        for i in range(mib + 1):  # through the WAL: past the checkpoint threshold, once
            await store.txn([], [Put(f"k/{i}", value)])
        assert store._checkpointing is not None
        await store._checkpointing
        # The loop's connection never checkpoints: the pages reached the file on the thread.
        assert db.stat().st_size > before + CHECKPOINT_WAL_BYTES
        assert len(_store_threads()) == 1
        # The WAL file keeps its size, but the next checkpoint waits for as much again.
        done = store._checkpointing
        for i in range(10):
            await store.txn([], [Put(f"small/{i}", b"x")])
        assert store._checkpointing is done
    finally:
        await store.close()


async def test_compares_are_answered_from_the_last_commit_until_another_commits(
    store: SqliteMetadataStore, db: Path
) -> None:
    await store.txn([], [Put("g/a", b"1"), Put("g/b", b"1")])
    reads = CompareReads(store)

    # The keys the last commit wrote are known: no read, and a stale compare still fails.
    assert (await store.txn([Compare("g/a", 1)], [Put("g/a", b"2")])).succeeded
    assert reads() == 0
    assert not (await store.txn([Compare("g/a", 1)], [Put("g/a", b"x")])).succeeded
    assert reads() == 1
    # Another process commits: what this connection remembers is not trusted any more.
    other = SqliteMetadataStore(db)
    try:
        assert (await other.txn([], [Put("g/a", b"theirs")])).succeeded
    finally:
        await other.close()
    assert not (await store.txn([Compare("g/a", 2)], [Put("g/a", b"mine")])).succeeded
    assert reads() == 1
    item = await store.get("g/a")
    assert item is not None and item.value == b"theirs"
