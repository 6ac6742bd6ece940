"""Reading a stream from metadata: one consistent read, for agents' views and pipeline jobs.

`read_index` reads a stream's state and the index entries and tombstones a caller wants of it
(a `Span`), as an `IndexRead`. The state key and the index and tombstone keys are read one
after another, not in one snapshot, so another agent may commit in between. Every commit
rewrites the state key, so the state is read once more after the other reads: if its revision
has not moved, what was read belongs to that one state; if it has, the reads are redone against
the newer state. Without this a view could hold an index entry twice (read as new, then again
as beyond the older state's last sequence) or lose entries a concurrent purge deleted while the
older state still counted them, and trip over a sequence with no segment later; a job could
plan against entries that no state ever held together.

An agent builds its `StreamView` from such a read (`load_view`) and brings it up to date with
other agents' commits by reading only what is new (`catch_up`); a pipeline job reads a stream
with its config as a `StreamSnapshot` (`read_stream`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
)
from infinistream.stream.view import Segment, StreamView


@dataclass(frozen=True, slots=True)
class EntryRef:
    """One index entry as read, with the revision a compare-and-set must compare against."""

    key: str
    revision: int
    entry: IndexEntry

    def segment(self) -> Segment:
        return Segment.from_entry(self.key, self.entry)


@dataclass(frozen=True, slots=True)
class Span:
    """What a read takes of a stream's index against one state: the index entries that start
    at sequences `first`..`last` (with `holding`, also the one holding `first`, which starts
    before it), and the tombstones of `tombs_from`..`last` (none when it is None)."""

    first: int
    last: int
    holding: bool = False
    tombs_from: int | None = None
    # The never-expiring messages of `nevers_from`..`last` (none when it is None).
    nevers_from: int | None = None


@dataclass(frozen=True, slots=True)
class IndexRead:
    """A stream's state and what a `Span` asked of its index, as they were together: the
    index entries (encoded, in sequence order) and the tombstones (in order)."""

    state: StreamState
    state_revision: int
    entries: list[Item]
    tombstones: list[int]
    # The state was gone when read again: the stream was deleted meanwhile, and this is how it
    # was just before.
    gone: bool = False
    # The messages whose TTL says never, if the span asked for them.
    nevers: list[int] | None = None


@dataclass(frozen=True, kw_only=True)
class StreamSnapshot:
    """A stream as a job reads it: its config, state, index entries and tombstones (enough to
    tell which records of which objects are live without asking any agent)."""

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


async def read_index(
    meta: MetadataStore,
    keys: StreamKeys,
    state_item: Item,
    span: Callable[[StreamState], Span],
) -> IndexRead:
    """What `span` asks of the index against the state in `state_item` or a later one, read
    consistently (see the module docstring)."""
    while True:
        state = decode_state(state_item.value)
        wanted = span(state)
        entries: list[Item] = []
        tombs: list[Item] = []
        if wanted.first <= wanted.last:
            index, end = keys.index_prefix, keys.index(wanted.last + 1)
            if wanted.holding:
                # The entry holding `first` begins at or before it: the last key up to it.
                entries = await meta.range(
                    index, end=keys.index(wanted.first + 1), reverse=True, limit=1
                )
                entries += await meta.range(index, start=keys.index(wanted.first + 1), end=end)
            else:
                entries = await meta.range(index, start=keys.index(wanted.first), end=end)
        start = wanted.tombs_from
        if state.tomb_rev and start is not None and start <= wanted.last:
            tombs = await meta.range(
                keys.tomb_prefix,
                start=keys.tomb(start),
                end=keys.tomb(wanted.last + 1),
                keys_only=True,
            )
        nevers: list[Item] | None = None
        if wanted.nevers_from is not None:
            nevers = []
            if state.never_rev and wanted.nevers_from <= wanted.last:
                nevers = await meta.range(
                    keys.never_prefix,
                    start=keys.never(wanted.nevers_from),
                    end=keys.never(wanted.last + 1),
                    keys_only=True,
                )
        latest = await meta.get(keys.state)
        if latest is None or latest.mod_revision == state_item.mod_revision:
            tombstones = [seq_from_key(item.key) for item in tombs]
            never = None if nevers is None else [seq_from_key(item.key) for item in nevers]
            return IndexRead(
                state, state_item.mod_revision, entries, tombstones, latest is None, never
            )
        state_item = latest


async def read_stream(
    meta: MetadataStore, group: str, name: str, lo: int = 1, hi: int | None = None
) -> StreamSnapshot | None:
    """The stream as metadata has it now, or None if it does not exist.

    Only what sequences lo..hi (inclusive; hi None = to the end) need of the index is read:
    the entry holding `lo`, the ones after it, and the tombstones among them.
    """
    keys = StreamKeys(group, name)

    def span(state: StreamState) -> Span:
        start = max(lo, state.first_seq, 1)
        last = state.last_seq if hi is None else min(hi, state.last_seq)
        return Span(start, last, holding=True, tombs_from=start)

    while True:
        items = await meta.get_many([keys.config, keys.state])
        record_item, state_item = items.get(keys.config), items.get(keys.state)
        if record_item is None or state_item is None:
            return None
        read = await read_index(meta, keys, state_item, span)
        record = decode_record(record_item.value)
        # Gone, or deleted and created again while it was read: the config must be its own.
        if not read.gone and record.uid == read.state.uid:
            break
    return StreamSnapshot(
        name=name,
        keys=keys,
        config=record.config,
        created_ns=record.created_ns,
        state=read.state,
        state_revision=read.state_revision,
        entries=[EntryRef(i.key, i.mod_revision, decode_index(i.value)) for i in read.entries],
        tombstones=frozenset(read.tombstones),
    )


async def load_view(meta: MetadataStore, keys: StreamKeys, state_item: Item) -> StreamView:
    """The stream's view at the state in `state_item` or a later one."""
    return _view_of(await read_index(meta, keys, state_item, _whole))


