"""Committing changes to streams: one compare-and-set transaction per batch.

A flush of the write buffer touches many streams; all of them change in one metadata
transaction that compares each stream's state and config revisions. When another agent got
there first the compare fails, nothing is written, and the plan is made again against fresh
views (the object is already in storage and stays as it is: only the index changes).
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Protocol, TypeVar

from infinistream.jetstream import errors
from infinistream.jetstream.api import StreamConfig
from infinistream.jetstream.durations import SECOND_NS
from infinistream.metadata.kv import (
    Compare,
    Delete,
    DeletePrefix,
    DeleteRange,
    Item,
    MetadataStore,
    Op,
    Put,
    TxnResult,
)
from infinistream.storage import RecordDirectory, SectionRef
from infinistream.stream import records
from infinistream.stream.catalog import Catalog, StreamEntry
from infinistream.stream.changes import Changes
from infinistream.stream.loader import StreamGone, read_record_and_state
from infinistream.stream.publish_rules import Outcome, Publish, StreamPlan, plan
from infinistream.stream.sections import (
    FILTER_BITS_PER_RECORD,
    Segment,
    section_of,
    summary_of,
)
from infinistream.stream.sizes import stored_sizes
from infinistream.stream.summary import summarize
from infinistream.stream.view import Missing, StreamView

MAX_ATTEMPTS = 64
T = TypeVar("T")
InterestLookup = Callable[[str], Awaitable[Callable[[str], bool]]]


class StagedObject(Protocol):
    """A flush's object, written and not yet durable: `sync` makes it durable, with the
    commit record given (of the commit that took `revision`) written after it: one sync for
    both."""

    def sync(self, record: bytes | None, revision: int = 0) -> None: ...


class CommitConflict(Exception):
    """Other agents kept changing the same streams; every attempt lost the race."""


class _Stale(Exception):
    """An attempt planned against the items this committer knew lost its compare: someone
    changed a stream since. Not a lost race (a read would have seen the change): read, try
    again."""


@dataclass(slots=True)
class SectionWrite:
    """One stream's section of a written object, with the publishes it holds in order.

    With its record `directory` (written after it, `ref` says where), the commit writes a
    `SectionEntry`; without, the `IndexEntry` of stores written before record directories."""

    stream: str
    obj: str
    offset: int
    length: int
    publishes: list[Publish]
    codec: int = 0  # how the section is stored (storage.codec)
    directory: RecordDirectory | None = None
    ref: SectionRef | None = None


def directory_of(publishes: list[Publish]) -> RecordDirectory:
    """The record directory of a section holding these publishes' records, in order; a
    mirror's copies list the origin's sequences and timestamps they keep."""
    mirrored = bool(publishes) and publishes[0].origin_seq > 0
    return RecordDirectory.of(
        [p.subject for p in publishes],
        [p.size for p in publishes],
        [len(p.headers) if p.headers else 0 for p in publishes],
        [p.origin_seq for p in publishes] if mirrored else None,
        [p.stamp for p in publishes] if mirrored else None,
    )


@dataclass(slots=True)
class _Staged:
    keys: records.StreamKeys
    view: StreamView
    changes: Changes
    state: records.StreamState
    entry: records.Entry | None
    entry_key: str
    nevers: _Nevers
    # The new section's detail, when known already (else built from `entry`).
    segment: Segment | None = None


@dataclass(slots=True, frozen=True)
class _Nevers:
    """The never-expiring messages a plan adds and deletes, asked of it once."""

    new: list[int]
    dropped: list[int]

    @classmethod
    def of(cls, changes: Changes) -> _Nevers:
        return cls(changes.new_nevers(), changes.dropped_nevers())


@dataclass(slots=True)
class _Known:
    """A stream's config and state items as last read or written, the config decoded."""

    config: Item
    state: Item
    cfg: StreamConfig | None = None


def _deletes(op: Delete | DeletePrefix | DeleteRange, key: str) -> bool:
    """Whether `op` deletes `key` (str order is UTF-8's byte order)."""
    if isinstance(op, Delete):
        return op.key == key
    if isinstance(op, DeletePrefix):
        return key.startswith(op.prefix)
    return op.start <= key < op.end


def now_ns() -> int:
    return time.time_ns()


