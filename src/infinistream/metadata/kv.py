"""The metadata store as one small interface: an ordered key-value store with transactions.

Every backend (SQLite on one host, etcd across many) implements `MetadataStore`. Keys are
`str` and sort bytewise by their UTF-8 encoding; values are opaque `bytes`. Each key carries
the store-wide revision of its last write (`mod_revision`), so a transaction can say
"only if this key is still what I read" without comparing values.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

# The metadata package re-exports these as its own API (metadata/__init__.py).
__all__ = [
    "ChangeWatch",
    "Compare",
    "Delete",
    "DeletePrefix",
    "DeleteRange",
    "Get",
    "Item",
    "MetadataError",
    "MetadataStore",
    "Op",
    "PollWatch",
    "Put",
    "RangeQuery",
    "Read",
    "RecordedTxn",
    "RevisionPollWatch",
    "Scan",
    "Snapshot",
    "StoreWrapper",
    "TxnResult",
    "VersionTicker",
    "prefix_end",
    "range_bounds",
]


@dataclass(frozen=True, slots=True)
class Item:
    key: str
    value: bytes
    # Store-wide revision of the write that last changed this key; strictly increases.
    mod_revision: int


@dataclass(frozen=True, slots=True)
class Compare:
    """Holds when `key` was last written at `mod_revision`; 0 means the key must not exist."""

    key: str
    mod_revision: int


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes


@dataclass(frozen=True, slots=True)
class Delete:
    key: str


@dataclass(frozen=True, slots=True)
class DeletePrefix:
    prefix: str


@dataclass(frozen=True, slots=True)
class DeleteRange:
    """Deletes every key from `start` (inclusive) to `end` (exclusive), bytewise."""

    start: str
    end: str


Op = Put | Delete | DeletePrefix | DeleteRange


@dataclass(frozen=True, slots=True)
class Get:
    """A read of one key in a `MetadataStore.snapshot`."""

    key: str


@dataclass(frozen=True, slots=True)
class RangeQuery:
    """What `MetadataStore.range` is asked for (its arguments, as one value)."""

    prefix: str
    start: str | None = None
    end: str | None = None
    limit: int | None = None
    reverse: bool = False
    keys_only: bool = False

    def bounds(self) -> tuple[bytes, bytes | None] | None:
        """The keys it reads, as bytewise bounds (`range_bounds`)."""
        return range_bounds(self.prefix, self.start, self.end, self.limit)

    async def read(self, store: MetadataStore) -> list[Item]:
        """The same range of another store, through its `range` (a wrapper's inner store)."""
        return await store.range(
            self.prefix,
            start=self.start,
            end=self.end,
            limit=self.limit,
            reverse=self.reverse,
            keys_only=self.keys_only,
        )


# A read of a range of keys in a `MetadataStore.snapshot`: what `MetadataStore.range` reads
# with the same arguments.
Scan = RangeQuery
Read = Get | Scan


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the reads of one `MetadataStore.snapshot` found, all as of one revision: per read,
    in the order asked, the items it found (at most one for a `Get`)."""

    revision: int
    found: tuple[list[Item], ...]

    def item(self, i: int) -> Item | None:
        """What the `Get` at position `i` found."""
        items = self.found[i]
        return items[0] if items else None

    def items(self, i: int) -> list[Item]:
        """What the `Scan` at position `i` found."""
        return self.found[i]


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    # The store revision after the transaction (unchanged when it did not succeed).
    revision: int


@dataclass(frozen=True, slots=True)
class RecordedTxn:
    """A transaction whose durability the caller makes (`MetadataStore.txn_recorded`)."""

    # None: not made (its durability cannot be left to the caller now): commit with `txn`.
    result: TxnResult | None
    # The commit's record, for the caller to make durable before anyone is told; None when
    # nothing was committed.
    record: bytes | None


class MetadataError(Exception):
    """The store could not be reached or refused the operation (not a failed compare)."""

    # Its message says what happened in words: logs print it without a traceback.
    said_in_words = True


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string that starts with `prefix`.

    None when there is none (empty prefix, or all 0xff): the range is then unbounded above.
    Appending a high character instead (prefix + '\\uffff') would be wrong: U+10000 and above
    encode to bytes greater than U+FFFF's, so such keys would fall outside the range.
    """
    end = bytearray(prefix)
    while end and end[-1] == 0xFF:
        end.pop()
    if not end:
        return None
    end[-1] += 1
    return bytes(end)


def range_bounds(
    prefix: str, start: str | None, end: str | None, limit: int | None
) -> tuple[bytes, bytes | None] | None:
    """The keys that `MetadataStore.range` reads, as bytewise bounds [low, high).

    `high` None means no upper bound. None when the range reads nothing whatever the store holds
    (`limit` 0, or `start`/`end` leave no key under `prefix`). Raises ValueError for arguments
    that `range` refuses. Every backend's `range` starts with this, so all refuse and clip alike.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"range limit must be None or >= 0, not {limit}")
    if limit == 0:
        return None
    low = prefix.encode()
    high = prefix_end(low)
    if start is not None:
        low = max(low, start.encode())
    if end is not None:
        end_bytes = end.encode()
        high = end_bytes if high is None else min(high, end_bytes)
    if high is not None and low >= high:
        return None
    return low, high


class ChangeWatch(ABC):
    """Tells its one waiter that keys under a prefix may have changed, without reading them.

    A level, not a stream of events: `wait` returns as soon as anything may have changed since
    the previous `wait` returned (at once on the first call, since nothing is known yet), or
    after `timeout` when nothing did. Changes are never lost between two waits; a wait may
    return for a change its waiter does not care about (a wider prefix, another key), so the
    waiter reads what it cares about after each wake. Changes this process made through the
    same store may or may not wake it (it knows about those already).
    """

    @abstractmethod
    async def wait(self, timeout: float) -> bool:
        """True when something may have changed, False when `timeout` passed quietly."""

    async def close(self) -> None:  # noqa: B027 - most watches hold nothing to release
        """Stop watching (a later `wait` starts again)."""


class VersionTicker:
    """One reader of a store's version for all the watches waiting on it.

    A watch that read the version itself every `interval` cost a wake of the event loop per
    watch per interval, and an agent always has several waiting (hand-overs, erase requests,
    republish, due times, consumers): an idle agent spent about 8% of a core on them. The
    ticker reads the version once per interval while anyone waits, and wakes them all when it
    changes; with nobody waiting it reads nothing.
    """

    def __init__(self, read: Callable[[], Awaitable[int | None]], interval: float) -> None:
        self._read = read
        self.interval = interval
        # The last version read (None: none yet, or unreadable at the last tick).
        self.version: int | None = None
        self._changed = asyncio.Event()
        self._waiters = 0
        self._task: asyncio.Task[None] | None = None

    async def current(self) -> int | None:
        """The version now: the last tick's while ticking (at most `interval` old), else read."""
        if self._ticking():
            return self.version
        version = await self._read()
        if version is not None:
            self.version = version
        return version

    async def changed(self, timeout: float) -> None:
        """Return when the version changes, or after `timeout`."""
        changed = self._changed
        self._waiters += 1
        if not self._ticking():
            self._start()
        try:
            async with asyncio.timeout(timeout):
                await changed.wait()
        except TimeoutError:
            pass
        finally:
            self._waiters -= 1

    def _ticking(self) -> bool:
        return self._task is not None and not self._task.done()

    def _start(self) -> None:
        """Tick while anyone waits."""
        self._task = asyncio.ensure_future(self._tick())

    async def _tick(self) -> None:
        try:
            while self._waiters:
                await asyncio.sleep(self.interval)
                version = await self._read()
                if version is not None and version != self.version:
                    self.version = version
                    self._wake()
        except Exception:
            # Woken, the waiters read the version themselves (no tick runs by then) and meet
            # the error there.
            self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()


class PollWatch(ChangeWatch):
    """A watch on a version read by a `VersionTicker`: it wakes its waiter when the version
    differs from the last one this watch saw."""

    def __init__(self, ticker: VersionTicker) -> None:
        self.ticker = ticker
        self._last: int | None = None

    async def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            version = await self.ticker.current()
            if version is not None and version != self._last:
                self._last = version
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await self.ticker.changed(left)


class RevisionPollWatch(PollWatch):
    """The fallback watch: the store's revision, read every `interval`."""

    def __init__(self, store: MetadataStore, interval: float = 0.1) -> None:
        super().__init__(VersionTicker(store.revision, interval))
        self.store = store


class MetadataStore(ABC):
    """An ordered key-value store with all-or-nothing compare-and-set transactions."""

    @abstractmethod
    async def get(self, key: str) -> Item | None: ...

    @abstractmethod
    async def get_many(self, keys: list[str]) -> dict[str, Item]:
        """The items that exist among `keys`, in one round trip."""

    async def range(
        self,
        prefix: str,
        *,
        start: str | None = None,
        end: str | None = None,
        limit: int | None = None,
        reverse: bool = False,
        keys_only: bool = False,
    ) -> list[Item]:
        """Items whose key starts with `prefix`, in key order (or reverse).

        `start` (inclusive) and `end` (exclusive) narrow the range further; both are full keys.
        `limit` (None, or >= 0: a negative one raises ValueError) caps how many come back. With
        `keys_only` the values come back empty.
        """
        return await self.range_of(RangeQuery(prefix, start, end, limit, reverse, keys_only))

    async def range_of(self, query: RangeQuery) -> list[Item]:
        """`range`, asked as one value: what each store implements. (Not abstract: a store
        may override `range` itself instead, as a wrapper that only observes calls does.)"""
        raise NotImplementedError(f"{type(self).__name__} implements neither range nor range_of")

    @abstractmethod
    async def snapshot(self, reads: list[Read]) -> Snapshot:
        """Every read of `reads` as of one revision of the store (a consistent snapshot: no
        transaction is seen in part, none that committed before another is missed while the
        other is seen), in one round trip where the backend allows.

        A reader of several keys that change together (a stream's state and its index) reads
        them this way, so it never has to read again because one moved while it read another.
        `revision` is the store's revision as of the snapshot. A `Scan` refuses what `range`
        refuses (ValueError).
        """

    @abstractmethod
    async def txn(
        self, compares: list[Compare], ops: list[Op], *, durable: bool = True
    ) -> TxnResult:
        """If every compare holds, apply every op at one new revision; otherwise change nothing.

        A commit is on disk when this returns. With `durable=False` a store may return before
        that: such a commit survives the process being killed, and is made durable by any
        later durable commit, but a machine crash may lose it. It is for changes that
        nobody was promised, whose loss costs only work done again (a consumer's claim:
        its messages are delivered again).
        """

    async def txn_recorded(self, compares: list[Compare], ops: list[Op]) -> RecordedTxn:
        """`txn`, but the commit is made durable by the caller: it writes the record returned
        with its data and syncs both, then calls `recorded_done`, before telling anyone. A
        store that recovers such commits from those records after a crash (the embedded
        SQLite store, `commitrecord`) implements it; the others answer that it was not made.
        """
        return RecordedTxn(None, None)

    def recorded_done(self, *, durable: bool) -> None:
        """The record of the last `txn_recorded` commit is durable, or (`durable` False) could
        not be made so. Nothing to do for a store that makes none."""
        return None

    async def replay(self, records: Iterable[bytes]) -> None:
        """Make again the commits of `txn_recorded` records that the store lost (a power loss
        took them before they were synced in the store itself). Called at start, before the
        agent serves. Nothing to do for a store that makes no such commits."""
        return None

    async def settle(self) -> int:
        """Make every commit so far durable in the store itself, and answer the revision they
        reach: the `txn_recorded` records at or below it are needed no more, and may be retired
        (`commitrecord.needless_at`). A store whose every commit is durable when made answers
        its revision."""
        return await self.revision()

    @abstractmethod
    async def revision(self) -> int:
        """The store's current revision: a cheap way to learn that anything changed."""

    async def forget_deleted(self) -> None:
        """Make the values deleted or overwritten so far unrecoverable from the store's own
        files and history (a GDPR erase must not leave them behind). Costs about a rewrite of
        the store: for rare jobs, never for a hot path."""
        raise NotImplementedError(f"{type(self).__name__} cannot forget deleted values")

    def watch(self, prefix: str) -> ChangeWatch:
        """A watch on the keys under `prefix` (backends wake faster than this default poll)."""
        return RevisionPollWatch(self)

    @abstractmethod
    async def close(self) -> None: ...


class StoreWrapper(MetadataStore):
    """A store that hands every call to `inner`; a wrapper overrides what it changes. The
    inner store's own watch is passed on (an etcd watch, SQLite's data_version), not the
    default poll: wakeups across agents go through the wrappers."""

    def __init__(self, inner: MetadataStore) -> None:
        self.inner = inner

    async def get(self, key: str) -> Item | None:
        return await self.inner.get(key)

    async def get_many(self, keys: list[str]) -> dict[str, Item]:
        return await self.inner.get_many(keys)

    async def range_of(self, query: RangeQuery) -> list[Item]:
        return await query.read(self.inner)

    async def snapshot(self, reads: list[Read]) -> Snapshot:
        return await self.inner.snapshot(reads)

    async def txn(
        self, compares: list[Compare], ops: list[Op], *, durable: bool = True
    ) -> TxnResult:
        return await self.inner.txn(compares, ops, durable=durable)

    async def txn_recorded(self, compares: list[Compare], ops: list[Op]) -> RecordedTxn:
        return await self.inner.txn_recorded(compares, ops)

    def recorded_done(self, *, durable: bool) -> None:
        self.inner.recorded_done(durable=durable)

    async def replay(self, records: Iterable[bytes]) -> None:
        await self.inner.replay(records)

    async def settle(self) -> int:
        return await self.inner.settle()

    async def revision(self) -> int:
        return await self.inner.revision()

    async def forget_deleted(self) -> None:
        await self.inner.forget_deleted()

    def watch(self, prefix: str) -> ChangeWatch:
        return self.inner.watch(prefix)

    async def close(self) -> None:
        await self.inner.close()
