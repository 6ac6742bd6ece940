"""Building a `StreamView` from metadata, and bringing it up to date with other agents' commits.

The state key and the index and tombstone keys are read one after another, not in one
snapshot, so another agent may commit in between. Every commit rewrites the state key, so the
state is read once more after the other reads: if its revision has not moved, what was read
belongs to that one state; if it has, the reads are redone against the newer state. Without
this a view could hold an index entry twice (read as new, then again as beyond the older
state's last sequence) or lose entries a concurrent purge deleted while the older state still
counted them, and trip over a sequence with no segment later.
"""

from __future__ import annotations

from infinistream.metadata.kv import Item, MetadataStore
from infinistream.stream.records import (
    StreamKeys,
    StreamState,
    decode_index,
    decode_state,
    seq_from_key,
)
from infinistream.stream.view import Segment, StreamView


async def load_view(meta: MetadataStore, keys: StreamKeys, state_item: Item) -> StreamView:
    while True:
        state = decode_state(state_item.value)
        # Only the entries of this state: later commits' entries start after its last_seq.
        entries = await meta.range(keys.index_prefix, end=keys.index(state.last_seq + 1))
        tombs = await _tombstones(meta, keys, state, state.first_seq)
        never = await _nevers(meta, keys, state, state.first_seq)
        latest = await meta.get(keys.state)
        if latest is None or latest.mod_revision == state_item.mod_revision:
            break
        state_item = latest
    view = StreamView(state, state_item.mod_revision)
    if entries:
        view.first_seq = min(view.first_seq, decode_index(entries[0].value).first_seq)
        view.last_seq = view.first_seq - 1
    for item in entries:
        view.add_segment(Segment.from_entry(item.key, decode_index(item.value)))
    # The state's range, before tombstones are applied: a deleted last message holds no
    # segment but must still be known as deleted.
    view.last_seq = max(view.last_seq, state.last_seq)
    view.kill_below(state.first_seq)
    for seq in tombs:
        view.kill(seq)
    view.never = {seq for seq in never if view.is_live(seq)}
    view.adopt_state(state, state_item.mod_revision)
    view.last_seq = state.last_seq
    return view


async def catch_up(
    meta: MetadataStore, keys: StreamKeys, view: StreamView, state_item: Item
) -> StreamView:
    """`view` brought to the state in `state_item` or later (a new view if the stream was
    recreated)."""
    while True:
        if state_item.mod_revision == view.state_rev:
            return view
        state = decode_state(state_item.value)
        if state.uid != view.uid or state.layout != view.state.layout:
            # A new stream of the same name, or compaction moved messages to new objects.
            return await load_view(meta, keys, state_item)
        entries: list[Item] = []
        if state.last_seq > view.last_seq:
            entries = await meta.range(
                keys.index_prefix,
                start=keys.index(view.last_seq + 1),
                end=keys.index(state.last_seq + 1),
            )
        tombs: list[int] = []
        if state.tomb_rev != view.tomb_rev:
            tombs = await _tombstones(meta, keys, state, max(view.first_seq, state.first_seq))
        never: list[int] | None = None
        if state.never_rev != view.never_rev:
            never = await _nevers(meta, keys, state, max(view.first_seq, state.first_seq))
        latest = await meta.get(keys.state)
        if latest is not None and latest.mod_revision != state_item.mod_revision:
            # Nothing applied yet: read again against the newer state.
            state_item = latest
            continue
        new = [Segment.from_entry(item.key, decode_index(item.value)) for item in entries]
        if new and new[0].first > view.last_seq + 1:
            # The entries in between are gone: another agent purged them, so they and all
            # this view holds lie below the new head. Move the view there before appending,
            # or its head would point at sequences no segment holds.
            view.kill_below(new[0].first)
        for seg in new:
            view.add_segment(seg)
        view.kill_below(state.first_seq)
        for seq in tombs:
            view.kill(seq)
        if never is not None:
            view.never = {seq for seq in never if view.is_live(seq)}
        view.adopt_state(state, state_item.mod_revision)
        return view


async def _nevers(
    meta: MetadataStore, keys: StreamKeys, state: StreamState, from_seq: int
) -> list[int]:
    if not state.never_rev:
        return []
    items = await meta.range(keys.never_prefix, start=keys.never(from_seq), keys_only=True)
    return [seq_from_key(item.key) for item in items]


async def _tombstones(
    meta: MetadataStore, keys: StreamKeys, state: StreamState, from_seq: int
) -> list[int]:
    if not state.tomb_rev:
        return []
    items = await meta.range(keys.tomb_prefix, start=keys.tomb(from_seq), keys_only=True)
    return [seq_from_key(item.key) for item in items]
