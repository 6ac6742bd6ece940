"""Reading a stream from metadata, in consistent snapshots, for agents' views and pipeline jobs.

Every read here is one snapshot of the metadata store (`MetadataStore.snapshot`) that includes
the stream's state: every commit writes the state with the index entries, tombstones and subject
records it changes, so what one snapshot holds belongs to that one state. A read never has to
start over because another agent committed meanwhile, so an agent catches up with a stream
however fast others write to it.

An agent's `StreamView` starts from the stream's state alone (`load_view`: nothing of the index
is read to open a stream) and follows other agents' commits by their state alone (`catch_up`);
what a question asked of it finds missing is read when it is asked (`fill`): a page of section
summaries, sections' detail, the tombstones, subject records. A pipeline job reads what a range
of sequences needs of the index with the stream's config as a `StreamSnapshot` (`read_stream`,
through `read_index`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from infinistream.jetstream.api import StreamConfig
from infinistream.jetstream.subjects import matches
from infinistream.metadata.kv import Get, Item, MetadataStore, Read, Scan, Snapshot
from infinistream.stream.index_cache import IndexCache
from infinistream.stream.records import (
    Entry,
    IndexEntry,
    SectionEntry,
    StreamKeys,
    StreamState,
    SubjectRecord,
    decode_entry,
    decode_record,
    decode_section,
    decode_state,
    decode_subject,
    is_section_entry,
    seq_from_key,
)
from infinistream.stream.sections import (
    OPEN,
    PAGE_ENTRIES,
    Page,
    Section,
    Segment,
    section_of,
    stored_section,
)
from infinistream.stream.view import (
    FIRST_REACH,
    REACH_GROWTH,
    AllSubjects,
    Details,
    Need,
    Nevers,
    SectionAt,
    StreamView,
    Subjects,
    SubjectsMatching,
    Tombstones,
    literal_prefix,
)


class StreamGone(Exception):
    """The stream's state was no longer in metadata when its index was read: it was deleted."""


@dataclass(frozen=True, slots=True)
class EntryRef:
    """One index entry as read, with the revision a compare-and-set must compare against."""

    key: str
    revision: int
    entry: Entry

    def section(self) -> Section:
        """What the entry says of its section (no read)."""
        return section_of(self.key, self.entry)[0]

    def segment(self) -> Segment:
        """The section's detail, for an entry that holds it (written before record
        directories); `sections.read_segment` reads any entry's."""
        if not isinstance(self.entry, IndexEntry):
            raise ValueError(f"index entry {self.key}: its detail is in its record directory")
        return Segment.from_entry(self.key, self.entry)


@dataclass(frozen=True, slots=True)
class Span:
    """What a read takes of a stream's index: the index entries that start at sequences
    `first`..`last` (to the end when `last` is None; with `holding`, also the one holding
    `first`, which starts before it, looked for within `reach` sequences back), and the
    tombstones and never-expiring messages from `tombs_from` and `nevers_from` (none when
    None) up to `last`."""

    first: int
    last: int | None = None
    holding: bool = False
    tombs_from: int | None = None
    nevers_from: int | None = None
    reach: int = FIRST_REACH

    def reads(self, keys: StreamKeys) -> list[Read]:
        """The snapshot's reads of this span, after the state's (see `IndexRead.of`)."""
        stop = None if self.last is None else self.last + 1
        index_end = None if stop is None else keys.index(stop)
        entries: list[Read] = []
        if stop is None or self.first < stop:
            begin = self.first + 1 if self.holding else self.first
            if self.looks_back():
                # The entry holding `first` begins at or before it: the last key up to it,
                # within `reach` (etcd sorts a reverse range's whole window to take its last
                # key: a window from the stream's start would cost its whole index).
                entries.append(
                    Scan(
                        keys.index_prefix,
                        start=keys.index(self.holding_from()),
                        end=keys.index(begin),
                        reverse=True,
                        limit=1,
                    )
                )
            entries.append(Scan(keys.index_prefix, start=keys.index(begin), end=index_end))
        tombs = _marks(keys.tomb_prefix, keys.tomb, self.tombs_from, stop)
        nevers = _marks(keys.never_prefix, keys.never, self.nevers_from, stop)
        return [*entries, tombs, nevers]

    def looks_back(self) -> bool:
        """Whether its reads look for the entry holding `first` (the first of them)."""
        return self.holding and (self.last is None or self.first <= self.last)

    def holding_from(self) -> int:
        """The first sequence the search for the entry holding `first` looks at."""
        return max(0, self.first + 1 - self.reach)

    def wider(self) -> Span | None:
        """This span looking 16 times as far back for the entry holding `first`, for when a
        read found none within its reach; None if it looked back to the stream's start."""
        if not self.holding or self.holding_from() == 0:
            return None
        return replace(self, reach=self.reach * REACH_GROWTH)


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


