"""What a job needs to know about the streams of a group, read from metadata in one go.

A `StreamSnapshot` is the stream's config and state, its index entries (with their metadata
revisions, for compare-and-set swaps), and its tombstones: enough to decide which records of
which objects are live without asking any agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from infinistream.jetstream.api import StreamConfig
from infinistream.metadata.kv import Item, MetadataStore
from infinistream.stream.records import (
    IndexEntry,
    StreamKeys,
    StreamState,
    decode_index,
    decode_record,
    decode_state,
    seq_from_key,
    streams_prefix,
)
from infinistream.stream.view import Segment

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run async library code from a job's synchronous driver or executor code."""
    return asyncio.run(coro)


@dataclass(frozen=True)
class EntryRef:
    """One index entry as read, with the revision a swap must compare against."""

    key: str
    revision: int
    entry: IndexEntry

    def segment(self) -> Segment:
        return Segment.from_entry(self.key, self.entry)


@dataclass(frozen=True)
class StreamSnapshot:
    name: str
    keys: StreamKeys
    config: StreamConfig
    created_ns: int
    state: StreamState
    state_revision: int
    entries: list[EntryRef]
    tombstones: frozenset[int]

    def is_live(self, seq: int) -> bool:
        state = self.state
        return state.first_seq <= seq <= state.last_seq and seq not in self.tombstones


async def stream_names(meta: MetadataStore, group: str) -> list[str]:
    prefix = streams_prefix(group)
    return [item.key[len(prefix) :] for item in await meta.range(prefix, keys_only=True)]


async def read_stream(
    meta: MetadataStore, group: str, name: str, lo: int = 1, hi: int | None = None
) -> StreamSnapshot | None:
    """The stream as metadata has it now, or None if it does not exist.

    Only what sequences lo..hi (inclusive; hi None = to the end) need of the index is read:
    the entry holding `lo`, the ones after it, and the tombstones among them.
    """
    keys = StreamKeys(group, name)
    while True:
        items = await meta.get_many([keys.config, keys.state])
        record_item, state_item = items.get(keys.config), items.get(keys.state)
        if record_item is None or state_item is None:
            return None
        state = decode_state(state_item.value)
        last = state.last_seq if hi is None else min(hi, state.last_seq)
        start = max(lo, state.first_seq, 1)
        entries: list[Item] = []
        tombs: list[Item] = []
        if start <= last:
            # The entry holding `start` begins at or before it: the last key up to it.
            entries = await meta.range(
                keys.index_prefix, end=keys.index(start + 1), reverse=True, limit=1
            )
            entries += await meta.range(
                keys.index_prefix, start=keys.index(start + 1), end=keys.index(last + 1)
            )
            if state.tomb_rev:
                tombs = await meta.range(
                    keys.tomb_prefix,
                    start=keys.tomb(start),
                    end=keys.tomb(last + 1),
                    keys_only=True,
                )
        # Read the state again: if it moved, what was read may mix two states (see loader.py).
        latest = await meta.get(keys.state)
        if latest is not None and latest.mod_revision == state_item.mod_revision:
            break
    record = decode_record(record_item.value)
    return StreamSnapshot(
        name=name,
        keys=keys,
        config=record.config,
        created_ns=record.created_ns,
        state=state,
        state_revision=state_item.mod_revision,
        entries=[EntryRef(i.key, i.mod_revision, decode_index(i.value)) for i in entries],
        tombstones=frozenset(seq_from_key(t.key) for t in tombs),
    )


async def referenced_objects(meta: MetadataStore, group: str) -> set[str]:
    """Every object some index entry of some stream of the group points at."""
    referenced: set[str] = set()
    for name in await stream_names(meta, group):
        keys = StreamKeys(group, name)
        for item in await meta.range(keys.index_prefix):
            referenced.add(decode_index(item.value).obj)
    return referenced
