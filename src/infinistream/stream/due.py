"""Background passes that run when something falls due, not on a poll.

Expiry and message schedules keep their due times in metadata (`x/` and `s/` keys, and the
timestamps of the oldest messages for max_age). A `DueTimer` reads each selected stream's next
due time, sleeps until the earliest, runs its pass for the streams that are due, and reads
their due times again. It reads a stream's due time again also when a commit may have brought
it nearer: this agent's own commits (`DueWakeups.committed`, told by the write buffer) at once,
other agents' through the metadata watch (`DueWakeups.run`, one watch shared by every timer of
the group, the same kind of watch the consumers wake on), which names no key: the timer then
reads the state keys of its streams and looks again at those that moved.

A due time that a pass did not clear (a delete marker or a scheduled message still in flight
through the write buffer, or a message that cannot be read) is retried after a pause that
doubles up to `MAX_RETRY_NS`, or at once when a commit moves it: a stuck entry costs a pass
now and then, never a busy loop. Every due time is also read again every
`RESCAN_SECONDS`, a safety net for what no commit announces (a config change made through
another agent's API, the catalog read by the poll).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import KW_ONLY, InitVar, dataclass, field

from infinistream.metadata.kv import ChangeWatch, MetadataStore
from infinistream.stream.catalog import Catalog, StreamEntry
from infinistream.stream.committer import Committer
from infinistream.stream.reader import MessageReader
from infinistream.stream.watching import other_commits
from infinistream.stream.write_buffer import WriteBuffer

log = logging.getLogger(__name__)

# How long the loop sleeps at most, to see a catalog change made on this agent (a stream
# created or reconfigured: no I/O, the catalog's generation is compared).
CATALOG_CHECK_SECONDS = 0.25
# Every due time read again at least this often, whatever woke the timer.
RESCAN_SECONDS = 10.0
# Another agent's commits are looked at no more often than this: new due times are a TTL (a
# second at least) or max_age after a commit, so a wake this much later still arms in time.
REMOTE_GAP_SECONDS = 0.02
# A due time a pass left in place is tried again after this, doubling up to MAX_RETRY_NS.
FIRST_RETRY_NS = 20_000_000
MAX_RETRY_NS = 1_000_000_000
# A pass that raised is tried again after this.
ERROR_RETRY_NS = 1_000_000_000
# While no timer has streams to watch, the shared watch rests; it looks again this often.
IDLE_SECONDS = 0.25

NextDue = Callable[[StreamEntry], Awaitable[int]]
RunDue = Callable[[StreamEntry], Awaitable[None]]


@dataclass(frozen=True)
class DueWork:
    """What one kind of pass is: the streams it concerns, when each is next due (0: never,
    as far as metadata says now), and the pass itself, run `lead_ns` before the due time (a
    pass that prepares its work ahead and then waits for the due time itself)."""

    kind: str
    selects: Callable[[StreamEntry], bool]
    next_due: NextDue
    run: RunDue
    lead_ns: int = 0


@dataclass(slots=True)
class _Stream:
    """What a timer knows of one stream."""

    # When it is next due (ns since the epoch), 0 if nothing is.
    due: int = 0
    # The revision of its state key when `due` was read (-1: not read).
    state_rev: int = -1
    # Not passed again before this (ns), and the pause after the next pass that leaves its
    # due time in place.
    not_before: int = 0
    retry: int = FIRST_RETRY_NS
    dirty: bool = True


@dataclass(eq=False)
class DueTimer:
    """Runs `work.run` for each selected stream of the group when it falls due."""

    meta: MetadataStore
    catalog: Catalog
    work: DueWork
    clock: Callable[[], int] = time.time_ns
    rescan_seconds: float = RESCAN_SECONDS
    _streams: dict[str, _Stream] = field(default_factory=dict, init=False)
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _remote: bool = field(default=False, init=False)
    _generation: int = field(default=-1, init=False)
    _rescan_at: float = field(default=0.0, init=False)
    _remote_at: float = field(default=0.0, init=False)

    @property
    def watching(self) -> bool:
        """Whether other agents' commits matter to this timer now."""
        return bool(self._streams)

    def committed(self, streams: Iterable[str]) -> None:
        """This agent committed to `streams`: their due times may have moved."""
        woken = False
        for name in streams:
            known = self._streams.get(name)
            if known is not None:
                known.dirty = True
                woken = True
        if woken:
            self._wake.set()

    def remote_changed(self) -> None:
        """Another agent may have committed to the group."""
        self._remote = True
        self._wake.set()

    async def run(self) -> None:
        while True:
            try:
                wait = await self._round()
            except Exception:
                log.exception("%s: reading due times failed", self.work.kind)
                wait = ERROR_RETRY_NS / 1e9
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
            self._wake.clear()

    async def run_due(self) -> int:
        """Run the pass of every stream due now; how many ran (for tests and benchmarks)."""
        await self._refresh()
        return await self._run_due(self.clock())

    async def _round(self) -> float:
        """Read what changed, run what is due; seconds until something may be due next."""
        await self._refresh()
        now = self.clock()
        if await self._run_due(now):
            return 0.0
        lead = self.work.lead_ns
        wake_at = min(
            (max(s.due - lead, s.not_before) for s in self._streams.values() if s.due),
            default=0,
        )
        wait = CATALOG_CHECK_SECONDS
        if wake_at:
            wait = min(wait, max(0.0, (wake_at - now) / 1e9))
        if self._remote:
            # Woken by another agent while a look at its commits was not yet due.
            wait = min(wait, max(0.0, self._remote_at + REMOTE_GAP_SECONDS - time.monotonic()))
        return wait

    async def _refresh(self) -> None:
        """Bring the known due times up to date with the catalog and the commits seen."""
        selected = self.catalog.selected(self.work.kind, self.work.selects)
        names = {entry.name for entry in selected}
        mono = time.monotonic()
        if self.catalog.generation != self._generation or mono >= self._rescan_at:
            self._generation = self.catalog.generation
            self._rescan_at = mono + self.rescan_seconds
            self._streams = {name: self._streams.get(name, _Stream()) for name in names}
            for stream in self._streams.values():
                stream.dirty = True
        if self._remote and mono - self._remote_at >= REMOTE_GAP_SECONDS:
            self._remote = False
            self._remote_at = mono
            await self._mark_moved(selected)
        for entry in selected:
            known = self._streams.get(entry.name)
            if known is not None and known.dirty:
                await self._read_due(entry, known)

    async def _mark_moved(self, selected: list[StreamEntry]) -> None:
        """Mark dirty the streams whose state another agent changed since their due time was
        read (one read of every selected stream's state key)."""
        if await self.catalog.refresh():
            return  # the next round reads every due time again
        keys = {entry.keys.state: entry.name for entry in selected}
        items = await self.meta.get_many(list(keys))
        for key, name in keys.items():
            item = items.get(key)
            known = self._streams.get(name)
            rev = item.mod_revision if item is not None else 0
            if known is not None and rev != known.state_rev:
                known.dirty = True

    async def _read_due(self, entry: StreamEntry, known: _Stream) -> None:
        state = await self.meta.get(entry.keys.state)
        known.state_rev = state.mod_revision if state is not None else 0
        try:
            due = await self.work.next_due(entry)
        except Exception:
            log.exception(
                "%s: reading the due time of stream %s failed", self.work.kind, entry.name
            )
            due = self.clock() + ERROR_RETRY_NS
        if due != known.due:
            # A new due time: whatever held the old one back is over.
            known.retry = FIRST_RETRY_NS
            known.not_before = 0
        known.due = due
        known.dirty = False

    async def _run_due(self, now: int) -> int:
        ran = 0
        horizon = now + self.work.lead_ns
        for name, known in list(self._streams.items()):
            if not known.due or known.due > horizon or known.not_before > now:
                continue
            entry = self.catalog.streams.get(name)
            if entry is None:
                continue
            ran += 1
            before = known.due
            try:
                await self.work.run(entry)
            except Exception:
                log.exception("%s: the pass of stream %s failed", self.work.kind, name)
                known.not_before = self.clock() + ERROR_RETRY_NS
                continue
            await self._read_due(entry, known)
            if known.due and known.due <= before:
                # Still due: what the pass did is in flight, or cannot be done yet.
                known.not_before = self.clock() + known.retry
                known.retry = min(known.retry * 2, MAX_RETRY_NS)
        return ran