async def read_record_and_state(meta: MetadataStore, keys: StreamKeys) -> tuple[Item, Item] | None:
    """The stream's record and state items, read together; None if it does not exist."""
    items = await meta.get_many([keys.config, keys.state])
    record_item, state_item = items.get(keys.config), items.get(keys.state)
    if record_item is None or state_item is None:
        return None
    return record_item, state_item


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
    span: Span | None = Span(start, hi, holding=True, tombs_from=start)
    while True:
        assert span is not None
        reads = span.reads(keys)
        snap = await meta.snapshot([Get(keys.config), Get(keys.state), *reads])
        record_item, state_item = snap.item(0), snap.item(1)
        if record_item is None or state_item is None:
            return None
        # Nothing found holding `start` within reach: it starts further back (past a gap of
        # deleted messages), or there is none. Read again, looking further, at most a few
        # times before the window holds the stream's start.
        wider = span.wider()
        if wider is None or not span.looks_back() or snap.found[2]:
            break
        span = wider
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
            if _last_seq(entry := decode_entry(i.value)) >= state.first_seq
        ],
        tombstones=frozenset(t for t in read.tombstones if t >= state.first_seq),
    )


def _last_seq(entry: Entry) -> int:
    if isinstance(entry, SectionEntry):
        return entry.last_seq
    seqs = entry.seq_array()
    if seqs is not None and seqs:
        return int(seqs[-1])
    return entry.first_seq + len(entry.lengths) // 4 - len(entry.skipped) - 1


def load_view(
    keys: StreamKeys, state_item: Item, cache: IndexCache | None = None, storage: str = "file"
) -> StreamView:
    """The stream's view at the state in `state_item`, of a stream of `storage`: nothing read
    yet of its index (what questions need is read when they ask, `fill`)."""
    return StreamView(decode_state(state_item.value), state_item.mod_revision, cache, keys, storage)


def catch_up(view: StreamView, state_item: Item) -> StreamView:
    """`view` brought to the state in `state_item` (if later): whatever another agent's
    commits may have changed is dropped, to be read again when asked for."""
    if state_item.mod_revision > view.state_rev:
        view.adopt_state(decode_state(state_item.value), state_item.mod_revision)
    return view


# Reads a section's record directory from its object: its detail.
DirectoryReader = Callable[[Section], Awaitable[Segment]]
# Directories read at once when a stream's subject records are built from its sections.
DIRECTORY_READS = 16


async def fill(
    meta: MetadataStore, view: StreamView, need: Need, directories: DirectoryReader | None = None
) -> None:
    """Read what `need` says `view` is missing, in one snapshot with the stream's state: the
    view takes that state first (another agent may have committed since it last looked), so
    what it reads belongs to the state it holds. Record directories come from objects
    (`directories`): they never change. Raises `StreamGone` if the stream is gone.

    What was read is kept only if the view's sections were those of the state it came back
    with. A read of a page is planned from the pages the view holds: it looks for the entry
    holding a sequence from the end of the page before, and ends the page where the page
    after begins. If the state read with it has another layout (compaction or an erase
    rewrote the index) or is another stream's, taking it dropped the pages the read was
    planned from, and the page planned from them may end where no section does now: the page
    after it, read later, would look for the section holding its first sequence from there
    on, not find it, and say the message is not there. So the view then starts afresh at the
    state the read brought, and the question, asked again, plans its read from that. A view
    that held no state yet holds no pages."""
    keys = view.keys
    if keys is None:
        raise ValueError("a view without its stream's keys cannot read what it misses")
    planned = (view.uid, view.layout) if view.state_rev else None
    if isinstance(need, Details):
        await _fill_details(meta, keys, view, need, directories)
    elif isinstance(need, AllSubjects):
        await _fill_table(meta, keys, view, directories)
    else:
        reads, install = _plan(keys, view, need)
        snap = await meta.snapshot([Get(keys.state), *reads])
        if _took_state(view, keys, snap):
            install(list(snap.found[1:]))
    if planned is not None and (view.uid, view.layout) != planned:
        view.reset(view.state, view.state_rev)


