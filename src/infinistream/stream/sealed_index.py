"""A stream's metadata sealed at rest: what messages say stays out of the metadata operator's view.

Four things in a stream's metadata (`records`) come from messages rather than from configs:

- index entries (`{group}/sd/{stream}/i/{first_seq}`): the subjects of each section's messages
  (names, counts or a filter of them), what agents filter and route by without reading objects;
- the stream state (`{group}/sd/{stream}/state`): counts and sequences, and the last
  `Nats-Msg-Id` (a header value, which `Nats-Expected-Last-Msg-Id` checks and errors quote);
- the duplicate window's keys (`{group}/sd/{stream}/m/{msg_id}`): a `Nats-Msg-Id` in a key;
- the subject records (`{group}/sd/{stream}/p/{subject}`): a subject in a key.

With encryption at rest, `SealedIndex` wraps the metadata store: it seals the values of index
entries, stream states and subject records it writes (storage.crypto: AEAD under a key fixed
per key-encryption key, the metadata key as associated data) and opens those it reads, and it
puts a keyed hash of the message id or subject (`Encryption.token`) in duplicate-window and
subject-record keys in place of the name. A lookup of such a key tries the token under every
key held, so names written before a key rotation are still found. Everything above sees plain
values and plain keys: callers get, get_many and put those keys by name. A subject record's
sealed value holds its subject too, so a range over subject records comes back under plain keys
(read whole and narrowed here: tokens keep no order); a duplicate-window key read back from a
range holds the token, and is passed through as it is. Values written before encryption was
turned on are read as they are. Revisions pass through: compares are by revision only.

Without encryption the wrapper seals nothing and changes no key, and refuses
(`KeyRefusedError`) a sealed value rather than hand msgpack bytes it cannot read.

What stays in clear in metadata: keys (group, stream and consumer names, sequence numbers, due
times of TTLs and schedules), stream and consumer configs (with their subject filters), consumer
state, leases.
"""

from __future__ import annotations

import re
from dataclasses import replace

import msgspec

from infinistream.metadata import kv
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
    """Whether the value of `key` is sealed with encryption on: an index entry, a state or a
    subject record."""
    parts = key.split("/", 4)
    return parts[1:2] == ["sd"] and (
        (len(parts) == 5 and parts[3] in ("i", "p")) or (len(parts) == 4 and parts[3] == "state")
    )


def _named_key(key: str) -> tuple[str, str] | None:
    """(`{group}/sd/{stream}/m/` or `.../p/`, name) of a duplicate-window or subject-record key
    named by its msg id or subject (either may hold '/'); None for any other key, and for one
    that already holds a token, as keys read back from a range do (a job deleting the ids of
    erased messages passes them back)."""
    parts = key.split("/", 4)
    if (
        len(parts) == 5
        and parts[1] == "sd"
        and parts[3] in ("m", "p")
        and not _TOKEN.match(parts[4])
    ):
        return key[: len(key) - len(parts[4])], parts[4]
    return None


def _subject_base(prefix: str) -> str | None:
    """`{group}/sd/{stream}/p/` when `prefix` lies within a stream's subject records."""
    parts = prefix.split("/", 4)
    if len(parts) == 5 and parts[1] == "sd" and parts[3] == "p":
        return prefix[: len(prefix) - len(parts[4])]
    return None


_named_value = msgspec.msgpack.Decoder(tuple[str, bytes])