@dataclass(eq=False)
class DueWakeups:
    """Tells the due timers of one group about commits: this agent's at once, other agents'
    through one metadata watch on the group, waited on only while some timer has streams."""

    watch: ChangeWatch
    timers: list[DueTimer] = field(default_factory=list)

    def add(self, timer: DueTimer) -> DueTimer:
        self.timers.append(timer)
        return timer

    def committed(self, streams: list[str]) -> None:
        """The write buffer committed to `streams`."""
        for timer in self.timers:
            timer.committed(streams)

    async def run(self) -> None:
        try:
            while True:
                if not any(timer.watching for timer in self.timers):
                    await asyncio.sleep(IDLE_SECONDS)
                    continue
                if await other_commits(
                    self.watch, CATALOG_CHECK_SECONDS, retry_after=IDLE_SECONDS, log=log
                ):
                    for timer in self.timers:
                        timer.remote_changed()
        finally:
            await self.watch.close()


@dataclass(eq=False)
class DuePass:
    """A pass its own `DueTimer` runs when it falls due (the base of the expiry and schedule
    passes, which say what they do in `due_work`). Given the group's shared wakeups it joins
    them; without (a lone pass, as in tests) it watches the group itself."""

    meta: MetadataStore
    catalog: Catalog
    committer: Committer
    reader: MessageReader
    # What a pass publishes (delete markers, produced messages) goes like any message, with
    # the others of the next flush.
    write_buffer: WriteBuffer
    shared_wakeups: InitVar[DueWakeups | None] = None
    _: KW_ONLY
    clock: Callable[[], int] = time.time_ns
    timer: DueTimer = field(init=False)
    wakeups: DueWakeups = field(init=False)
    _own_wakeups: bool = field(init=False)

    def __post_init__(self, shared_wakeups: DueWakeups | None) -> None:
        self.timer = DueTimer(self.meta, self.catalog, self.due_work(), clock=self.clock)
        self._own_wakeups = shared_wakeups is None
        self.wakeups = (
            shared_wakeups
            if shared_wakeups is not None
            else DueWakeups(self.meta.watch(f"{self.catalog.group}/"))
        )
        self.wakeups.add(self.timer)

    def due_work(self) -> DueWork:
        """What the timer runs, and for which streams."""
        raise NotImplementedError

    async def run(self) -> None:
        if self._own_wakeups:
            await asyncio.gather(self.timer.run(), self.wakeups.run())
        else:
            await self.timer.run()