def _took_state(view: StreamView, keys: StreamKeys, snap: Snapshot) -> bool:
    """Whether `view` holds the stream's state as `snap` read it (its first item), having
    taken it if later; raises `StreamGone` if the stream had none.

    False when the read came back with a state older than the view's: the view took a later
    one while the read was out (another question's read came back first). What the read found
    may lack what that state holds (sections, tombstones), and would be kept as if it did not:
    it is dropped, and the question, asked again, reads at the view's state."""
    state_item = snap.item(0)
    if state_item is None:
        raise StreamGone(keys.stream)
    if state_item.mod_revision < view.state_rev:
        return False
    catch_up(view, state_item)
    return True


def _plan(
    keys: StreamKeys, view: StreamView, need: Need
) -> tuple[list[Read], Callable[[list[list[Item]]], None]]:
    """The reads that answer `need`, and what puts their answer in the view."""
    if isinstance(need, SectionAt):
        return _page_reads(keys, view, need.seq, lone=need.lone)
    if isinstance(need, Tombstones | Nevers):
        prefix, key = (
            (keys.tomb_prefix, keys.tomb)
            if isinstance(need, Tombstones)
            else (keys.never_prefix, keys.never)
        )
        scan = Scan(prefix, start=key(view.first_seq), keys_only=True)

        def marks(found: list[list[Item]]) -> None:
            seqs = {s for i in found[0] if (s := seq_from_key(i.key)) >= view.first_seq}
            if isinstance(need, Tombstones):
                view.tombs = seqs
            else:
                view.never = seqs

        return [scan], marks
    if isinstance(need, Subjects):

        def records(found: list[list[Item]]) -> None:
            view.add_records(
                {
                    name: decode_subject(got[0].value) if got else None
                    for name, got in zip(need.names, found, strict=True)
                }
            )

        return [Get(keys.subject(name)) for name in need.names], records
    if isinstance(need, SubjectsMatching):
        prefix = keys.subject(literal_prefix(need.filter))

        def listed(found: list[list[Item]]) -> None:
            at = len(keys.subject_prefix)
            got = {i.key[at:]: decode_subject(i.value) for i in found[0]}
            view.list_subjects(
                need.filter, {s: r for s, r in got.items() if matches(need.filter, s)}
            )

        return [Scan(prefix)], listed
    raise TypeError(f"not a need: {need!r}")