class Committer:
    def __init__(
        self, meta: MetadataStore, catalog: Catalog, interest: InterestLookup | None = None
    ) -> None:
        self.meta = meta
        self.catalog = catalog
        self.conflicts = 0
        # For interest-retention streams: which subjects some consumer wants, given by the
        # consumer layer (streams know nothing of consumers). Without it, nothing is dropped.
        self.interest = interest
        # Each stream's config and state items as this committer last read or wrote them. A
        # flush that needs no other key plans against these rather than reading them again:
        # its commit compares both revisions, so if anyone changed the stream since (another
        # agent, or a purge on this one), nothing is written and the next attempt reads.
        self._known: dict[str, _Known] = {}

    # -- publishes -------------------------------------------------------------------------

    async def commit_sections(
        self,
        sections: list[SectionWrite],
        staged: StagedObject | None = None,
        durable: Callable[[dict[str, list[Outcome]]], None] | None = None,
    ) -> dict[str, list[Outcome]]:
        """Assign sequences to every section's publishes; per stream, an outcome per publish.

        With `staged` (the sections' object, written but not durable), the commit is made
        durable by the object's own sync where the metadata store allows (`txn_recorded`),
        otherwise the object is synced first: either way nothing is committed durably before
        its object, and the return means both are durable.

        `durable`, if given, is called with the outcomes the moment they are durable, before
        the views and the committer's own knowledge learn of the commit: the publishers'
        answers go out first, and that bookkeeping runs while they read them. No other task
        runs in between (nothing here awaits after the call), so no request sees a view
        without a commit its answer announced."""
        names = sorted({s.stream for s in sections})
        async with AsyncExitStack() as stack:
            for name in names:
                await stack.enter_async_context(self.catalog.view_lock(name))
            # What each attempt reads depends on the publishes alone: worked out once.
            keys = {s.stream: self.catalog.keys(s.stream) for s in sections}
            msg_ids = {s.stream: _msg_ids(s.publishes) for s in sections}
            fires = {s.stream: self._fires(s) for s in sections}
            wanted: list[str] = []
            for s in sections:
                k = keys[s.stream]
                wanted += [k.config, k.state]
                wanted += [k.dedupe(i) for i in msg_ids[s.stream]]
                wanted += fires[s.stream]
            attempts = 0
            with self.catalog.cache.hold():
                while attempts < MAX_ATTEMPTS:
                    try:
                        result = await self._try_commit_sections(
                            sections, keys, msg_ids, fires, wanted, staged, durable
                        )
                    except Missing as missing:
                        # The plan needs what the view does not hold: read it, plan again.
                        await self.catalog.fill(missing)
                        continue
                    except _Stale:
                        continue
                    if result is not None:
                        return result
                    attempts += 1
                    self.conflicts += 1
        raise CommitConflict("metadata commit kept conflicting with other agents")

    async def _try_commit_sections(
        self,
        sections: list[SectionWrite],
        keys: dict[str, records.StreamKeys],
        msg_ids: dict[str, set[str]],
        fires: dict[str, list[str]],
        wanted: list[str],
        durable_by: StagedObject | None,
        durable: Callable[[dict[str, list[Outcome]]], None] | None,
    ) -> dict[str, list[Outcome]] | None:
        subjects = self._uncached_subjects(sections, keys)
        items = self._known_items(sections, keys, wanted, subjects)
        from_known = items is not None
        if items is None:
            items = await self.meta.get_many(wanted + [key for key, _, _ in subjects])
            self._learn(sections, keys, items)
        now = now_ns()
        outcomes: dict[str, list[Outcome]] = {}
        compares: list[Compare] = []
        ops: list[Op] = []
        staged: list[_Staged] = []
        for section in sections:
            k = keys[section.stream]
            record_item = items.get(k.config)
            state_item = items.get(k.state)
            if record_item is None or state_item is None:
                outcomes[section.stream] = [
                    Outcome(error=errors.stream_not_found()) for _ in section.publishes
                ]
                # The stream must still be missing when we commit, or we would refuse wrongly.
                compares += [Compare(k.config, 0)]
                continue
            cfg = self._config_of(section.stream, record_item)
            state = records.decode_state(state_item.value)
            try:
                view = await self.catalog.view_locked(section.stream, state_item)
            except StreamGone:
                # Deleted since it was read: this attempt's compares fail, the next finds it
                # missing.
                compares.append(Compare(k.state, state_item.mod_revision))
                continue
            # The record says the stream's storage type, which sizes its messages.
            view.storage = cfg.storage
            _take_records(view, state_item, items, subjects, section.stream)
            known = _known_ids(items, k, msg_ids[section.stream], cfg, now)
            changes = Changes(view)
            interested = None
            if cfg.retention == "interest" and self.interest is not None:
                interested = await self.interest(section.stream)
            # The schedule entries still due: each fires once, and goes with the commit.
            due = {key for key in fires[section.stream] if key in items}
            stream_plan = plan(
                cfg, changes, section.publishes, state.last_msg_id, known, interested, due
            )
            outcomes[section.stream] = stream_plan.outcomes
            compares += [
                Compare(k.config, record_item.mod_revision),
                Compare(k.state, state_item.mod_revision),
            ]
            compares += [Compare(key, items[key].mod_revision) for key in sorted(due)]
            entry, seg = _index_entry(section, stream_plan, view, state, now, cfg.storage)
            entry_key = k.index(entry.first_seq) if entry is not None else ""
            if entry is not None:
                ops.append(Put(entry_key, records.encode(entry)))
                ops += _expiry_ops(k, changes, entry)
                ops += _schedule_ops(k, changes, entry, now)
            nevers = _Nevers.of(changes)
            new_state = _next_state(view, changes, state, entry, stream_plan.last_msg_id, nevers)
            ops += _change_ops(k, view, changes, new_state, nevers, entry_key)
            for msg_id, seq in stream_plan.new_ids.items():
                ops.append(
                    Put(
                        k.dedupe(msg_id),
                        records.encode(records.DedupeEntry(seq, _ts_of(entry, seq))),
                    )
                )
            staged.append(_Staged(k, view, changes, new_state, entry, entry_key, nevers, seg))
        try:
            result = await self._txn(compares, ops, durable_by)
        except BaseException:
            # Committed or not, unknown: the next attempt reads what is there.
            self._forget(sections)
            raise
        if not result.succeeded:
            self._forget(sections)
            if from_known:
                raise _Stale
            return None
        if durable is not None:
            durable(outcomes)
        self._wrote(sections, keys, ops, result.revision)
        for st in staged:
            _apply(st, result.revision)
        return outcomes

    def _known_items(
        self,
        sections: list[SectionWrite],
        keys: dict[str, records.StreamKeys],
        wanted: list[str],
        subjects: list[tuple[str, str, str]],
    ) -> dict[str, Item] | None:
        """What the attempt would read, from `_known` alone; None when it holds less (a
        message id's dedupe entry, a schedule entry, a subject record, or a stream not seen)."""
        if subjects:
            return None
        items: dict[str, Item] = {}
        for section in sections:
            known = self._known.get(section.stream)
            if known is None:
                return None
            k = keys[section.stream]
            items[k.config] = known.config
            items[k.state] = known.state
        if len(items) != len(wanted) or any(key not in items for key in wanted):
            return None
        return items

    def _learn(
        self,
        sections: list[SectionWrite],
        keys: dict[str, records.StreamKeys],
        items: dict[str, Item],
    ) -> None:
        for section in sections:
            k = keys[section.stream]
            config, state = items.get(k.config), items.get(k.state)
            if config is None or state is None:
                self._known.pop(section.stream, None)
                continue
            known = self._known.get(section.stream)
            if known is not None and known.config.mod_revision == config.mod_revision:
                known.state = state
            else:
                self._known[section.stream] = _Known(config, state)

    def _wrote(
        self,
        sections: list[SectionWrite],
        keys: dict[str, records.StreamKeys],
        ops: list[Op],
        revision: int,
    ) -> None:
        """After a commit at `revision`: the streams' items as it left them."""
        watched = {}
        for section in sections:
            k = keys[section.stream]
            watched[k.config] = watched[k.state] = section.stream
        written: dict[str, Item | None] = {}
        for op in ops:
            if isinstance(op, Put):
                if op.key in watched:
                    written[op.key] = Item(op.key, bytes(op.value), revision)
                continue
            for key in watched:
                if _deletes(op, key):
                    written[key] = None
        for key, item in written.items():
            stream = watched[key]
            known = self._known.get(stream)
            if known is None:
                continue
            if item is None:
                del self._known[stream]
            elif key == known.config.key:
                known.config = item
                known.cfg = None
            else:
                known.state = item

    def _forget(self, sections: list[SectionWrite]) -> None:
        for section in sections:
            self._known.pop(section.stream, None)

    def _config_of(self, stream: str, item: Item) -> StreamConfig:
        """The stream's config in `item`, decoded once per revision of it."""
        known = self._known.get(stream)
        if known is None or known.config.mod_revision != item.mod_revision:
            return records.decode_record(item.value).config
        if known.cfg is None:
            known.cfg = records.decode_record(item.value).config
        return known.cfg

    async def _txn(
        self, compares: list[Compare], ops: list[Op], durable_by: StagedObject | None
    ) -> TxnResult:
        """The flush's transaction; with a staged object, durable once the object is."""
        if durable_by is None:
            return await self.meta.txn(compares, ops)
        # No await between the commit and the sync that makes it durable: no other task may
        # see, or build on, the commit before then.
        recorded = await self.meta.txn_recorded(compares, ops)
        if recorded.result is None:
            durable_by.sync(None)
            return await self.meta.txn(compares, ops)
        if recorded.record is not None:
            try:
                durable_by.sync(recorded.record, recorded.result.revision)
            except BaseException:
                self.meta.recorded_done(durable=False)
                raise
            self.meta.recorded_done(durable=True)
        return recorded.result

    def _uncached_subjects(
        self, sections: list[SectionWrite], keys: dict[str, records.StreamKeys]
    ) -> list[tuple[str, str, str]]:
        """(key, stream, subject) of the subject records the batch will ask for that the views
        do not hold: read with the state, they save a read after it."""
        out: list[tuple[str, str, str]] = []
        for section in sections:
            view = self.catalog.cached_view(section.stream)
            if view is None or not view.subjects_exact:
                continue
            held = view.held_records()
            k = keys[section.stream]
            out += [
                (k.subject(subject), section.stream, subject)
                for subject in dict.fromkeys(p.subject for p in section.publishes)
                if subject not in held
            ]
        return out

    def _fires(self, section: SectionWrite) -> list[str]:
        """The schedule entries that messages of a section fire (only streams with schedules
        can have any, and they can not turn schedules off, so the others are not looked at)."""
        entry = self.catalog.streams.get(section.stream)
        if entry is None or not entry.config.allow_msg_schedules:
            return []
        return [p.fires for p in section.publishes if p.fires]

    # -- single-stream changes (purge, delete, expiry) -------------------------------------

    async def change_stream(self, stream: str, planner: Callable[[StreamEntry, Changes], T]) -> T:
        """Plan a change with `planner` against a fresh view, commit it, and apply it.

        The planner raises ApiError to refuse; it may be called several times if other agents
        commit to the same stream meanwhile.
        """
        async with self.catalog.view_lock(stream):
            attempts = 0
            with self.catalog.cache.hold():
                while attempts < MAX_ATTEMPTS:
                    try:
                        done, outcome = await self._try_change(stream, planner)
                    except Missing as missing:
                        await self.catalog.fill(missing)
                        continue
                    if done:
                        return outcome
                    attempts += 1
                    self.conflicts += 1
        raise CommitConflict(f"stream {stream}: metadata commit kept conflicting")

    async def _try_change(
        self, stream: str, planner: Callable[[StreamEntry, Changes], T]
    ) -> tuple[bool, T]:
        """One attempt of `change_stream`: (whether it is done, the planner's outcome)."""
        k = self.catalog.keys(stream)
        stored = await read_record_and_state(self.meta, k)
        if stored is None:
            raise errors.stream_not_found()
        record_item, state_item = stored
        record = records.decode_record(record_item.value)
        entry = StreamEntry(
            stream,
            record.config,
            record.created_ns,
            record.uid,
            record_item.mod_revision,
            k,
        )
        state = records.decode_state(state_item.value)
        try:
            view = await self.catalog.view_locked(stream, state_item)
        except StreamGone:
            raise errors.stream_not_found() from None
        view.storage = record.config.storage
        changes = Changes(view)
        outcome = planner(entry, changes)
        if not changes.touched:
            return True, outcome
        nevers = _Nevers.of(changes)
        new_state = _next_state(view, changes, state, None, state.last_msg_id, nevers)
        ops = _change_ops(k, view, changes, new_state, nevers, "")
        compares = [
            Compare(k.config, record_item.mod_revision),
            Compare(k.state, state_item.mod_revision),
        ]
        # This stream's items change here: the next flush reads them.
        self._known.pop(stream, None)
        result = await self.meta.txn(compares, ops)
        if not result.succeeded:
            return False, outcome
        staged = _Staged(k, view, changes, new_state, None, "", nevers)
        _apply(staged, result.revision)
        return True, outcome


