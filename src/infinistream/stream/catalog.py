"""The streams of a virtual group as this agent knows them: configs, subjects and views.

Everything here is a cache of metadata. The catalog key changes with every stream create,
update and delete, so a cheap read of it tells an agent when to reload the configs; views are
brought up to date against the stream's state key before they are trusted, and what a question
asked of a view finds missing is read on demand (`answer`, `fill`), within the agent's one
budget of memory for stream indexes (the `IndexCache` given to every catalog). A question asked
through `ask` has the marker and the state read with what it finds missing: one round trip.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from infinistream.jetstream.api import StreamConfig
from infinistream.jetstream.subjects import SubjectIndex
from infinistream.jetstream.transforms import SubjectTransform
from infinistream.metadata.kv import Get, Item, MetadataStore
from infinistream.metadata.riders import Riders
from infinistream.stream.index_cache import IndexCache
from infinistream.stream.loader import DirectoryReader, StreamGone, catch_up, fill, load_view
from infinistream.stream.records import (
    StreamKeys,
    StreamState,
    catalog_key,
    decode_record,
    parse_catalog_change,
    streams_prefix,
)
from infinistream.stream.subject_transform import stream_transform
from infinistream.stream.view import Missing, StreamView

SUBJECT_CACHE_MAX = 65536
# The last sequence of a view whose stream's state is not read yet (`_unread_state`).
UNREAD_LAST = 2**63 - 1
T = TypeVar("T")


@dataclass(slots=True)
class StreamEntry:
    name: str
    config: StreamConfig
    created_ns: int
    uid: str
    # mod_revision of the stream record: commits compare it so a config change wins races.
    revision: int
    keys: StreamKeys
    # The stream's subject_transform, compiled once per config.
    transform: SubjectTransform | None = None
    # When an update last changed the config (0: never).
    updated_ns: int = 0


class Catalog:
    def __init__(
        self,
        meta: MetadataStore,
        group: str,
        cache: IndexCache | None = None,
        directories: DirectoryReader | None = None,
    ) -> None:
        self.meta = meta
        self.group = group
        # The agent's memory for stream indexes, shared by every catalog (account) it serves.
        self.cache = cache if cache is not None else IndexCache()
        # Reads sections' record directories from their objects (the message reader's).
        self.directories = directories
        self.streams: dict[str, StreamEntry] = {}
        self._subjects: SubjectIndex[str] = SubjectIndex()
        self._by_subject: dict[str, str] = {}
        self._catalog_rev = -1
        self._views: dict[str, StreamView] = {}
        self._view_locks: dict[str, asyncio.Lock] = {}
        self._refresh_lock = asyncio.Lock()
        # Bumped whenever `streams` changes; keys the selections below.
        self.generation = 0
        self._selections: dict[str, tuple[int, list[StreamEntry]]] = {}

    def keys(self, stream: str) -> StreamKeys:
        return StreamKeys(self.group, stream)

    def stream_for_subject(self, subject: str) -> str | None:
        # Every publish asks this; most ask about a few hot subjects, so remember answers
        # until the catalog changes (bounded, since subjects can be unbounded).
        try:
            return self._by_subject[subject]
        except KeyError:
            pass
        found = self._subjects.match(subject, cache=False)
        stream = found[0] if found else None
        if stream is not None:
            if len(self._by_subject) >= SUBJECT_CACHE_MAX:
                self._by_subject.clear()
            self._by_subject[subject] = stream
        return stream

    async def refresh(self, *, force: bool = False) -> bool:
        """Reload stream configs if the catalog changed; True if anything was reloaded.

        Only the records that changed are read and indexed again: a group whose streams hold
        100,000 subjects between them is not re-indexed whole for each stream created.
        """
        async with self._refresh_lock:
            marker = await self.meta.get(catalog_key(self.group))
            return await self._reload(marker, force=force)

    async def take_marker(self, marker: Item | None) -> bool:
        """Reload stream configs if `marker`, the catalog's key as read with something else
        (`ask`), is later than the one this catalog was read at; True if anything was."""
        if (marker.mod_revision if marker is not None else 0) <= self._catalog_rev:
            return False
        async with self._refresh_lock:
            # Another refresh may have taken a later marker while this one waited for it.
            if (marker.mod_revision if marker is not None else 0) <= self._catalog_rev:
                return False
            return await self._reload(marker, force=False)

    async def _reload(self, marker: Item | None, *, force: bool) -> bool:
        """`refresh`, the catalog's key `marker` read (under the refresh lock)."""
        rev = marker.mod_revision if marker is not None else 0
        if rev == self._catalog_rev and not force:
            return False
        change = parse_catalog_change(marker.value) if marker is not None else None
        if (
            not force
            and change is not None
            and self._catalog_rev
            and (change[0] == self._catalog_rev)
        ):
            # One change since this catalog was read: that stream's record is all to read.
            name = change[1]
            item = await self.meta.get(streams_prefix(self.group) + name)
            self._apply([name] if name in self.streams else [], [item] if item else [])
            self._catalog_rev = rev
            return True
        listed = await self.meta.range(streams_prefix(self.group), keys_only=True)
        prefix_len = len(streams_prefix(self.group))
        revisions = {item.key[prefix_len:]: item.mod_revision for item in listed}
        changed = {
            name
            for name, revision in revisions.items()
            if (entry := self.streams.get(name)) is None or entry.revision != revision
        }
        items = await self.meta.get_many([streams_prefix(self.group) + n for n in sorted(changed)])
        self._apply(
            [n for n in self.streams if n not in revisions or n in changed],
            [items[k] for k in sorted(items)],
        )
        self._catalog_rev = rev
        return True

    def _apply(self, gone: list[str], items: list[Item]) -> None:
        """Forget the streams of `gone` (deleted or changed), then take in the records of
        `items` (changed or new)."""
        streams = dict(self.streams)
        for name in gone:
            for subject in streams.pop(name).config.subjects:
                self._subjects.remove(subject, name)
        prefix_len = len(streams_prefix(self.group))
        for item in items:
            name = item.key[prefix_len:]
            record = decode_record(item.value)
            streams[name] = StreamEntry(
                name=name,
                config=record.config,
                created_ns=record.created_ns,
                uid=record.uid,
                revision=item.mod_revision,
                keys=self.keys(name),
                transform=stream_transform(record.config),
                updated_ns=record.updated_ns,
            )
            for subject in record.config.subjects:
                self._subjects.insert(subject, name)
        for name in list(self._views):
            kept = streams.get(name)
            if kept is None or kept.uid != self._views[name].uid:
                self._views.pop(name).close()
        self.streams = streams
        self._by_subject = {}
        self.generation += 1

    def selected(self, name: str, keep: Callable[[StreamEntry], bool]) -> list[StreamEntry]:
        """The streams `keep` selects, worked out again only when the catalog changed.

        For background passes that concern a few streams of many (schedules, expiry): each
        tick then costs what the selected streams cost, not a look at every stream of the
        group. `name` keys the cache, one per kind of pass.
        """
        cached = self._selections.get(name)
        if cached is None or cached[0] != self.generation:
            cached = (self.generation, [e for e in self.streams.values() if keep(e)])
            self._selections[name] = cached
        return cached[1]

    def streams_colliding(self, subject: str) -> set[str]:
        """The streams with a subject that collides with `subject` (it may hold wildcards)."""
        return set(self._subjects.colliding(subject))

    def overlapping(self, cfg: StreamConfig) -> str | None:
        """Another stream with a subject that collides with one of `cfg`'s, if any."""
        for subject in cfg.subjects:
            for name in self._subjects.colliding(subject):
                if name != cfg.name:
                    return name
        return None

    def cached_view(self, stream: str) -> StreamView | None:
        return self._views.get(stream)

    def drop_view(self, stream: str) -> None:
        view = self._views.pop(stream, None)
        if view is not None:
            view.close()

    def view_lock(self, stream: str) -> asyncio.Lock:
        lock = self._view_locks.get(stream)
        if lock is None:
            lock = self._view_locks[stream] = asyncio.Lock()
        return lock

    async def view(self, stream: str, state_item: Item | None = None) -> StreamView | None:
        """The stream's view, brought up to date; None if the stream has no state."""
        keys = self.keys(stream)
        if state_item is None:
            state_item = await self.meta.get(keys.state)
            if state_item is None:
                return None
        async with self.view_lock(stream):
            try:
                return await self.view_locked(stream, state_item)
            except StreamGone:
                return None

    async def view_locked(self, stream: str, state_item: Item) -> StreamView:
        """Like `view`, for a caller that already holds the stream's view lock: the view at
        the state of `state_item` or a later one."""
        view = self._views.get(stream)
        if view is None:
            entry = self.streams.get(stream)
            storage = entry.config.storage if entry is not None else "file"
            view = load_view(self.keys(stream), state_item, self.cache, storage)
            self._views[stream] = view
        else:
            catch_up(view, state_item)
        return view

    async def fill(self, missing: Missing) -> None:
        """Read what a question found missing in a view (see `stream.view`)."""
        await self._fill(self.meta, missing)

    async def _fill(self, meta: MetadataStore, missing: Missing) -> None:
        await fill(meta, missing.view, missing.need, self.directories)

    async def answer(self, fn: Callable[[], T]) -> T:
        """`fn()`, a question asked of views, reading what it finds missing until it is
        answered. What it reads stays held (not dropped from the cache) until it is."""
        with self.cache.hold():
            while True:
                try:
                    return fn()
                except Missing as missing:
                    await self.fill(missing)

    async def answer_async(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Like `answer`, for questions that wait for something else too: `fn` is run again
        from its start after each read, so it must change nothing before its questions are
        answered."""
        with self.cache.hold():
            while True:
                try:
                    return await fn()
                except Missing as missing:
                    await self.fill(missing)

    async def ask(self, stream: str, fn: Callable[[StreamView], Awaitable[T]]) -> T:
        """`fn(view)`, a question asked of the stream's view, answered as of the stream's state
        now and with the catalog brought up to date, in one read of metadata where the view
        lacks one thing (a page of its index, a subject's record).

        The catalog's marker and the stream's state ride with the first read of what the
        question finds missing (`Riders`); a question that finds nothing missing has them read
        after it, and is asked again if the state moved meanwhile. A view not opened yet starts
        from a state that knows nothing (`_unread_state`), which that first read replaces.
        `fn` is run again from its start after each read, as in `answer_async`. Raises
        `StreamGone` when the stream does not exist.
        """
        if stream not in self.streams:
            # Perhaps created by another agent since this catalog was read.
            await self.refresh()
        entry = self.streams.get(stream)
        if entry is None:
            raise StreamGone(stream)
        keys = self.keys(stream)
        view = self._views.get(stream)
        opened = view is None
        if view is None:
            view = StreamView(_unread_state(entry.uid), 0, self.cache, keys, entry.config.storage)
        riders = Riders(self.meta, [Get(catalog_key(self.group)), Get(keys.state)])
        kept = not opened
        try:
            try:
                answer = await self._ask_current(stream, view, fn, riders)
            finally:
                # The marker read with the state, or with its absence (the stream deleted).
                if riders.found is not None:
                    await self.take_marker(riders.found.item(0))
            kept = kept or self._keep_opened(stream, view)
            return answer
        finally:
            if not kept:
                view.close()

    async def _ask_current(
        self,
        stream: str,
        view: StreamView,
        fn: Callable[[StreamView], Awaitable[T]],
        riders: Riders,
    ) -> T:
        """`fn(view)`, reading what it finds missing through `riders`, until it is answered at
        a state of the stream no older than the one `riders` found. A failure counts only at
        that state too: a view behind the stream may name an object that compaction or erase
        has since replaced and the janitor deleted."""
        with self.cache.hold():
            while True:
                try:
                    answer = await fn(view)
                except Missing as missing:
                    await self._fill(riders, missing)
                    continue
                except Exception:
                    if await self._caught_up(stream, view, riders):
                        raise
                    continue
                if await self._caught_up(stream, view, riders):
                    return answer

    async def _caught_up(self, stream: str, view: StreamView, riders: Riders) -> bool:
        """Whether `view` holds the stream's state as `riders` found it; if not, it takes that
        state, to be asked again (raises `StreamGone` if the stream has none)."""
        state_item = (await riders.read()).item(1)
        if state_item is None:
            raise StreamGone(stream)
        if state_item.mod_revision <= view.state_rev:
            return True
        catch_up(view, state_item)
        return False

    def _keep_opened(self, stream: str, view: StreamView) -> bool:
        """Keep `view`, opened by `ask`, as the stream's, unless another was meanwhile (or is
        being, under the view lock), or the catalog now has another stream of that name;
        whether it was kept."""
        entry = self.streams.get(stream)
        if (
            stream in self._views
            or self.view_lock(stream).locked()
            or entry is None
            or entry.uid != view.uid
        ):
            return False
        self._views[stream] = view
        return True


def _unread_state(uid: str) -> StreamState:
    """The state of a view opened before its stream's state is read: any sequence may be live
    and none is known deleted, so that a get asks for the page holding its message first;
    subject records are asked for by name. The first read of what a question finds missing
    brings the stream's state with it, which replaces this one whole before what was read is
    kept: its tombstones and never-expiring messages are read again if it has any (their
    revisions here are ones no state has). A question that reads nothing is asked again of the
    stream's state."""
    return StreamState(
        uid=uid, first_seq=1, last_seq=UNREAD_LAST, tomb_rev=-1, never_rev=-1, subject_records=1
    )
