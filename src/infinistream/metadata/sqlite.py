"""`MetadataStore` on one SQLite file: the embedded default, shared by agent processes on one host.

Layout: `kv(key BLOB PRIMARY KEY, value BLOB, mod_revision INTEGER) WITHOUT ROWID` plus a one-row
`meta` table holding the store-wide revision. Keys are stored as their UTF-8 bytes in a BLOB
column, so SQLite compares them with memcmp: the order is bytewise by construction (no collation
to get wrong), and a prefix scan is a range `prefix <= key < prefix_end(prefix)` on the primary
key, which a WITHOUT ROWID table keeps clustered, so a range is one sequential b-tree walk.

Each store has two connections. Calls run on the event loop's own connection when they can
finish without waiting for another connection's lock, which is nearly always: in WAL mode readers
never wait, and a commit waits only while another process writes. A commit does wait for its
fsync there (tens of microseconds on a local SSD). Handing every call to a thread instead costs
more than that under the GIL: each of a transaction's statements gives up the GIL and must win it
back from a busy event loop, which measured 1-3 us more agent CPU per fetched message and added
milliseconds of latency per commit. A call that would wait (SQLITE_BUSY) is run again, from the
start, on the store's worker thread, whose connection waits up to `lock_timeout`, so the loop
never blocks on a lock. The worker thread also runs the WAL checkpoints, which the loop's
connection never does: a checkpoint copies and fsyncs up to megabytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from infinistream.metadata.commitrecord import CommitRecord, decode_record, encode_record
from infinistream.metadata.kv import (
    ChangeWatch,
    Compare,
    Delete,
    DeletePrefix,
    DeleteRange,
    Get,
    Item,
    MetadataError,
    MetadataStore,
    Op,
    PollWatch,
    Put,
    RangeQuery,
    Read,
    RecordedTxn,
    Scan,
    Snapshot,
    TxnResult,
    prefix_end,
)
from infinistream.metadata.sqlite_ticker import CallbackTicker
from infinistream.metadata.syncbarrier import SyncBarrier

__all__ = ["MEMORY", "SqliteMetadataStore"]

T = TypeVar("T")
log = logging.getLogger(__name__)

# The path that makes a private in-memory store (one process, one handle; handy in tests).
MEMORY = ":memory:"
# How often `data_version` is read while a watch waits: a commit by another agent process
# wakes its watchers within about this long.
WATCH_INTERVAL = 0.002

# Written to the file header so that opening some other SQLite file fails loudly instead of
# quietly adding our tables to it. 0x49535452 is "ISTR".
APPLICATION_ID = 0x49535452
SCHEMA_VERSION = 1

# SQLite allows 32766 bound parameters per statement; stay far below and pad each chunk up to a
# power of two so a handful of statement texts cover every size (the statement cache hits).
_MAX_IN_PARAMS = 512

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS kv (
        key BLOB PRIMARY KEY NOT NULL,
        value BLOB NOT NULL,
        mod_revision INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS meta (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        revision INTEGER NOT NULL
    )""",
    "INSERT OR IGNORE INTO meta (id, revision) VALUES (1, 0)",
    f"PRAGMA application_id = {APPLICATION_ID}",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)

_COUNT_TABLES = "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
_SELECT_REVISION = "SELECT revision FROM meta WHERE id = 1"
_UPDATE_REVISION = "UPDATE meta SET revision = ? WHERE id = 1"
_GET = "SELECT value, mod_revision FROM kv WHERE key = ?"
_UPSERT = "INSERT OR REPLACE INTO kv (key, value, mod_revision) VALUES (?, ?, ?)"
_DELETE_KEY = "DELETE FROM kv WHERE key = ?"
_DELETE_FROM = "DELETE FROM kv WHERE key >= ?"
_DELETE_RANGE = "DELETE FROM kv WHERE key >= ? AND key < ?"

_BUSY = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})

# WAL written since the last checkpoint past which a commit asks the worker thread for one.
# SQLite's own default (1000 pages): once a checkpoint has copied the WAL into the database, the
# next commit writes the WAL from its start again, into blocks the file already has, and its
# fsync then writes data alone. A commit that grows the file also commits the file system's
# journal (its new size and blocks): on a busy ext4 disk 4-7 ms against 0.6 ms for the same
# fsync into existing blocks, and a publish waits for it. A checkpoint copies the last version
# of each page only (busy keys, a consumer's state, are rewritten at every commit), so this
# costs little copying.
CHECKPOINT_WAL_BYTES = 4 * 1024 * 1024
# After this many commits a store has shown it is busy: its WAL file is grown at once, with
# zeros, to WAL_RESERVE_BYTES (twice the checkpoint interval, so that a WAL reused from its
# start stays within it), so that no commit before the first checkpoint grows it either. Only
# where the file system has WAL_RESERVE_FREE_SHARE times that free: a store on a small or
# nearly full file system reserves nothing ahead.
WAL_RESERVE_AFTER_COMMITS = 64
WAL_RESERVE_BYTES = 2 * CHECKPOINT_WAL_BYTES
WAL_RESERVE_FREE_SHARE = 64
_ZEROS = bytes(1024 * 1024)
# What a commit adds to the WAL besides its values, roughly: the pages of the b-tree path and
# of the revision row. (The WAL file's size says nothing: SQLite reuses it from the start.)
_COMMIT_OVERHEAD_BYTES = 3 * 4096