def _msg_ids(publishes: list[Publish]) -> set[str]:
    # Only messages with headers can carry an id; most batches have none to look at.
    ids = {p.msg_id() for p in publishes if p.headers is not None}
    return {i for i in ids if i}


def _known_ids(
    items: dict[str, Item], keys: records.StreamKeys, msg_ids: set[str], cfg: StreamConfig, now: int
) -> dict[str, int]:
    window_start = now - cfg.duplicate_window
    known: dict[str, int] = {}
    for msg_id in msg_ids:
        item = items.get(keys.dedupe(msg_id))
        if item is not None:
            entry = records.decode_dedupe(item.value)
            if entry.ts >= window_start:
                known[msg_id] = entry.seq
    return known


def _index_entry(
    section: SectionWrite,
    stream_plan: StreamPlan,
    view: StreamView,
    state: records.StreamState,
    now: int,
    storage: str,
) -> tuple[records.Entry | None, Segment | None]:
    """The index entry of a section's accepted publishes (none if none was accepted), and,
    when the section has a record directory, its detail. An entry without a directory keeps
    what each message counts for in a stream of `storage` (stream.sizes); one with a
    directory keeps what that needs: its bytes and how many messages have headers."""
    if not stream_plan.accepted:
        return None, None
    publishes = section.publishes
    skipped: tuple[int, ...] = ()
    if len(stream_plan.accepted) < len(publishes):
        accepted = set(stream_plan.accepted)
        skipped = tuple(i for i in range(len(publishes)) if i not in accepted)
    first_seq = view.last_seq + 1
    # Stamps increase along the stream even if clocks of different agents disagree.
    ts = max(now, state.last_ts + 1)
    if section.directory is None or section.ref is None:
        return _legacy_entry(section, first_seq, ts, list(skipped), storage), None
    kept = [publishes[i] for i in stream_plan.accepted]
    count = len(kept)
    # A mirror's copies keep the origin's sequences and timestamps (listed in the directory).
    explicit = kept[0].origin_seq > 0
    if explicit:
        first_seq = kept[0].origin_seq
        ts, last_ts = kept[0].stamp, kept[-1].stamp
    else:
        last_ts = ts + count - 1
    summary = summarize([p.subject for p in kept], FILTER_BITS_PER_RECORD)
    entry = records.SectionEntry(
        obj=section.obj,
        offset=section.offset,
        length=section.length,
        codec=section.codec,
        plain_length=section.ref.records_length,
        dir_length=section.ref.index_length,
        records=len(publishes),
        first_seq=first_seq,
        last_seq=first_seq + count - 1,
        count=count,
        size=sum(p.size for p in kept),
        hdrs=sum(1 for p in kept if p.headers),
        ts=ts,
        last_ts=last_ts,
        skipped=skipped,
        explicit=explicit,
        names=summary.names,
        counts=summary.counts,
        bloom=summary.bloom,
        bloom_k=summary.k,
        dir_crc=section.ref.index_checksum,
    )
    key = view.keys.index(first_seq) if view.keys is not None else ""
    return entry, Segment.from_directory(key, entry, section.directory)


