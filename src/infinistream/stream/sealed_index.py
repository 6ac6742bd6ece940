"""A stream's metadata sealed at rest: what messages say stays out of the metadata operator's view.

Three things in a stream's metadata (`records`) come from messages rather than from configs:

- index entries (`{group}/sd/{stream}/i/{first_seq}`): the subjects of each section's messages
  and their record lengths, what agents filter and route by without reading objects;
- the stream state (`{group}/sd/{stream}/state`): counts and sequences, and the last
  `Nats-Msg-Id` (a header value, which `Nats-Expected-Last-Msg-Id` checks and errors quote);
- the duplicate window's keys (`{group}/sd/{stream}/m/{msg_id}`): a `Nats-Msg-Id` in a key.

With encryption at rest, `SealedIndex` wraps the metadata store: it seals the values of index
entries and stream states it writes (storage.crypto: AEAD under a key fixed per
key-encryption key, the metadata key as associated data) and opens those it reads, and it puts
a keyed hash of the message id (`Encryption.token`) in duplicate-window keys in place of the id.
A lookup of a duplicate-window key tries the token under every key held, so ids published before
a key rotation are still found within the window. Everything above sees plain values and plain
keys: callers get, get_many and put duplicate-window keys by id; a key read back from a range
holds the token, and is passed through as it is. Values written before encryption was turned
on are read as they are. Revisions pass through: compares are by revision only.

Without encryption the wrapper seals nothing and changes no key, and refuses
(`KeyRefusedError`) a sealed value rather than hand msgpack bytes it cannot read.

What stays in clear in metadata: keys (group, stream and consumer names, sequence numbers, due
times of TTLs and schedules), stream and consumer configs (with their subject filters), consumer
state, leases.
"""

from __future__ import annotations

import re

from infinistream.metadata.kv import (
    ChangeWatch,
    Compare,
    Delete,
    Get,
    Item,
    MetadataStore,
    Op,
    Put,
    Read,
    Scan,
    Snapshot,
    TxnResult,
)
from infinistream.storage import Encryption, KeyRefusedError
from infinistream.storage.crypto import VALUE_MAGIC

__all__ = ["SealedIndex", "is_index_key", "is_sealed_key"]

# What `Encryption.token` makes of a message id.
_TOKEN = re.compile(r"~[0-9a-f]{40}\Z")


def is_index_key(key: str) -> bool:
    """Whether `key` is an index entry's: `{group}/sd/{stream}/i/{first_seq}`."""
    parts = key.split("/")
    return len(parts) == 5 and parts[1] == "sd" and parts[3] == "i"


def is_sealed_key(key: str) -> bool:
    """Whether the value of `key` is sealed with encryption on: an index entry or a state."""
    parts = key.split("/")
    return parts[1:2] == ["sd"] and (
        (len(parts) == 5 and parts[3] == "i") or (len(parts) == 4 and parts[3] == "state")
    )


def _msg_id_of(key: str) -> tuple[str, str] | None:
    """(`{group}/sd/{stream}/m/`, msg_id) of a duplicate-window key named by its id (a msg id
    may hold '/'); None for any other key, and for one that already holds a token, as keys
    read back from a range do (a job deleting the ids of erased messages passes them back)."""
    parts = key.split("/", 4)
    if len(parts) == 5 and parts[1] == "sd" and parts[3] == "m" and not _TOKEN.match(parts[4]):
        return key[: len(key) - len(parts[4])], parts[4]
    return None


