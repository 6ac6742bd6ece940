"""Index entries sealed in the metadata store: subjects stay out of the metadata operator's view.

An index entry (`{group}/sd/{stream}/i/{first_seq}`, see `records`) lists the subjects of the
messages of its section and their record lengths: what the agents filter and route by, so they
must have it without reading objects. With encryption at rest, `SealedIndex` wraps the metadata
store and seals the value of every index entry it writes (storage.crypto: AEAD under a key
fixed per key-encryption key, the metadata key as associated data), and opens each one it
reads; everything above sees plain entries. Values written before encryption was turned on are
read as they are. Keys and revisions pass through: compares are by revision only. Without
encryption the wrapper seals nothing, and refuses (`KeyRefusedError`) a sealed value rather than
hand msgpack decoding bytes it cannot read.

What stays in clear in metadata: keys (group, stream and consumer names, sequence numbers,
Nats-Msg-Id values of the duplicate window, due times), stream and consumer configs, stream
state (counts, sequence range, the last Nats-Msg-Id), consumer state.
"""

from __future__ import annotations

from infinistream.metadata.kv import Compare, Item, MetadataStore, Op, Put, TxnResult
from infinistream.storage import Encryption, KeyRefusedError
from infinistream.storage.crypto import VALUE_MAGIC

__all__ = ["SealedIndex", "is_index_key"]


def is_index_key(key: str) -> bool:
    """Whether `key` is an index entry's: `{group}/sd/{stream}/i/{first_seq}`."""
    parts = key.split("/")
    return len(parts) == 5 and parts[1] == "sd" and parts[3] == "i"


class SealedIndex(MetadataStore):
    """A metadata store whose index entry values are sealed at rest."""

    def __init__(self, inner: MetadataStore, encryption: Encryption | None) -> None:
        self.inner = inner
        self.encryption = encryption
        # The file a local store keeps its data in, as the store itself says (or None).
        self.path: str | None = getattr(inner, "path", None)

    def _open(self, item: Item) -> Item:
        if not item.value or not is_index_key(item.key):
            return item
        if self.encryption is None:
            if item.value.startswith(VALUE_MAGIC):
                raise KeyRefusedError(
                    f"index entry {item.key} is encrypted and this server has no encryption "
                    "key (jetstream { cipher, key }, --key-file or $INFINISTREAM_KEY)"
                )
            return item
        return Item(item.key, self.encryption.open_value(item.key, item.value), item.mod_revision)

    async def get(self, key: str) -> Item | None:
        item = await self.inner.get(key)
        return None if item is None else self._open(item)

    async def get_many(self, keys: list[str]) -> dict[str, Item]:
        found = await self.inner.get_many(keys)
        return {k: self._open(v) for k, v in found.items()}

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

    async def txn(
        self, compares: list[Compare], ops: list[Op], *, durable: bool = True
    ) -> TxnResult:
        enc = self.encryption
        if enc is None:
            return await self.inner.txn(compares, ops, durable=durable)
        sealed: list[Op] = [
            Put(op.key, enc.seal_value(op.key, op.value))
            if isinstance(op, Put) and op.value and is_index_key(op.key)
            else op
            for op in ops
        ]
        return await self.inner.txn(compares, sealed, durable=durable)

    async def forget_deleted(self) -> None:
        """Passed on to the store, for the erase job (GDPR), whose stores can make values
        deleted so far unrecoverable from their files; a store that cannot says so."""
        forget = getattr(self.inner, "forget_deleted", None)
        if forget is None:
            raise NotImplementedError(f"{type(self.inner).__name__} cannot forget deleted values")
        await forget()

    async def revision(self) -> int:
        return await self.inner.revision()

    async def close(self) -> None:
        await self.inner.close()