def _legacy_entry(
    section: SectionWrite, first_seq: int, ts: int, skipped: list[int], storage: str
) -> records.IndexEntry:
    """The index entry as stores written before record directories hold it: every record's
    subject and length."""
    subjects = [p.subject for p in section.publishes]
    # Subject ids number the distinct subjects in order of first appearance.
    names = {name: i for i, name in enumerate(dict.fromkeys(subjects))}
    ids = array("I", map(names.__getitem__, subjects))
    lengths = array("I", [p.size for p in section.publishes])
    return records.IndexEntry(
        obj=section.obj,
        offset=section.offset,
        length=section.length,
        first_seq=first_seq,
        ts=ts,
        subjects=list(names),
        subject_ids=ids.tobytes(),
        lengths=lengths.tobytes(),
        skipped=skipped,
        codec=section.codec,
        sizes=array("I", stored_sizes(storage, section.publishes)).tobytes(),
    )


def _take_records(
    view: StreamView,
    state_item: Item,
    items: dict[str, Item],
    subjects: list[tuple[str, str, str]],
    stream: str,
) -> None:
    """Give the view the subject records read with its state (those it did not hold)."""
    if view.state_rev != state_item.mod_revision or not view.subjects_exact:
        return
    view.add_records(
        {
            subject: records.decode_subject(items[key].value) if key in items else None
            for key, of, subject in subjects
            if of == stream
        }
    )