async def catch_up(
    meta: MetadataStore, keys: StreamKeys, view: StreamView, state_item: Item
) -> StreamView:
    """`view` brought to the state in `state_item` or later (a new view if the stream was
    recreated)."""
    if state_item.mod_revision == view.state_rev:
        return view

    def span(state: StreamState) -> Span:
        if _reloads(view, state):
            return _whole(state)
        # Only what is new: entries past the view's end, and tombstones if some were written.
        since = max(view.first_seq, state.first_seq)
        tombs_from = since if state.tomb_rev != view.tomb_rev else None
        nevers_from = since if state.never_rev != view.never_rev else None
        return Span(
            view.last_seq + 1, state.last_seq, tombs_from=tombs_from, nevers_from=nevers_from
        )

    read = await read_index(meta, keys, state_item, span)
    state = read.state
    if _reloads(view, state):
        return _view_of(read)
    new = [Segment.from_entry(item.key, decode_index(item.value)) for item in read.entries]
    if new and new[0].first > view.last_seq + 1:
        # The entries in between are gone: another agent purged them, so they and all this
        # view holds lie below the new head. Move the view there before appending, or its head
        # would point at sequences no segment holds.
        view.kill_below(new[0].first)
    for seg in new:
        view.add_segment(seg)
    view.kill_below(state.first_seq)
    for seq in read.tombstones:
        view.kill(seq)
    if read.nevers is not None:
        view.never = {seq for seq in read.nevers if view.is_live(seq)}
    view.adopt_state(state, read.state_revision)
    return view


def _whole(state: StreamState) -> Span:
    # Every entry up to the state's last sequence (later commits' entries start after it).
    return Span(0, state.last_seq, tombs_from=state.first_seq, nevers_from=state.first_seq)


def _reloads(view: StreamView, state: StreamState) -> bool:
    """A new stream of the same name, or compaction moved messages to new objects."""
    return state.uid != view.uid or state.layout != view.state.layout


def _view_of(read: IndexRead) -> StreamView:
    state, entries = read.state, read.entries
    view = StreamView(state, read.state_revision)
    if entries:
        view.first_seq = min(view.first_seq, decode_index(entries[0].value).first_seq)
        view.last_seq = view.first_seq - 1
    for item in entries:
        view.add_segment(Segment.from_entry(item.key, decode_index(item.value)))
    # The state's range, before tombstones are applied: a deleted last message holds no
    # segment but must still be known as deleted.
    view.last_seq = max(view.last_seq, state.last_seq)
    view.kill_below(state.first_seq)
    for seq in read.tombstones:
        view.kill(seq)
    view.never = {seq for seq in read.nevers or () if view.is_live(seq)}
    view.adopt_state(state, read.state_revision)
    view.last_seq = state.last_seq
    return view
