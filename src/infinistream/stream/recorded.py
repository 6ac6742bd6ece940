"""The metadata commit records a store's packs carry: made again after a power loss, retired
once the metadata store no longer needs them.

A flush on the embedded default leaves its commit's durability to a record in its pack
(`metadata/commitrecord.py`, `storage/packcommits.py`). The record is needed only until the
database is durably past its revision, and it holds copies of metadata (subject names, message
ids, index entries) that erase must be able to remove, so every holder of the stores retires
what it can: an agent when it starts, after it replayed what the database lacked; the erase job
before it reports a request rewritten.
"""

from __future__ import annotations

import asyncio

from infinistream.metadata.commitrecord import needless_at
from infinistream.metadata.kv import MetadataStore
from infinistream.storage import ObjectStore

__all__ = ["recover", "retire_settled"]


async def recover(meta: MetadataStore, objects: ObjectStore) -> int:
    """Make again the commits whose records the database lacks (a power loss took them from
    its WAL), then retire every record it no longer needs; how many were retired."""
    records = await asyncio.to_thread(objects.commit_records)
    if not records:
        return 0
    await meta.replay(records)
    return await retire_settled(meta, objects)


async def retire_settled(meta: MetadataStore, objects: ObjectStore) -> int:
    """Sync every commit so far in the metadata store itself, then retire the records at or
    below the revision that reached (their bytes are off the disk on return); how many."""
    settled = await meta.settle()
    return await asyncio.to_thread(objects.retire_commit_records, needless_at(settled))
