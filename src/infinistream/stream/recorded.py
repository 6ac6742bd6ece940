"""The metadata commit records a store's packs carry: made again after a power loss, retired
once the metadata store no longer needs them.

A flush on the embedded default leaves its commit's durability to a record in its pack
(`metadata/commitrecord.py`, `storage/packcommits.py`). The record is needed only until the
database is durably past its revision, and it holds copies of metadata (subject names, message
ids, index entries) that erase must be able to remove, so every holder of the stores retires
what it can: an agent when it starts, after it replayed what the database lacked, and, while it
runs, its own records every `RETIRE_EVERY` (`Retirer`); the erase job every record there is,
before it reports a request rewritten.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from infinistream.metadata.commitrecord import needless_at
from infinistream.metadata.kv import MetadataStore
from infinistream.storage import ObjectStore

__all__ = ["RETIRE_EVERY", "Retirer", "recover", "retire_settled"]

log = logging.getLogger(__name__)

# An agent retires its own records after this many: a sync of the database and two of each pack
# they are in, for this many flushes (each of which made one).
RETIRE_EVERY = 1024


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


@dataclass(eq=False)
class Retirer:
    """Retires an agent's own records as it writes them: after every `every`, in the
    background, a `settle` of the metadata store and the retirement of the records at or
    below its revision (`ObjectStore.retire_own_records`)."""

    meta: MetadataStore
    objects: ObjectStore
    every: int = RETIRE_EVERY
    _written: int = field(init=False, default=0)
    _task: asyncio.Task[None] | None = field(init=False, default=None)

    def written(self) -> None:
        """One more record written and synced."""
        self._written += 1
        if self._written >= self.every and self._task is None:
            self._written = 0
            self._task = asyncio.get_running_loop().create_task(self._retire())

    async def _retire(self) -> None:
        try:
            settled = await self.meta.settle()
            await asyncio.to_thread(self.objects.retire_own_records, settled)
        except Exception as exc:
            # They stay until the next time, or the next start: only their bytes are kept.
            log.warning("retiring commit records failed: %s", exc)
        finally:
            self._task = None

    async def close(self) -> None:
        """Wait for a retirement under way."""
        if self._task is not None:
            await asyncio.shield(self._task)