def _expiry_ops(keys: records.StreamKeys, changes: Changes, entry: records.Entry) -> list[Op]:
    """An expiry entry for each new message with a TTL, due its TTL after its timestamp."""
    return [
        Put(keys.expiry(_ts_of(entry, seq) + ttl * SECOND_NS, seq), b"")
        for seq, ttl in changes.ttls.items()
        if ttl > 0 and changes.is_live(seq)
    ]


def _schedule_ops(
    keys: records.StreamKeys, changes: Changes, entry: records.Entry, now: int
) -> list[Op]:
    """When each new schedule is first due (from its timestamp), and when each that fired is
    due next; none for a schedule the same commit replaced or removed."""
    ops: list[Op] = [
        Put(keys.schedule(schedule.due(_ts_of(entry, seq), now), seq), b"")
        for seq, schedule in changes.schedules.items()
        if changes.is_live(seq)
    ]
    ops += [
        Put(keys.schedule(due, seq), b"")
        for seq, due in changes.rescheduled.items()
        if changes.is_live(seq)
    ]
    return ops


def _ts_of(entry: records.Entry | None, seq: int) -> int:
    if entry is None:
        return now_ns()
    if isinstance(entry, records.SectionEntry) and entry.explicit:
        # A mirror's copies: their stamps are the origin's, listed in the directory; the
        # entry holds the first and the last.
        return entry.last_ts if seq >= entry.last_seq else entry.ts
    return entry.ts + (seq - entry.first_seq)


