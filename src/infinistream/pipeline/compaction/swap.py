"""Compaction, step three (on the driver): swap a chunk's index entries in one transaction.

The transaction compares every replaced entry at the revision the snapshot read and the
stream's state at its current revision, deletes the old entries, puts the new ones and puts
the state unchanged but for `layout + 1` (so every agent's view reloads where messages live).

- An old entry that changed or vanished (a purge, a limit or max_age deleted it meanwhile):
  the chunk is skipped, so nothing deleted comes back; its new object is left unreferenced,
  for the janitor.
- Only the state moved (agents published, acked a delete inside the range...): read it again
  and retry. Messages deleted after the snapshot stay deleted: their tombstones are keys of
  their own, untouched here.
- The stream was deleted, or deleted and created again: skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import msgspec

from infinistream.metadata.kv import Compare, Delete, MetadataStore, Op, Put
from infinistream.pipeline.compaction.plan import Chunk
from infinistream.pipeline.compaction.tasks import ChunkResult
from infinistream.storage import ObjectNotFoundError, ObjectStore
from infinistream.stream import records
from infinistream.stream.records import StreamKeys, StreamState, decode_state

SWAP_ATTEMPTS = 16


class SwapOutcome(Enum):
    SWAPPED = "swapped"
    CHANGED = "changed"  # an old entry changed or vanished meanwhile: skipped
    GONE = "gone"  # the stream was deleted (or deleted and created again): skipped
    BUSY = "busy"  # the state kept moving through every attempt: skipped
    LOST = "lost"  # the new object disappeared before the swap: skipped


@dataclass(frozen=True)
class Swap:
    outcome: SwapOutcome
    attempts: int
    detail: str = ""


async def swap_chunk(
    meta: MetadataStore, chunk: Chunk, result: ChunkResult, objects: ObjectStore | None = None
) -> Swap:
    """Replace `chunk`'s entries with `result`'s in one compare-and-set transaction."""
    keys = StreamKeys(chunk.group, chunk.stream)
    if result.obj and objects is not None:
        # A janitor with too short a grace period could have taken the unreferenced object.
        try:
            await objects.head(result.obj)
        except ObjectNotFoundError:
            return Swap(SwapOutcome.LOST, 0, f"new object {result.obj} is gone")
    old_keys = [s.key for s in chunk.sources]
    new_keys = [keys.index(first) for first, _ in result.entries]
    compares = [Compare(s.key, s.revision) for s in chunk.sources]
    # A new entry must not land on a key outside the chunk (it cannot, sequences being
    # ordered; this makes sure a bug could not overwrite another entry).
    compares += [Compare(k, 0) for k in new_keys if k not in set(old_keys)]
    ops: list[Op] = [Delete(k) for k in old_keys]
    ops += [Put(k, value) for k, (_, value) in zip(new_keys, result.entries, strict=True)]
    for attempt in range(1, SWAP_ATTEMPTS + 1):
        state_item = await meta.get(keys.state)
        if state_item is None:
            return Swap(SwapOutcome.GONE, attempt, "the stream was deleted")
        state = decode_state(state_item.value)
        if state.uid != chunk.uid:
            return Swap(SwapOutcome.GONE, attempt, "the stream was deleted and created again")
        if await swap_entries(meta, keys, state, state_item.mod_revision, compares, ops):
            return Swap(SwapOutcome.SWAPPED, attempt)
        current = await meta.get_many(old_keys + new_keys)
        for s in chunk.sources:
            item = current.get(s.key)
            if item is None or item.mod_revision != s.revision:
                what = "deleted" if item is None else "changed"
                return Swap(SwapOutcome.CHANGED, attempt, f"index entry {s.key} was {what}")
        for k in new_keys:
            if k not in old_keys and k in current:
                return Swap(SwapOutcome.CHANGED, attempt, f"index entry {k} appeared")
    return Swap(SwapOutcome.BUSY, SWAP_ATTEMPTS, "the stream state kept changing")


async def swap_entries(
    meta: MetadataStore,
    keys: StreamKeys,
    state: StreamState,
    revision: int,
    compares: list[Compare],
    ops: list[Op],
) -> bool:
    """Commit `ops`, which replace index entries, if `compares` hold and the stream's state is
    still at `revision`; the state is put again with `layout + 1`, so that every agent's view
    reloads where messages live. False if anything compared had changed."""
    new_state = msgspec.structs.replace(state, layout=state.layout + 1)
    txn = await meta.txn(
        [*compares, Compare(keys.state, revision)],
        [*ops, Put(keys.state, records.encode(new_state))],
    )
    return txn.succeeded
