"""Reading a stream from metadata: one consistent read, for agents' views and pipeline jobs.

`read_index` reads a stream's state and the index entries, tombstones and never-expiring
messages a caller wants of it (a `Span`) as an `IndexRead`, in one snapshot of the metadata
store (`MetadataStore.snapshot`): every commit writes the state with the index entries and
tombstones it changes, so what one snapshot holds belongs to that one state. A view therefore
never holds an index entry twice or misses one a concurrent purge deleted, and a job never plans
against entries that no state held together; and a read never has to start over because another
agent committed meanwhile, so an agent catches up with a stream however fast others write to it.

An agent builds its `StreamView` from such a read (`load_view`) and brings it up to date with
other agents' commits by reading only what is new (`catch_up`); a pipeline job reads a stream
with its config as a `StreamSnapshot` (`read_stream`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from infinistream.jetstream.api import StreamConfig
from infinistream.metadata.kv import Get, Item, MetadataStore, Read, Scan
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


class StreamGone(Exception):
    """The stream's state was no longer in metadata when its index was read: it was deleted."""


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
    """What a read takes of a stream's index: the index entries that start at sequences
    `first`..`last` (to the end when `last` is None; with `holding`, also the one holding
    `first`, which starts before it), and the tombstones and never-expiring messages from
    `tombs_from` and `nevers_from` (none when None) up to `last`."""

    first: int
    last: int | None = None
    holding: bool = False
    tombs_from: int | None = None
    nevers_from: int | None = None

    def reads(self, keys: StreamKeys) -> list[Read]:
        """The snapshot's reads of this span, after the state's (see `IndexRead.of`)."""
        stop = None if self.last is None else self.last + 1
        index_end = None if stop is None else keys.index(stop)
        entries: list[Read] = []
        if stop is None or self.first < stop:
            begin = self.first + 1 if self.holding else self.first
            if self.holding:
                # The entry holding `first` begins at or before it: the last key up to it.
                entries.append(
                    Scan(keys.index_prefix, end=keys.index(begin), reverse=True, limit=1)
                )
            entries.append(Scan(keys.index_prefix, start=keys.index(begin), end=index_end))
        tombs = _marks(keys.tomb_prefix, keys.tomb, self.tombs_from, stop)
        nevers = _marks(keys.never_prefix, keys.never, self.nevers_from, stop)
        return [*entries, tombs, nevers]


def _marks(prefix: str, key: Callable[[int], str], start: int | None, stop: int | None) -> Scan:
    """The keys-only scan of tombstones or never-expiring messages from `start` (none if None)
    to before `stop`."""
    if start is None:
        return Scan(prefix, limit=0)
    return Scan(prefix, start=key(start), end=None if stop is None else key(stop), keys_only=True)


@dataclass(frozen=True, slots=True)
class IndexRead:
    """A stream's state and what a `Span` asked of its index, as they were together: the
    index entries (encoded, in sequence order), the tombstones (in order) and, if the span
    asked for them, the messages whose TTL says never."""

    state: StreamState
    state_revision: int
    entries: list[Item]
    tombstones: list[int]
    nevers: list[int] | None = None

    @classmethod
    def of(cls, state_item: Item, span: Span, found: list[list[Item]]) -> IndexRead:
        """The read of `span` from what its reads (`Span.reads`) found."""
        *entries, tombs, nevers = found
        return cls(
            decode_state(state_item.value),
            state_item.mod_revision,
            [item for part in entries for item in part],
            [seq_from_key(item.key) for item in tombs],
            None if span.nevers_from is None else [seq_from_key(item.key) for item in nevers],
        )


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


async def read_index(meta: MetadataStore, keys: StreamKeys, span: Span) -> IndexRead:
    """The stream's state and what `span` asks of its index, from one snapshot; raises
    `StreamGone` when the stream has no state."""
    snap = await meta.snapshot([Get(keys.state), *span.reads(keys)])
    state_item = snap.item(0)
    if state_item is None:
        raise StreamGone(keys.stream)
    return IndexRead.of(state_item, span, list(snap.found[1:]))


async def read_stream(
    meta: MetadataStore, group: str, name: str, lo: int = 1, hi: int | None = None
) -> StreamSnapshot | None:
    """The stream as metadata has it now, or None if it does not exist.

    Only what sequences lo..hi (inclusive; hi None = to the end) need of the index is read:
    the entry holding `lo` (or the first live sequence, if later), the ones after it, and the
    tombstones among them; all of it and the config in one snapshot.
    """
    keys = StreamKeys(group, name)
    start = max(lo, 1)
    span = Span(start, hi, holding=True, tombs_from=start)
    snap = await meta.snapshot([Get(keys.config), Get(keys.state), *span.reads(keys)])
    record_item, state_item = snap.item(0), snap.item(1)
    if record_item is None or state_item is None:
        return None
    read = IndexRead.of(state_item, span, list(snap.found[2:]))
    record = decode_record(record_item.value)
    state = read.state
    return StreamSnapshot(
        name=name,
        keys=keys,
        config=record.config,
        created_ns=record.created_ns,
        state=state,
        state_revision=read.state_revision,
        entries=[
            EntryRef(i.key, i.mod_revision, entry)
            for i in read.entries
            # Below the live range, an entry holds nothing a job reads.
            if _last_seq(entry := decode_index(i.value)) >= state.first_seq
        ],
        tombstones=frozenset(t for t in read.tombstones if t >= state.first_seq),
    )


def _last_seq(entry: IndexEntry) -> int:
    seqs = entry.seq_array()
    if seqs is not None and seqs:
        return int(seqs[-1])
    return entry.first_seq + len(entry.lengths) // 4 - len(entry.skipped) - 1


async def load_view(meta: MetadataStore, keys: StreamKeys) -> StreamView:
    """The stream's view as metadata has it now; raises `StreamGone` if it has no state."""
    return _view_of(await read_index(meta, keys, _WHOLE))


async def catch_up(meta: MetadataStore, keys: StreamKeys, view: StreamView) -> StreamView:
    """`view` brought to the stream's state now (a new view if the stream was recreated or
    compacted meanwhile); raises `StreamGone` if it has no state.

    What is new is read first: the entries past the view's end, with the state. Only when that
    state says that tombstones or never-expiring messages changed, or that the view must be
    built again, is there a second read (of those, or of everything): two snapshots at most,
    however fast other agents commit.
    """
    read = await read_index(meta, keys, Span(view.last_seq + 1))
    if read.state_revision == view.state_rev:
        return view
    state = read.state
    if _reloads(view, state):
        return await load_view(meta, keys)
    if state.tomb_rev != view.tomb_rev or state.never_rev != view.never_rev:
        since = max(view.first_seq, state.first_seq)
        tombs_from = since if state.tomb_rev != view.tomb_rev else None
        nevers_from = since if state.never_rev != view.never_rev else None
        span = Span(view.last_seq + 1, tombs_from=tombs_from, nevers_from=nevers_from)
        read = await read_index(meta, keys, span)
        if _reloads(view, read.state):
            return await load_view(meta, keys)
        state = read.state
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
    # A deleted last message holds no segment but is still the stream's last sequence.
    view.last_seq = max(view.last_seq, state.last_seq)
    return view


# Every entry, tombstone and never-expiring message (below the first sequence there are none:
# the commit that moves the head deletes them).
_WHOLE = Span(0, tombs_from=0, nevers_from=0)


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