def _next_state(
    view: StreamView,
    changes: Changes,
    state: records.StreamState,
    entry: records.Entry | None,
    last_msg_id: str,
    nevers: _Nevers,
) -> records.StreamState:
    first = changes.first_seq
    if changes.msgs == 0:
        first_ts = 0
    elif first > view.last_seq:
        first_ts = _ts_of(entry, first)
    elif first == view.first_seq and view.msgs:
        first_ts = state.first_ts
    else:
        first_ts = view.ts_of(first)
    new_tombs = changes.new_tombstones()
    nevers_changed = bool(nevers.new or nevers.dropped)
    last_ts = state.last_ts
    if entry is not None:
        last_ts = _ts_of(entry, changes.last_seq)
    return records.StreamState(
        uid=state.uid,
        first_seq=first,
        last_seq=changes.last_seq,
        first_ts=first_ts,
        last_ts=last_ts,
        msgs=changes.msgs,
        bytes=changes.bytes,
        num_subjects=changes.num_subjects,
        num_deleted=max(0, changes.last_seq - first + 1 - changes.msgs),
        tomb_rev=state.tomb_rev + (1 if new_tombs else 0),
        last_msg_id=last_msg_id,
        layout=state.layout,
        never_rev=state.never_rev + (1 if nevers_changed else 0),
        subject_records=1,
    )


def _change_ops(
    keys: records.StreamKeys,
    view: StreamView,
    changes: Changes,
    new_state: records.StreamState,
    nevers: _Nevers,
    entry_key: str,
) -> list[Op]:
    ops: list[Op] = [Put(keys.state, records.encode(new_state))]
    ops += [Put(keys.tomb(seq), b"") for seq in changes.new_tombstones()]
    old_first, new_first = view.first_seq, changes.first_seq
    if new_first > old_first:
        # Below the new head: tombstones, never-expiring marks and the index entries wholly
        # there (their objects are the janitor's), whether this agent ever read them or not.
        ops.append(DeleteRange(keys.tomb(old_first), keys.tomb(new_first)))
        ops.append(DeleteRange(keys.never(old_first), keys.never(new_first)))
        kept = _first_kept(view, new_first)
        if entry_key:
            # The entry this commit writes is never dead: its messages follow the view's.
            kept = min(kept, view.last_seq + 1)
        ops.append(DeleteRange(keys.index(0), keys.index(kept)))
    ops += [Put(keys.never(seq), b"") for seq in nevers.new]
    ops += [Delete(keys.never(seq)) for seq in nevers.dropped]
    ops += _subject_ops(keys, view, changes)
    ops += [Delete(key) for key in changes.forgotten]
    ops += [Put(key, value) for key, value in changes.written.items()]
    return ops