class SealedIndex(MetadataStore):
    """A metadata store whose stream metadata that comes from messages is sealed at rest."""

    def __init__(self, inner: MetadataStore, encryption: Encryption | None) -> None:
        self.inner = inner
        self.encryption = encryption
        # The file a local store keeps its data in, as the store itself says (or None).
        self.path: str | None = getattr(inner, "path", None)

    def _open(self, item: Item, key: str | None = None) -> Item:
        key = item.key if key is None else key
        if not item.value or not is_sealed_key(key):
            return item if key == item.key else Item(key, item.value, item.mod_revision)
        if self.encryption is None:
            if item.value.startswith(VALUE_MAGIC):
                raise KeyRefusedError(
                    f"{key} is encrypted and this server has no encryption key "
                    "(jetstream { cipher, key }, --key-file or $INFINISTREAM_KEY)"
                )
            return item
        return Item(key, self.encryption.open_value(key, item.value), item.mod_revision)

    def _stored_key(self, key: str) -> str:
        """The key as stored: a duplicate-window key holds the id's current token."""
        if self.encryption is None:
            return key
        found = _msg_id_of(key)
        return key if found is None else found[0] + self.encryption.token(found[1])

    def _lookup_keys(self, key: str) -> list[str]:
        """Where `key` may be stored, the current key's place first."""
        if self.encryption is None:
            return [key]
        found = _msg_id_of(key)
        if found is None:
            return [key]
        return [found[0] + t for t in self.encryption.tokens(found[1])]

    async def get(self, key: str) -> Item | None:
        places = self._lookup_keys(key)
        if len(places) > 1:
            return (await self.get_many([key])).get(key)
        item = await self.inner.get(places[0])
        return None if item is None else self._open(item, key)

    async def get_many(self, keys: list[str]) -> dict[str, Item]:
        places = {key: self._lookup_keys(key) for key in keys}
        found = await self.inner.get_many([p for ps in places.values() for p in ps])
        out: dict[str, Item] = {}
        for key, ps in places.items():
            item = next((found[p] for p in ps if p in found), None)
            if item is not None:
                out[key] = self._open(item, key)
        return out

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
        items = await self.inner.range(
            prefix, start=start, end=end, limit=limit, reverse=reverse, keys_only=keys_only
        )
        return items if keys_only else [self._open(i) for i in items]

    async def snapshot(self, reads: list[Read]) -> Snapshot:
        # A duplicate-window key may be stored under any key's token: each place is read, and
        # a get finds what the first place holding it holds (as `get_many`).
        places = [self._lookup_keys(r.key) if isinstance(r, Get) else [] for r in reads]
        stored: list[Read] = []
        for read, ps in zip(reads, places, strict=True):
            stored += [Get(p) for p in ps] if isinstance(read, Get) else [read]
        snap = await self.inner.snapshot(stored)
        found: list[list[Item]] = []
        at = 0
        for read, ps in zip(reads, places, strict=True):
            if isinstance(read, Scan):
                items = snap.items(at)
                found.append(items if read.keys_only else [self._open(i) for i in items])
                at += 1
                continue
            hits = [item for i in range(at, at + len(ps)) if (item := snap.item(i)) is not None]
            found.append([self._open(hits[0], read.key)] if hits else [])
            at += len(ps)
        return Snapshot(snap.revision, tuple(found))

    async def txn(
        self, compares: list[Compare], ops: list[Op], *, durable: bool = True
    ) -> TxnResult:
        enc = self.encryption
        if enc is None:
            return await self.inner.txn(compares, ops, durable=durable)
        stored: list[Op] = []
        for op in ops:
            if isinstance(op, Put):
                key = self._stored_key(op.key)
                value = op.value
                if value and is_sealed_key(key):
                    value = enc.seal_value(key, value)
                stored.append(Put(key, value))
            elif isinstance(op, Delete):
                stored += [Delete(k) for k in self._lookup_keys(op.key)]
            else:
                stored.append(op)
        checks = [Compare(self._stored_key(c.key), c.mod_revision) for c in compares]
        return await self.inner.txn(checks, stored, durable=durable)

    async def forget_deleted(self) -> None:
        """Passed on to the store, for the erase job (GDPR), whose stores can make values
        deleted so far unrecoverable from their files; a store that cannot says so."""
        forget = getattr(self.inner, "forget_deleted", None)
        if forget is None:
            raise NotImplementedError(f"{type(self.inner).__name__} cannot forget deleted values")
        await forget()

    async def revision(self) -> int:
        return await self.inner.revision()

    def watch(self, prefix: str) -> ChangeWatch:
        # The inner store's own watch (an etcd watch, SQLite's data_version), not the default
        # poll: the consumers' cross-agent wakeups go through this wrapper.
        return self.inner.watch(prefix)

    async def close(self) -> None:
        await self.inner.close()
