"""The metadata store as one small interface: an ordered key-value store with transactions.

Every backend (SQLite on one host, etcd across many) implements `MetadataStore`. Keys are
`str` and sort bytewise by their UTF-8 encoding; values are opaque `bytes`. Each key carries
the store-wide revision of its last write (`mod_revision`), so a transaction can say
"only if this key is still what I read" without comparing values.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


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


Op = Put | Delete | DeletePrefix


@dataclass(frozen=True, slots=True)
class TxnResult:
    succeeded: bool
    # The store revision after the transaction (unchanged when it did not succeed).
    revision: int


class MetadataError(Exception):
    """The store could not be reached or refused the operation (not a failed compare)."""


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


class MetadataStore(ABC):
    """An ordered key-value store with all-or-nothing compare-and-set transactions."""

    @abstractmethod
    async def get(self, key: str) -> Item | None: ...

    @abstractmethod
    async def get_many(self, keys: list[str]) -> dict[str, Item]:
        """The items that exist among `keys`, in one round trip."""

    @abstractmethod
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

    @abstractmethod
    async def revision(self) -> int:
        """The store's current revision: a cheap way to learn that anything changed."""

    async def forget_deleted(self) -> None:
        """Make the values deleted or overwritten so far unrecoverable from the store's own
        files and history (a GDPR erase must not leave them behind). Costs about a rewrite of
        the store: for rare jobs, never for a hot path."""
        raise NotImplementedError(f"{type(self).__name__} cannot forget deleted values")

    @abstractmethod
    async def close(self) -> None: ...