def _page_reads(
    keys: StreamKeys, view: StreamView, seq: int, *, lone: bool = False
) -> tuple[list[Read], Callable[[list[list[Item]]], None]]:
    """The page of section summaries holding `seq`: the entry holding it (the last one that
    starts at or before it, after the page before), and up to PAGE_ENTRIES after it (up to
    the page after). `lone`: the entry holding it alone, its page ending where the next
    entry's key says the next section starts (that key read, not its entry kept).

    Both scans look only `view.reach` sequences back and a few reaches forward, not to the
    pages around (or the stream's ends): etcd reads a reverse range's whole window, values and
    all, to sort it, and walks a forward range's whole window in its index whatever its limit,
    so an unbounded window cost a read time in proportion to the stream's length (at 2,574
    entries 18 ms against 1.2 ms bounded). A window that missed the entry holding `seq` puts
    nothing in the view and looks 16 times as far back when asked again; one that found it
    sets the reach from the sections it found."""
    before, after = view.pages.neighbours(seq)
    floor = before.hi + 1 if before is not None else 0
    stop = after.lo if after is not None else None
    reach = view.reach
    low = max(floor, seq + 1 - reach)
    # No key is past the stream's last possible sequence (nor longer than a sequence's).
    ahead = min(OPEN, seq + 1 + (reach if lone else reach * PAGE_ENTRIES // 2))
    bounded = stop is None or ahead < stop
    holding = Scan(
        keys.index_prefix, start=keys.index(low), end=keys.index(seq + 1), reverse=True, limit=1
    )
    following = Scan(
        keys.index_prefix,
        start=keys.index(seq + 1),
        end=keys.index(ahead) if bounded else (None if stop is None else keys.index(stop)),
        limit=1 if lone else PAGE_ENTRIES,
        keys_only=lone,
    )

    def scanned_to_end() -> bool:
        """Whether the scan after `seq` went as far as the page after, or past the stream's
        end (as of the state read with it, which the view holds by now)."""
        return not bounded or (stop is None and view.last_seq < ahead)

    def end_of(items: list[Item], full: bool) -> int:
        """The page's last sequence when the scan after `seq` found `items` (and `full`:
        as many as it asked for): where the sections it found end, or where the scan stopped."""
        if full:
            return _entry_last(items[-1])
        if scanned_to_end():
            return _page_end(stop)
        # Nothing starts from `ahead` to the scan's end; a section found may run past it.
        return max(ahead - 1, _entry_last(items[-1])) if items else ahead - 1

    def page(found: list[list[Item]]) -> None:
        if view.pages.page_at(seq) is not None:
            return  # read meanwhile by another question of this view
        if not found[0] and low > floor:
            view.reach = _wider(view, reach, seq)  # the entry holding seq starts further back
            return
        _learn_reach(view, found[0] + found[1])
        if not found[1] and not scanned_to_end():
            # Nothing ahead within reach, short of the stream's end: a gap (deleted messages)
            # a walk looks across further. Past the end (a reader keeping up with the stream)
            # there is nothing to look for: a reach grown there would grow at every read.
            view.reach = _wider(view, reach, seq)
        if lone:
            # No entry starts between the one holding seq and the next one: the span up to
            # the next one's start holds what the first holds, or nothing.
            hi = seq_from_key(found[1][0].key) - 1 if found[1] else end_of(found[0], False)
            _add_lone_page(view, seq, found[0], hi, floor)
            return
        items = found[0] + found[1]
        full = len(found[1]) == PAGE_ENTRIES
        hi = end_of(items, full)
        if items and all(is_section_entry(item.value) for item in items):
            # Kept as stored, decoded entry by entry when asked (see `Page`); an entry's
            # key is its first sequence.
            lo = seq_from_key(items[0].key) if found[0] else floor
            page = Page.stored(
                min(lo, seq),
                max(hi, seq),
                [item.key for item in items],
                [item.value for item in items],
            )
            view.add_page(page)
            return
        sections: list[Section] = []
        for item in items:
            if is_section_entry(item.value):
                sections.append(stored_section(item.key, item.value))
                continue
            section, seg = section_of(item.key, decode_entry(item.value))
            sections.append(section)
            if seg is not None and not view.holds_segment(item.key):
                view.add_segment(seg)
        lo = sections[0].first if found[0] else floor
        view.add_page(Page(min(lo, seq), max(hi, seq), sections))

    return [holding, following], page


# The least a view's reach shrinks to: a stream of one message a section reads a few dozen.
LEAST_REACH = 64


def _wider(view: StreamView, reach: int, seq: int) -> int:
    """The reach after a read within `reach` of `seq` missed what it looked for: 16 times
    as far, but no further than from `seq` back to the stream's start or on to its end, which
    a window of that reach holds whole (so a miss looks back only a few times before it reads
    from the page before, and a reach never outgrows what a key can say)."""
    return max(reach, min(reach * REACH_GROWTH, max(seq, view.last_seq) + 1))


def _learn_reach(view: StreamView, items: list[Item]) -> None:
    """The reach from the entries a page read found: four times what one spans (from the
    first's start to the last's), so the next read's window holds the entry it looks for.
    It grows at once and shrinks by half a read: sections of varied sizes (flushes of a
    varying rate) would have a reach set by a small one miss the next large one, a read
    more."""
    if len(items) < 2:
        return
    first, last = seq_from_key(items[0].key), seq_from_key(items[-1].key)
    span = (last - first) // (len(items) - 1)
    view.reach = max(LEAST_REACH, 4 * span, view.reach // 2)


def _entry_last(item: Item) -> int:
    """The last sequence of the section an index entry stands for."""
    if is_section_entry(item.value):
        return decode_section(item.value).last_seq
    return _last_seq(decode_entry(item.value))


def _add_lone_page(view: StreamView, seq: int, holding: list[Item], hi: int, floor: int) -> None:
    """The page of the one entry holding `seq` (`holding`, or none), up to `hi`."""
    lo = seq_from_key(holding[0].key) if holding else floor
    lo, hi = min(lo, seq), max(hi, seq)
    if not holding or is_section_entry(holding[0].value):
        view.add_page(Page.stored(lo, hi, [i.key for i in holding], [i.value for i in holding]))
        return
    section, seg = section_of(holding[0].key, decode_entry(holding[0].value))
    if seg is not None and not view.holds_segment(section.key):
        view.add_segment(seg)
    view.add_page(Page(lo, hi, [section]))


def _page_end(stop: int | None) -> int:
    """The end of a page that is not full: the page after's start, or the stream's end."""
    return OPEN if stop is None else stop - 1


async def _fill_table(
    meta: MetadataStore, keys: StreamKeys, view: StreamView, directories: DirectoryReader | None
) -> None:
    """Every subject's record, built from every section's records and the tombstones: the
    stream's own records are not known to be exact (see `StreamState.subject_records`)."""
    snap = await meta.snapshot(
        [Get(keys.state), Scan(keys.index_prefix), Scan(keys.tomb_prefix, keys_only=True)]
    )
    if not _took_state(view, keys, snap):
        return
    tombs = {seq_from_key(i.key) for i in snap.items(2)}
    first, last = view.first_seq, view.last_seq
    out: dict[str, SubjectRecord] = {}
    for seg in await _segments_of(snap.items(1), directories):
        for pos, subject in enumerate(seg.subjects):
            s = seg.seq_at(pos)
            if s < first or s > last or s in tombs:
                continue
            record = out.get(subject)
            if record is None:
                out[subject] = SubjectRecord(s, s, 1)
            else:
                record.last = s
                record.count += 1
    view.table = out


async def _segments_of(items: list[Item], directories: DirectoryReader | None) -> list[Segment]:
    """The detail of every section these index entries describe, in their order."""
    found: list[Segment | None] = []
    pending: list[tuple[int, Section]] = []
    for item in items:
        section, seg = section_of(item.key, decode_entry(item.value))
        found.append(seg)
        if seg is None:
            pending.append((len(found) - 1, section))
    if pending:
        if directories is None:
            raise ValueError("record directories need an object store to be read")
        reader = directories
        limit = asyncio.Semaphore(DIRECTORY_READS)

        async def one(at: int, section: Section) -> None:
            async with limit:
                found[at] = await reader(section)

        await asyncio.gather(*(one(at, section) for at, section in pending))
    return [seg for seg in found if seg is not None]


async def _fill_details(
    meta: MetadataStore,
    keys: StreamKeys,
    view: StreamView,
    need: Details,
    directories: DirectoryReader | None,
) -> None:
    """The detail of sections: from their record directories in their objects, or (index
    entries written before record directories) from their entries, read again from metadata
    (entries never change but by compaction, which makes the view drop its sections)."""
    wanted = [s for s in need.sections if not view.holds_segment(s.key)]
    inline = [s for s in wanted if s.entry is None]
    if inline:
        snap = await meta.snapshot([Get(keys.state), *(Get(s.key) for s in inline)])
        state_item = snap.item(0)
        if state_item is None:
            raise StreamGone(keys.stream)
        catch_up(view, state_item)
        for i, _ in enumerate(inline, start=1):
            item = snap.item(i)
            if item is None:
                continue  # gone below the head meanwhile
            entry = decode_entry(item.value)
            if isinstance(entry, IndexEntry):
                view.add_segment(Segment.from_entry(item.key, entry))
    directed = [s for s in wanted if s.entry is not None]
    if directed:
        if directories is None:
            raise ValueError("record directories need an object store to be read")
        reader = directories
        for seg in await asyncio.gather(*(reader(s) for s in directed)):
            view.add_segment(seg)
