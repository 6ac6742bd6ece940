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
        With `keys_only` the values come back empty.
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

    @abstractmethod
    async def close(self) -> None: ...