@functools.cache
def _range_sql(*, bounded: bool, reverse: bool, keys_only: bool, limited: bool) -> str:
    columns = "key, mod_revision" if keys_only else "key, value, mod_revision"
    where = "key >= ? AND key < ?" if bounded else "key >= ?"
    order = "DESC" if reverse else "ASC"
    limit = " LIMIT ?" if limited else ""
    return f"SELECT {columns} FROM kv WHERE {where} ORDER BY key {order}{limit}"


@functools.cache
def _in_sql(columns: str, n: int) -> str:
    return f"SELECT {columns} FROM kv WHERE key IN ({','.join('?' * n)})"


def _in_chunks(keys: list[bytes]) -> Iterator[tuple[int, list[bytes]]]:
    """(n, params) per chunk; n is a power of two and params are padded with a repeated key."""
    for i in range(0, len(keys), _MAX_IN_PARAMS):
        chunk = keys[i : i + _MAX_IN_PARAMS]
        n = 1 << (len(chunk) - 1).bit_length()
        yield n, chunk + [chunk[0]] * (n - len(chunk))


def _is_busy(error: sqlite3.Error) -> bool:
    # Extended codes (SQLITE_BUSY_SNAPSHOT, _RECOVERY, ...) keep the primary code in the low byte.
    return (getattr(error, "sqlite_errorcode", 0) & 0xFF) in _BUSY


class _WouldWait(Exception):
    """A call on the loop's connection met another connection's lock (SQLITE_BUSY)."""