class SealedIndex(kv.StoreWrapper):
    """A metadata store whose stream metadata that comes from messages is sealed at rest."""

    def __init__(self, inner: kv.MetadataStore, encryption: Encryption | None) -> None:
        super().__init__(inner)
        self.encryption = encryption
        # The file a local store keeps its data in, as the store itself says (or None).
        self.path: str | None = getattr(inner, "path", None)

    def _open(self, item: kv.Item, key: str | None = None) -> kv.Item:
        """`item` as callers see it, under `key` (its own key if None). A sealed subject
        record is opened under the key it is stored at (the associated data), and comes back
        under the plain key its value names."""
        plain_key = item.key if key is None else key
        if not item.value or not is_sealed_key(item.key):
            if plain_key == item.key:
                return item
            return kv.Item(plain_key, item.value, item.mod_revision)
        if self.encryption is None:
            if item.value.startswith(VALUE_MAGIC):
                raise KeyRefusedError(
                    f"{plain_key} is encrypted and this server has no encryption key "
                    "(jetstream { cipher, key }, --key-file or $INFINISTREAM_KEY)"
                )
            return item
        value = self.encryption.open_value(item.key, item.value)
        base = _subject_base(item.key)
        if base is not None and _TOKEN.match(item.key[len(base) :]):
            # Stored under a token: the value names the subject.
            name, value = _named_value.decode(value)
            plain_key = base + name
        return kv.Item(plain_key, value, item.mod_revision)

    def _stored_key(self, key: str) -> str:
        """The key as stored: a duplicate-window or subject-record key holds its name's
        current token."""
        if self.encryption is None:
            return key
        found = _named_key(key)
        return key if found is None else found[0] + self.encryption.token(found[1])

    def _lookup_keys(self, key: str) -> list[str]:
        """Where `key` may be stored, the current key's place first."""
        if self.encryption is None:
            return [key]
        found = _named_key(key)
        if found is None:
            return [key]
        return [found[0] + t for t in self.encryption.tokens(found[1])]

    def _sealed(self, plain_key: str, key: str, value: bytes, enc: Encryption) -> bytes:
        """The stored value of a put of `value` at `plain_key`, stored at `key`."""
        if not value or not is_sealed_key(key):
            return value
        found = _named_key(plain_key)
        if found is not None and _subject_base(found[0]) is not None:
            value = msgspec.msgpack.encode((found[1], value))
        return enc.seal_value(key, value)

    def _scan(self, read: kv.Scan) -> tuple[kv.Scan, str | None]:
        """What to ask the store for `read`: subject records under tokens are read whole (a
        token keeps no order) and narrowed by `_narrowed`; anything else as it is."""
        base = _subject_base(read.prefix) if self.encryption is not None else None
        if base is None:
            return read, None
        return kv.Scan(base), base

    def _narrowed(self, read: kv.Scan, items: list[kv.Item]) -> list[kv.Item]:
        """The opened subject records of a whole read that `read` asks for, as a range of
        plain keys would give them."""
        low = max(read.prefix, read.start or "").encode()
        high = None if read.end is None else read.end.encode()
        kept = [
            item
            for item in (self._open(i) for i in items)
            if item.key.startswith(read.prefix)
            and item.key.encode() >= low
            and (high is None or item.key.encode() < high)
        ]
        kept.sort(key=lambda i: i.key.encode(), reverse=read.reverse)
        if read.limit is not None:
            kept = kept[: read.limit]
        if read.keys_only:
            kept = [replace(i, value=b"") for i in kept]
        return kept

    async def get(self, key: str) -> kv.Item | None:
        places = self._lookup_keys(key)
        if len(places) > 1:
            return (await self.get_many([key])).get(key)
        item = await self.inner.get(places[0])
        return None if item is None else self._open(item, key)

    async def get_many(self, keys: list[str]) -> dict[str, kv.Item]:
        places = {key: self._lookup_keys(key) for key in keys}
        found = await self.inner.get_many([p for ps in places.values() for p in ps])
        out: dict[str, kv.Item] = {}
        for key, ps in places.items():
            item = next((found[p] for p in ps if p in found), None)
            if item is not None:
                out[key] = self._open(item, key)
        return out

    async def range_of(self, query: kv.RangeQuery) -> list[kv.Item]:
        asked, base = self._scan(query)
        if base is not None:
            return self._narrowed(query, await self.inner.range(asked.prefix))
        items = await query.read(self.inner)
        return items if query.keys_only else [self._open(i) for i in items]

    async def snapshot(self, reads: list[kv.Read]) -> kv.Snapshot:
        # A duplicate-window or subject-record key may be stored under any key's token: each
        # place is read, and a get finds what the first place holding it holds (as
        # `get_many`).
        places = [self._lookup_keys(r.key) if isinstance(r, kv.Get) else [] for r in reads]
        scans = [self._scan(r) if isinstance(r, kv.Scan) else None for r in reads]
        stored: list[kv.Read] = []
        for ps, scan in zip(places, scans, strict=True):
            stored += [kv.Get(p) for p in ps] if scan is None else [scan[0]]
        snap = await self.inner.snapshot(stored)
        found: list[list[kv.Item]] = []
        at = 0
        for read, ps, scan in zip(reads, places, scans, strict=True):
            if isinstance(read, kv.Scan):
                items = snap.items(at)
                if scan is not None and scan[1] is not None:
                    found.append(self._narrowed(read, items))
                else:
                    found.append(items if read.keys_only else [self._open(i) for i in items])
                at += 1
                continue
            hits = [item for i in range(at, at + len(ps)) if (item := snap.item(i)) is not None]
            found.append([self._open(hits[0], read.key)] if hits else [])
            at += len(ps)
        return kv.Snapshot(snap.revision, tuple(found))

    async def txn(
        self, compares: list[kv.Compare], ops: list[kv.Op], *, durable: bool = True
    ) -> kv.TxnResult:
        checks, stored = self._stored_txn(compares, ops)
        return await self.inner.txn(checks, stored, durable=durable)

    async def txn_recorded(self, compares: list[kv.Compare], ops: list[kv.Op]) -> kv.RecordedTxn:
        # The record holds the ops as stored: sealed values stay sealed in the packs too.
        checks, stored = self._stored_txn(compares, ops)
        return await self.inner.txn_recorded(checks, stored)

    def _stored_txn(
        self, compares: list[kv.Compare], ops: list[kv.Op]
    ) -> tuple[list[kv.Compare], list[kv.Op]]:
        enc = self.encryption
        if enc is None:
            return compares, ops
        stored: list[kv.Op] = []
        for op in ops:
            if isinstance(op, kv.Put):
                key = self._stored_key(op.key)
                if _subject_base(op.key) is not None:
                    # A subject's record lives under one token: the one of the current key.
                    stored += [kv.Delete(k) for k in self._lookup_keys(op.key)[1:]]
                stored.append(kv.Put(key, self._sealed(op.key, key, op.value, enc)))
            elif isinstance(op, kv.Delete):
                stored += [kv.Delete(k) for k in self._lookup_keys(op.key)]
            else:
                stored.append(op)
        return [kv.Compare(self._stored_key(c.key), c.mod_revision) for c in compares], stored

    async def forget_deleted(self) -> None:
        """Passed on to the store, for the erase job (GDPR), whose stores can make values
        deleted so far unrecoverable from their files; a store that cannot says so."""
        forget = getattr(self.inner, "forget_deleted", None)
        if forget is None:
            raise NotImplementedError(f"{type(self.inner).__name__} cannot forget deleted values")
        await forget()