def _first_kept(view: StreamView, new_first: int) -> int:
    """The first sequence of the first section that still holds a live message once the head
    is at `new_first` (every section before it is dead)."""
    if new_first > view.last_seq:
        return new_first
    for section in view.sections_from(new_first):
        return min(section.first, new_first)
    return new_first


def _subject_ops(keys: records.StreamKeys, view: StreamView, changes: Changes) -> list[Op]:
    """The subject records this change writes: those it changed; all of them, after the
    prefix is cleared, when the stream's records were not exact (built in `view.table`) or
    the whole stream was purged."""
    planned = changes.records
    if view.table is not None and not view.subjects_exact:
        table = {**view.table, **planned}
        rebuilt: list[Op] = [DeletePrefix(keys.subject_prefix)]
        return rebuilt + [
            Put(keys.subject(s), records.encode(r)) for s, r in table.items() if r and r.count
        ]
    ops: list[Op] = [DeletePrefix(keys.subject_prefix)] if changes.reset_subjects else []
    for subject, record in planned.items():
        if record is not None and record.count:
            ops.append(Put(keys.subject(subject), records.encode(record)))
        elif not changes.reset_subjects:
            ops.append(Delete(keys.subject(subject)))
    return ops


def apply_changes(
    view: StreamView,
    changes: Changes,
    revision: int,
    entry: records.IndexEntry | None = None,
    entry_key: str = "",
    last_msg_id: str = "",
    segment: Segment | None = None,
) -> records.StreamState:
    """The state `changes` leave the stream in, applied to `view` as a commit of them at
    `revision` (with the index entry `entry` at `entry_key`, or the section whose detail is
    `segment`, if it appended) would: what a commit does once its transaction succeeds, for a
    view with no metadata store behind it."""
    if segment is not None:
        entry, entry_key = _entry_of(segment), segment.key
    nevers = _Nevers.of(changes)
    state = _next_state(view, changes, view.state, entry, last_msg_id, nevers)
    _apply(
        _Staged(
            view.keys or records.StreamKeys("", ""),
            view,
            changes,
            state,
            entry,
            entry_key,
            nevers,
            segment,
        ),
        revision,
    )
    return state


def _entry_of(seg: Segment) -> records.IndexEntry:
    """An index entry holding `seg`'s detail (its records all hold a sequence)."""
    names = {name: i for i, name in enumerate(dict.fromkeys(seg.subjects))}
    return records.IndexEntry(
        obj=seg.obj,
        offset=seg.offset,
        length=seg.length,
        first_seq=seg.first,
        ts=seg.ts,
        subjects=list(names),
        subject_ids=array("I", map(names.__getitem__, seg.subjects)).tobytes(),
        lengths=seg.lengths.tobytes(),
        seqs=b"" if seg.seqs is None else seg.seqs.tobytes(),
        timestamps=b"" if seg.stamps is None else seg.stamps.tobytes(),
        codec=seg.codec,
        sizes=b"" if seg.sizes is None else seg.sizes.tobytes(),
    )


def _apply(st: _Staged, revision: int) -> None:
    """Bring the view to the state this agent just committed."""
    view, changes = st.view, st.changes
    if view.table is not None and not view.subjects_exact:
        table = {**view.table, **changes.records}
        view.table = None
        view.forget_records()
        planned: dict[str, records.SubjectRecord | None] = table
    else:
        if changes.reset_subjects:
            view.forget_records()
        planned = changes.records
    if st.entry is not None:
        section, inline = section_of(st.entry_key, st.entry)
        if st.segment is not None and inline is not None:
            section = summary_of(st.segment)
        view.append_section(section, st.segment or inline)
    if view.tombs is not None:
        view.tombs.update(changes.new_tombstones())
    if view.never is not None:
        view.never.difference_update(st.nevers.dropped)
        view.never.update(st.nevers.new)
    view.own_state(st.state, revision)
    view.add_records(planned)