class _Worker:
    """One connection and the calls on it; each instance is used by one thread only.

    With `waits` (the worker thread's connection) a call waits for other connections' locks up
    to `lock_timeout`; without (the event loop's), it raises `_WouldWait` at once instead, and
    leaves WAL checkpoints to the other.
    """

    def __init__(self, path: str, lock_timeout: float, *, waits: bool = True) -> None:
        self.path = path
        self.lock_timeout = lock_timeout
        self.waits = waits
        self.conn: sqlite3.Connection | None = None
        self.synchronous_full = True
        # Writes that sync the WAL hold it exclusive (see syncbarrier); none in memory.
        self.barrier = None if path == MEMORY else SyncBarrier(path)
        # The last commit made on this connection: its revision, and the mod revision it left
        # to each key it compared or wrote (`_compares_hold_at`).
        self.left: _Left | None = None

    # -- connection ---------------------------------------------------------------------------

    def _error(self, doing: str, error: BaseException) -> MetadataError:
        name = getattr(error, "sqlite_errorname", type(error).__name__)
        hint = ""
        if getattr(error, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_CANTOPEN:
            hint = "; does its directory exist, and may this process write there?"
        return MetadataError(
            f"SQLite metadata store {self.path}: {doing} failed: {error} ({name}){hint}"
        )

    def connection(self) -> sqlite3.Connection:
        if self.conn is None:
            # Connect lazily, on this thread: the store can be built anywhere without blocking,
            # and a store whose file was unreachable can succeed on a later call.
            try:
                conn = sqlite3.connect(
                    self.path,
                    # The busy timeout: wait on other connections' locks (0: do not wait).
                    timeout=self.lock_timeout if self.waits else 0,
                    isolation_level=None,  # no implicit BEGIN: we issue BEGIN IMMEDIATE ourselves
                    cached_statements=256,
                )
            except sqlite3.Error as e:
                raise self._error("open", e) from e
            try:
                self._retrying(lambda: self._configure(conn), "open")
            except BaseException:
                conn.close()
                raise
            self.conn = conn
        return self.conn

    def _configure(self, conn: sqlite3.Connection) -> None:
        # Durability: WAL with synchronous=FULL fsyncs the WAL at every commit, so a commit that
        # returned (and so a PubAck or ack built on it) survives power loss, with one fsync per
        # commit. synchronous=NORMAL syncs only at checkpoints: power loss could undo the last
        # commits, so it is used only for the commits `txn(durable=False)` allows.
        # journal_mode=DELETE would be durable too, but needs more fsyncs per commit and makes
        # readers in other agent processes block the writer. WAL needs the processes on one
        # host (its index is shared memory), which is this backend's scope.
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if mode != "wal" and not (self.path == MEMORY and mode == "memory"):
            raise MetadataError(
                f"SQLite metadata store {self.path}: cannot use WAL journal mode (got {mode!r});"
                " is the file on a network file system?"
            )
        conn.execute("PRAGMA synchronous = FULL")
        self.synchronous_full = True
        # macOS fsync() does not reach the platter; F_FULLFSYNC does. No-ops elsewhere.
        conn.execute("PRAGMA fullfsync = ON")
        conn.execute("PRAGMA checkpoint_fullfsync = ON")
        # After a checkpoint, truncate a WAL that a burst grew, rather than keep it at peak size.
        conn.execute("PRAGMA journal_size_limit = 67108864")
        if not self.waits:
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        if not self._schema_ready(conn):
            conn.execute("BEGIN IMMEDIATE")
            try:
                # Re-check under the write lock: another process may have just created it.
                if not self._schema_ready(conn):
                    for statement in _SCHEMA:
                        conn.execute(statement)
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise

    def _schema_ready(self, conn: sqlite3.Connection) -> bool:
        app_id = int(conn.execute("PRAGMA application_id").fetchone()[0])
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if app_id == APPLICATION_ID:
            if version > SCHEMA_VERSION:
                raise MetadataError(
                    f"SQLite metadata store {self.path}: schema version {version} is newer than"
                    f" this build understands ({SCHEMA_VERSION}); upgrade InfiniStream"
                )
            return version == SCHEMA_VERSION
        tables = int(conn.execute(_COUNT_TABLES).fetchone()[0])
        if (app_id != 0 or tables) and conn.in_transaction:
            # Judged only under the write lock: outside it, the reads above are separate
            # snapshots, and another process creating the schema between them looks like a
            # foreign file (no application id, but tables).
            raise MetadataError(
                f"SQLite metadata store {self.path}: not an InfiniStream metadata file"
                f" (application_id {app_id:#x}, {tables} tables)"
            )
        return False

    def close(self) -> None:
        if self.barrier is not None:
            self.barrier.close()
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error as e:
                raise self._error("close", e) from e

    def _retrying(self, attempt: Callable[[], T], doing: str) -> T:
        """Run `attempt`, again while another connection holds a lock, up to lock_timeout.

        The busy timeout already waits inside SQLite for most lock conflicts; this loop covers
        the cases where SQLite returns SQLITE_BUSY without calling the busy handler (WAL
        recovery, a stale read snapshot). `attempt` must leave no transaction open on failure.
        """
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.001
        while True:
            try:
                return attempt()
            except sqlite3.Error as e:
                if not _is_busy(e):
                    raise self._error(doing, e) from e
                if not self.waits:
                    raise _WouldWait(doing) from e
                if time.monotonic() >= deadline:
                    raise MetadataError(
                        f"SQLite metadata store {self.path}: {doing} failed: still locked by"
                        f" another connection after {self.lock_timeout:g} s ({e})"
                    ) from e
            time.sleep(delay * random.uniform(0.5, 1.5))  # jitter: processes do not retry in step
            delay = min(delay * 2, 0.05)

    def _excluding(self, attempt: Callable[[], T], doing: str) -> T:
        """`_retrying(attempt)` holding the sync barrier exclusive: a write that may sync
        the WAL (a commit, whatever its `synchronous`, may checkpoint) waits for the commits
        whose durability their packs make. The loop's connection does not wait: it hands the
        call to the thread."""
        if self.barrier is None:
            return self._retrying(attempt, doing)
        with self.barrier.exclusive(wait=self.waits) as held:
            if not held:
                raise _WouldWait(doing)
            return self._retrying(attempt, doing)

    def _read(self, query: Callable[[sqlite3.Connection], T], doing: str) -> T:
        conn = self.connection()
        return self._retrying(lambda: query(conn), doing)

    # -- reads --------------------------------------------------------------------------------

    def revision(self) -> int:
        return self._read(lambda c: int(c.execute(_SELECT_REVISION).fetchone()[0]), "revision")

    def data_version(self) -> int:
        """Changes whenever another connection (of any process) committed since the last call."""
        return self._read(lambda c: int(c.execute("PRAGMA data_version").fetchone()[0]), "watch")

    def get(self, key: str) -> Item | None:
        row = self._read(lambda c: c.execute(_GET, (key.encode(),)).fetchone(), "get")
        return None if row is None else Item(key, row[0], row[1])

    def get_many(self, keys: list[str]) -> dict[str, Item]:
        wanted = list(dict.fromkeys(k.encode() for k in keys))
        if not wanted:
            return {}

        def query(conn: sqlite3.Connection) -> list[Any]:
            chunks = list(_in_chunks(wanted))
            if len(chunks) == 1:
                n, params = chunks[0]
                return conn.execute(_in_sql("key, value, mod_revision", n), params).fetchall()
            # Several statements: one read transaction makes them one consistent snapshot.
            conn.execute("BEGIN")
            try:
                rows = []
                for n, params in chunks:
                    sql = _in_sql("key, value, mod_revision", n)
                    rows.extend(conn.execute(sql, params).fetchall())
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
            return rows

        rows = self._read(query, "get_many")
        return {(k := key.decode()): Item(k, value, rev) for key, value, rev in rows}

    def range(self, scan: _Scan) -> list[Item]:
        if scan.bounds is None:
            return []
        return self._read(lambda c: _scan(c, scan), "range")

    def snapshot(self, reads: list[bytes | _Scan]) -> Snapshot:
        def query(conn: sqlite3.Connection) -> Snapshot:
            # A deferred transaction's first SELECT fixes the snapshot every later one reads
            # (WAL mode): the reads see the same commits, and writers are not held up.
            conn.execute("BEGIN")
            try:
                revision = int(conn.execute(_SELECT_REVISION).fetchone()[0])
                found: list[list[Item]] = []
                for read in reads:
                    if isinstance(read, bytes):
                        row = conn.execute(_GET, (read,)).fetchone()
                        found.append([] if row is None else [Item(read.decode(), *row)])
                    else:
                        found.append(_scan(conn, read))
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
            return Snapshot(revision, tuple(found))

        return self._read(query, "snapshot")

    # -- the transaction ----------------------------------------------------------------------

    def txn(self, compares: list[Compare], ops: list[Op], durable: bool = True) -> TxnResult:
        conn = self.connection()
        if durable != self.synchronous_full:
            # FULL fsyncs the WAL at this commit; NORMAL leaves that to the next FULL commit
            # or checkpoint (the WAL is sequential, so that one makes this one durable too).
            conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
            self.synchronous_full = durable

        def attempt() -> TxnResult:
            # IMMEDIATE takes the write lock up front, so the compares below and the writes that
            # depend on them see one state no other process can change in between (a DEFERRED
            # transaction would read first and could fail with SQLITE_BUSY on its first write).
            conn.execute("BEGIN IMMEDIATE")
            try:
                current = int(conn.execute(_SELECT_REVISION).fetchone()[0])
                if not self._compares_hold_at(conn, current, compares):
                    conn.execute("ROLLBACK")
                    return TxnResult(False, current)
                revision = current + 1
                if not _apply(conn, ops, revision):
                    # Nothing changed (no ops, or deletes of missing keys): like etcd, the
                    # revision only moves when the data does, so pollers see no false change.
                    conn.execute("ROLLBACK")
                    return TxnResult(True, current)
                conn.execute(_UPDATE_REVISION, (revision,))
                conn.execute("COMMIT")
                self.left = _Left.after(revision, compares, ops)
                return TxnResult(True, revision)
            except BaseException:
                _rollback(conn)
                raise

        return self._excluding(attempt, "txn")

    def _compares_hold_at(
        self, conn: sqlite3.Connection, current: int, compares: list[Compare]
    ) -> bool:
        """Whether the compares hold in the database at revision `current`, within a write
        transaction. Nothing committed since this connection's last commit: what it left of
        the keys it compared or wrote is what is there, and compares of those need no read (a
        flush, or a consumer's commit, compares the keys its commit before wrote: their read
        is about a third of the commit)."""
        left = self.left
        if left is not None and left.revision == current and left.holds(compares):
            return True
        return _compares_hold(conn, compares)

    def txn_recorded(self, compares: list[Compare], ops: list[Op], base: int) -> RecordedTxn:
        """`txn` without syncing the WAL, its durability left to the record returned (see
        `SqliteMetadataStore.txn_recorded`). Made only on the loop's connection, when the
        database's revision is still `base` (the last commit is this store's own, durable or
        recorded and synced) and no WAL sync is under way; else not made."""
        if self.barrier is None or self.waits:
            return RecordedTxn(None, None)
        barrier = self.barrier
        conn = self.connection()
        if self.synchronous_full:
            conn.execute("PRAGMA synchronous = NORMAL")
            self.synchronous_full = False

        def attempt() -> RecordedTxn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                current = int(conn.execute(_SELECT_REVISION).fetchone()[0])
                if current != base:
                    # Another connection committed since: its commit may be durable by its
                    # pack alone, not yet synced. Committed durably, this one covers it.
                    conn.execute("ROLLBACK")
                    return RecordedTxn(None, None)
                if not self._compares_hold_at(conn, current, compares):
                    conn.execute("ROLLBACK")
                    return RecordedTxn(TxnResult(False, current), None)
                revision = current + 1
                if not _apply(conn, ops, revision):
                    conn.execute("ROLLBACK")
                    return RecordedTxn(TxnResult(True, current), None)
                if not barrier.try_shared():
                    conn.execute("ROLLBACK")
                    return RecordedTxn(None, None)
                try:
                    conn.execute(_UPDATE_REVISION, (revision,))
                    conn.execute("COMMIT")
                except BaseException:
                    barrier.release()
                    raise
                self.left = _Left.after(revision, compares, ops)
                return RecordedTxn(TxnResult(True, revision), encode_record(revision, ops))
            except BaseException:
                _rollback(conn)
                raise

        return self._retrying(attempt, "txn")

    def replay(self, records: list[CommitRecord]) -> tuple[int, int]:
        """Make again, in revision order, the commits of `records` this database lacks (above
        its revision: a power loss took them from the WAL), without compares: each held once,
        under the write lock. Synced like any durable commit, under the sync barrier: with no
        records to make, a sync of every commit before it (`settle`). The revision reached,
        and how many commits were made again."""
        conn = self.connection()
        if not self.synchronous_full:
            conn.execute("PRAGMA synchronous = FULL")
            self.synchronous_full = True

        def attempt() -> tuple[int, int]:
            conn.execute("BEGIN IMMEDIATE")
            try:
                current = int(conn.execute(_SELECT_REVISION).fetchone()[0])
                lacking = {r.revision: r for r in records if r.revision > current}
                for revision in sorted(lacking):
                    _apply(conn, lacking[revision].as_ops(), revision)
                    current = revision
                conn.execute(_UPDATE_REVISION, (current,))
                conn.execute("COMMIT")
                return current, len(lacking)
            except BaseException:
                _rollback(conn)
                raise

        return self._excluding(attempt, "replay")

    def run_on_connection(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return fn(self.connection())

    def forget_deleted(self) -> None:
        """Rewrite the database without its free pages (VACUUM, its temporary copy in memory)
        and empty the WAL, which holds earlier versions of pages (checkpoint TRUNCATE, retried
        while other connections still read from it)."""
        conn = self.connection()
        conn.execute("PRAGMA temp_store = MEMORY")
        self._excluding(lambda: conn.execute("VACUUM"), "vacuum")
        deadline = time.monotonic() + self.lock_timeout
        while True:
            busy = self._excluding(
                lambda: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0],
                "checkpoint",
            )
            if not busy:
                return
            if time.monotonic() >= deadline:
                raise MetadataError(
                    f"SQLite metadata store {self.path}: the WAL could not be emptied: other"
                    f" connections kept reading from it for {self.lock_timeout:g} s"
                )
            time.sleep(0.01)

    def reserve_wal(self, size: int) -> None:
        """Grow the WAL file to `size` bytes of zeros, under the write lock (no connection
        writes frames meanwhile). SQLite ignores what lies past its last frame: frames there
        must carry the WAL's salts and checksums, which zeros do not."""
        conn = self.connection()

        def attempt() -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                _grow_with_zeros(self.path + "-wal", size)
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise

        try:
            self._excluding(attempt, "reserve WAL")
        except OSError as e:
            raise self._error("reserve WAL", e) from e

    def checkpoint(self) -> None:
        """Copy what the WAL holds into the database file, without blocking anyone."""
        conn = self.connection()
        self._excluding(
            lambda: conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall(), "checkpoint"
        )


def _log_failure(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.warning("%s", exc)


class DataVersionWatch(PollWatch):
    """A watch on an SQLite file: its `data_version`, read every `interval` while waited on.

    SQLite tells no one of a commit; the cheapest thing that changes with every other
    connection's commit is `PRAGMA data_version`, which reads the WAL index in shared memory
    (no disk I/O, a few microseconds). Read every 2 ms it wakes a waiter within about 2 ms of a
    commit by another agent process; the store's one ticker reads it for all its watches, and
    only while one waits. The prefix cannot narrow it: any commit to the file wakes the waiter.
    """

    def __init__(self, store: SqliteMetadataStore, prefix: str) -> None:
        super().__init__(store._ticker)
        self.store = store
        self.prefix = prefix


def _grow_with_zeros(path: str, size: int) -> None:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # no WAL (yet): nothing to grow
    try:
        at = os.fstat(fd).st_size
        if at >= size:
            return
        while at < size:
            at += os.pwrite(fd, _ZEROS[: size - at], at)
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class _Scan:
    """A range read as SQL runs it: bytewise bounds (None: nothing to read) and its options."""

    bounds: tuple[bytes, bytes | None] | None
    limit: int | None
    reverse: bool
    keys_only: bool

    @classmethod
    def of(cls, read: Scan) -> _Scan:
        return cls(read.bounds(), read.limit, read.reverse, read.keys_only)


def _scan(conn: sqlite3.Connection, scan: _Scan) -> list[Item]:
    if scan.bounds is None:
        return []
    low, high = scan.bounds
    params: list[object] = [low] if high is None else [low, high]
    if scan.limit is not None:
        params.append(scan.limit)
    sql = _range_sql(
        bounded=high is not None,
        reverse=scan.reverse,
        keys_only=scan.keys_only,
        limited=scan.limit is not None,
    )
    rows = conn.execute(sql, params).fetchall()
    if scan.keys_only:
        return [Item(key.decode(), b"", rev) for key, rev in rows]
    return [Item(key.decode(), value, rev) for key, value, rev in rows]


def _rollback(conn: sqlite3.Connection) -> None:
    # SQLite may already have rolled back on its own (SQLITE_FULL, SQLITE_IOERR): check first, and
    # never let a failing ROLLBACK hide the error that caused it.
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


@dataclass(frozen=True, slots=True)
class _Left:
    """What a commit at `revision` left: the mod revision of each key it compared (which held)
    or wrote (0 for a key it deleted). True of the database while its revision is this one."""

    revision: int
    keys: dict[str, int]

    @classmethod
    def after(cls, revision: int, compares: list[Compare], ops: list[Op]) -> _Left:
        keys = {c.key: c.mod_revision for c in compares}
        for op in ops:
            if isinstance(op, Put):
                keys[op.key] = revision
            elif isinstance(op, Delete):
                keys[op.key] = 0
            else:
                # A range deleted: its keys are unknown here (a read tells).
                for key in [k for k in keys if _in_range(op, k)]:
                    del keys[key]
        return cls(revision, keys)

    def holds(self, compares: list[Compare]) -> bool:
        """Whether every compare is of a key this commit left, and holds; False when one is
        of a key it did not touch (unknown here: read it)."""
        keys = self.keys
        return all(keys.get(c.key, -1) == c.mod_revision for c in compares)


def _in_range(op: Op, key: str) -> bool:
    """Whether a range delete takes `key` (str order is the stored UTF-8's order)."""
    if isinstance(op, DeletePrefix):
        return key.startswith(op.prefix)
    if isinstance(op, DeleteRange):
        return op.start <= key < op.end
    raise TypeError(f"not a range delete: {type(op).__name__}")


def _compares_hold(conn: sqlite3.Connection, compares: list[Compare]) -> bool:
    if not compares:
        return True
    wanted = list(dict.fromkeys(c.key.encode() for c in compares))
    found: dict[bytes, int] = {}
    for n, params in _in_chunks(wanted):
        found.update(conn.execute(_in_sql("key, mod_revision", n), params).fetchall())
    # A missing key reads as revision 0, and written keys never have revision 0: Compare(k, 0)
    # holds exactly when k does not exist.
    return all(found.get(c.key.encode(), 0) == c.mod_revision for c in compares)


def _apply(conn: sqlite3.Connection, ops: list[Op], revision: int) -> bool:
    """Apply `ops` in order, consecutive ops of one kind as one executemany; True if any changed."""
    changed = False
    for kind, group in itertools.groupby(ops, key=type):
        if kind is Put:
            conn.executemany(_UPSERT, _put_rows(cast("Iterator[Put]", group), revision))
            changed = True
        elif kind is Delete:
            deletes = cast("Iterator[Delete]", group)
            cursor = conn.executemany(_DELETE_KEY, ((op.key.encode(),) for op in deletes))
            changed = changed or cursor.rowcount > 0
        elif kind is DeletePrefix:
            for op in cast("Iterator[DeletePrefix]", group):
                low = op.prefix.encode()
                high = prefix_end(low)
                if high is None:
                    cursor = conn.execute(_DELETE_FROM, (low,))
                else:
                    cursor = conn.execute(_DELETE_RANGE, (low, high))
                changed = changed or cursor.rowcount > 0
        elif kind is DeleteRange:
            for span in cast("Iterator[DeleteRange]", group):
                cursor = conn.execute(_DELETE_RANGE, (span.start.encode(), span.end.encode()))
                changed = changed or cursor.rowcount > 0
        else:
            raise TypeError(f"not a metadata op: {kind.__name__}")
    return changed


def _put_rows(puts: Iterable[Put], revision: int) -> Iterator[tuple[bytes, bytes, int]]:
    for op in puts:
        # A str value would be stored as TEXT and read back as str: refuse it here instead.
        if not isinstance(op.value, bytes | bytearray | memoryview):
            raise TypeError(
                f"Put value for {op.key!r} must be bytes, not {type(op.value).__name__}"
            )
        yield op.key.encode(), op.value, revision


class SqliteMetadataStore(MetadataStore):
    """A `MetadataStore` in the SQLite file at `path` (or `MEMORY`).

    Opening does no I/O: the file is opened and its schema created on the first call; an
    unreachable or foreign file raises `MetadataError` from that call. Several processes on one
    host may open the same file; `lock_timeout` bounds how long a call waits for another
    process's write lock before raising `MetadataError`. Calls run on the event loop's own
    connection unless they would wait for a lock (see the module docstring).

    A `MetadataError` from `txn` means the outcome is unknown (the commit's fsync may have failed
    after the write); a cancelled `txn` likewise may or may not have committed.
    """

    def __init__(self, path: str | os.PathLike[str], *, lock_timeout: float = 10.0) -> None:
        path = os.fspath(path)
        if path != MEMORY:
            path = os.path.abspath(path)  # error messages name the real file; chdir is harmless
        self._path = path
        self._closed = False
        # A private in-memory database exists per connection, so it has the loop's alone (no
        # other process can hold its locks).
        self._loop = _Worker(path, lock_timeout, waits=path == MEMORY)
        self._worker = _Worker(path, lock_timeout)
        # sqlite3 connections must not be shared across threads: one thread owns the waiting
        # connection, and runs what would wait in FIFO order.
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"metadata-sqlite[{os.path.basename(path)}]"
        )
        self._checkpointing: asyncio.Future[None] | None = None
        self._wal_since_checkpoint = 0
        self._durable_commits = 0
        # The revision of this store's last commit when nothing since may rest on another
        # connection's unsynced commit; -1 when unknown (see txn_recorded).
        self._own_revision = -1
        # The one reader of `data_version` for every watch of this store (DataVersionWatch).
        self._ticker = CallbackTicker(self._data_version_now, WATCH_INTERVAL)

    @property
    def path(self) -> str:
        return self._path

    def __repr__(self) -> str:
        return f"SqliteMetadataStore({self._path!r})"

    async def _call(self, name: str, *args: Any) -> Any:
        """Run `_Worker.<name>(*args)` on the loop's connection, or on the thread's if it
        would wait."""
        if self._closed:
            raise MetadataError(f"SQLite metadata store {self._path} is closed")
        try:
            return getattr(self._loop, name)(*args)
        except _WouldWait:
            pass
        return await self._on_thread(getattr(self._worker, name), *args)

    async def _on_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def get(self, key: str) -> Item | None:
        return cast(Item | None, await self._call("get", key))

    async def get_many(self, keys: list[str]) -> dict[str, Item]:
        return cast(dict[str, Item], await self._call("get_many", keys))

    async def range_of(self, query: RangeQuery) -> list[Item]:
        # Here, not in the worker: a call that would wait runs again on the thread, and then
        # need not work the bounds out twice.
        return cast(list[Item], await self._call("range", _Scan.of(query)))

    async def snapshot(self, reads: list[Read]) -> Snapshot:
        planned = [r.key.encode() if isinstance(r, Get) else _Scan.of(r) for r in reads]
        return cast(Snapshot, await self._call("snapshot", planned))

    async def txn(
        self, compares: list[Compare], ops: list[Op], *, durable: bool = True
    ) -> TxnResult:
        result = cast(TxnResult, await self._call("txn", compares, ops, durable))
        if result.succeeded and result.revision > self._own_revision:
            # Under the barrier, exclusive: every commit before it was durable or recorded.
            self._own_revision = result.revision
        if result.succeeded:
            self._wal_since_checkpoint += _COMMIT_OVERHEAD_BYTES + sum(
                len(op.value) for op in ops if isinstance(op, Put)
            )
            self._maybe_checkpoint()
            if durable:
                self._durable_commits += 1
                if self._durable_commits == WAL_RESERVE_AFTER_COMMITS:
                    self._reserve_wal()
        return result

    async def txn_recorded(self, compares: list[Compare], ops: list[Op]) -> RecordedTxn:
        """`txn` committed with `synchronous=NORMAL`: the caller writes the record returned
        into the pack that holds the commit's object, syncs the pack, and calls `recorded_done`
        before it tells anyone (one sync where a durable commit after a synced object makes two).
        After a power loss, `replay` makes again from the packs' records the commits the WAL
        lost. Made only when the commit before it is this store's own, on the loop's connection
        without waiting; otherwise not made, and the caller syncs its object and commits with
        `txn`: a durable commit then covers whatever another connection left unsynced."""
        if self._closed:
            raise MetadataError(f"SQLite metadata store {self._path} is closed")
        try:
            out = self._loop.txn_recorded(compares, ops, self._own_revision)
        except _WouldWait:
            return RecordedTxn(None, None)
        if out.record is not None and out.result is not None:
            self._own_revision = out.result.revision
            self._wal_since_checkpoint += _COMMIT_OVERHEAD_BYTES + sum(
                len(op.value) for op in ops if isinstance(op, Put)
            )
        return out

    def recorded_done(self, *, durable: bool) -> None:
        if self._loop.barrier is not None:
            self._loop.barrier.release()
        if not durable:
            # The commit is in the WAL and its record may be lost: what follows must not rest
            # on it being replayed. The next commit syncs the WAL.
            self._own_revision = -1
        self._maybe_checkpoint()

    def _reserve_wal(self) -> None:
        """Grow the WAL ahead, on the thread, where the file system can spare it."""
        if self._path == MEMORY:
            return
        try:
            stat = os.statvfs(os.path.dirname(self._path))
        except OSError:
            return
        if stat.f_bavail * stat.f_frsize < WAL_RESERVE_FREE_SHARE * WAL_RESERVE_BYTES:
            return
        task = asyncio.ensure_future(self._on_thread(self._worker.reserve_wal, WAL_RESERVE_BYTES))
        task.add_done_callback(_log_failure)

    async def replay(self, records: Iterable[bytes]) -> None:
        """Make again the commits of the pack commit records `records` that this database lacks
        (see `commitrecord`), in revision order, under the write lock; records this build
        cannot read are passed over."""
        decoded = [r for r in map(decode_record, records) if r is not None]
        if decoded and self._path != MEMORY:
            reached, made = await self._on_thread(self._worker.replay, decoded)
            if made:
                # Only after a power loss: a clean stop leaves nothing to make again, and a
                # job's output (or an agent's start) then says nothing of it.
                log.info(
                    "metadata at revision %d after %d commits made again from the packs' records",
                    reached,
                    made,
                )

    async def settle(self) -> int:
        """A durable commit that changes nothing, under the sync barrier held exclusive: every
        commit before it, recorded ones included, is then synced in the WAL."""
        if self._path == MEMORY:
            return await self.revision()
        reached, _ = await self._on_thread(self._worker.replay, [])
        return reached

    async def revision(self) -> int:
        return cast(int, await self._call("revision"))

    async def forget_deleted(self) -> None:
        if self._path == MEMORY:
            return  # nothing on disk
        await self._on_thread(self._worker.forget_deleted)

    def watch(self, prefix: str) -> ChangeWatch:
        # Every commit of another connection changes the file: no narrower signal exists.
        return DataVersionWatch(self, prefix)

    def _data_version_now(self) -> int | None:
        if self._closed:
            raise MetadataError(f"SQLite metadata store {self._path} is closed")
        try:
            return self._loop.data_version()
        except _WouldWait:
            # Only while another process holds an exclusive lock (a checkpoint's truncate):
            # nothing can be learned now, try again at the next tick.
            return None

    def _maybe_checkpoint(self) -> None:
        """Past CHECKPOINT_WAL_BYTES written, checkpoint on the thread (one at a time)."""
        if self._path == MEMORY or self._wal_since_checkpoint < CHECKPOINT_WAL_BYTES:
            return
        if self._checkpointing is not None and not self._checkpointing.done():
            return
        self._wal_since_checkpoint = 0
        self._checkpointing = asyncio.ensure_future(self._checkpoint())

    async def _checkpoint(self) -> None:
        try:
            await self._on_thread(self._worker.checkpoint)
        except MetadataError as e:
            # The next commit past the threshold tries again; SQLite keeps the WAL meanwhile.
            log.warning("%s", e)

    async def pragmas(self) -> dict[str, int | str]:
        """The waiting connection's durability and locking settings, for diagnostics and tests."""
        names = (
            "journal_mode",
            "synchronous",
            "busy_timeout",
            "fullfsync",
            "checkpoint_fullfsync",
            "journal_size_limit",
        )

        def read(conn: sqlite3.Connection) -> dict[str, int | str]:
            return {name: conn.execute(f"PRAGMA {name}").fetchone()[0] for name in names}

        if self._path == MEMORY:
            return self._loop.run_on_connection(read)
        return await self._on_thread(self._worker.run_on_connection, read)

    async def _run_on_connection(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn(connection)` on every connection of the store, the loop's last, and return
        its result: a hook for tests (fault injection, query plans)."""
        if self._closed:
            raise MetadataError(f"SQLite metadata store {self._path} is closed")
        if self._path != MEMORY:
            await self._on_thread(self._worker.run_on_connection, fn)
        return self._loop.run_on_connection(fn)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True  # before any await: no call can be queued behind the close
        try:
            self._loop.close()
            await self._on_thread(self._worker.close)
        finally:
            # The worker has nothing left to do, so this only waits for the thread to exit.
            self._executor.shutdown(wait=True)
