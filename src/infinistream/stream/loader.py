"""Building a `StreamView` from metadata, and bringing it up to date with other agents' commits."""

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
    state = decode_state(state_item.value)
    view = StreamView(state, state_item.mod_revision)
    entries = await meta.range(keys.index_prefix)
    if entries:
        view.first_seq = min(view.first_seq, decode_index(entries[0].value).first_seq)
        view.last_seq = view.first_seq - 1
    for item in entries:
        view.add_segment(Segment.from_entry(item.key, decode_index(item.value)))
    view.kill_below(state.first_seq)
    await _apply_tombstones(meta, keys, view, state)
    view.adopt_state(state, state_item.mod_revision)
    view.last_seq = state.last_seq
    return view


async def catch_up(
    meta: MetadataStore, keys: StreamKeys, view: StreamView, state_item: Item
) -> StreamView:
    """`view` brought to the state in `state_item` (a new view if the stream was recreated)."""
    if state_item.mod_revision == view.state_rev:
        return view
    state = decode_state(state_item.value)
    if state.uid != view.uid:
        return await load_view(meta, keys, state_item)
    if state.last_seq > view.last_seq:
        for item in await meta.range(keys.index_prefix, start=keys.index(view.last_seq + 1)):
            view.add_segment(Segment.from_entry(item.key, decode_index(item.value)))
    view.kill_below(state.first_seq)
    if state.tomb_rev != view.tomb_rev:
        await _apply_tombstones(meta, keys, view, state)
    view.adopt_state(state, state_item.mod_revision)
    return view


async def _apply_tombstones(
    meta: MetadataStore, keys: StreamKeys, view: StreamView, state: StreamState
) -> None:
    if not state.tomb_rev:
        return
    items = await meta.range(keys.tomb_prefix, start=keys.tomb(view.first_seq), keys_only=True)
    for item in items:
        view.kill(seq_from_key(item.key))
