"""Schedules fire when they are due, whichever agent is up: the pass that publishes what they
produce.

When each schedule is next due lives in metadata (`s/` keys, written with the schedule's
message and again with each message it produces), so a restart loses none and any agent can
act on one. Every agent runs this pass when a schedule falls due, on a timer armed from the
first `s/` key of each stream and woken by commits that may bring it nearer (stream.due), as
every agent runs the expiry pass (stream.expiry), and the same two things make each due time
produce one message however many agents run it: what the pass publishes goes through the
write buffer marked with the entry it fires (`Publish.fires`), and the commit takes it only
while that entry is still there and the schedule is still its subject's last message,
deleting the entry (and writing the next one) in the same compare-and-set transaction. A
second agent's copy, or this agent's own copy from an earlier pass still in flight, is then
refused, and nobody is told.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from infinistream.stream.catalog import StreamEntry
from infinistream.stream.changes import Changes
from infinistream.stream.due import DuePass, DueWork
from infinistream.stream.records import due_from_key, seq_from_key
from infinistream.stream.schedules import Produced, produce, source_of
from infinistream.stream.view import StreamView

log = logging.getLogger(__name__)

# The pass starts this long before a schedule is due: it reads the schedule and builds what it
# publishes first, then hands it to the write buffer at the due time, so the message is stored
# a PUT and a commit after it, not a read of the schedule's message more.
LEAD_NS = 20_000_000
# Schedule entries taken per stream and pass; the next pass takes the rest.
MAX_DUE = 1_000
# A message produced by this agent that has not committed after this long (its flush failed)
# is produced again.
RETRY_NS = 10_000_000_000


@dataclass(eq=False)
class Scheduler(DuePass):
    lead_ns: int = field(default=LEAD_NS, kw_only=True)
    # Entries this agent produced a message for, and when: not again while it is in flight.
    _in_flight: dict[str, int] = field(init=False, default_factory=dict)

    def due_work(self) -> DueWork:
        return DueWork("schedules", _holds_schedules, self.next_due, self._fire_entry, self.lead_ns)

    async def fire_once(self) -> None:
        """Every schedule due now: fired (for tests; `run` does this when they fall due)."""
        await self.timer.run_due()

    async def next_due(self, entry: StreamEntry) -> int:
        """When the stream's first schedule is next due (0: it holds none)."""
        first = await self.meta.range(entry.keys.schedule_prefix, limit=1, keys_only=True)
        return due_from_key(first[0].key) if first else 0

    async def _fire_entry(self, entry: StreamEntry) -> None:
        await self._fire(entry.name, entry)

    async def _fire(self, name: str, entry: StreamEntry) -> None:
        now = self.clock()
        keys = entry.keys
        items = await self.meta.range(
            keys.schedule_prefix,
            end=keys.schedule(now + self.lead_ns + 1),
            limit=MAX_DUE,
            keys_only=True,
        )
        due = [item.key for item in items]
        still_due = set(due)
        self._in_flight = {
            key: at
            for key, at in self._in_flight.items()
            if not key.startswith(keys.prefix) or (key in still_due and now - at < RETRY_NS)
        }
        if not due:
            return
        view = await self.catalog.view(name)
        if view is None:
            return
        spent: list[str] = []
        for key in due:
            if key in self._in_flight:
                continue
            due_at = due_from_key(key)
            at = max(now, due_at)
            produced = await self.catalog.answer_async(
                lambda key=key, at=at: self._produce(view, key, at)  # type: ignore[misc]
            )
            if produced is None:
                spent.append(key)
                continue
            early = due_at - self.clock()
            if early > 0:
                # Prepared ahead (LEAD_NS): published at its time, not before.
                await asyncio.sleep(early / 1e9)
            self._in_flight[key] = now
            self.write_buffer.append(
                name, produced.target, produced.headers, produced.data, None, fires=key
            )
        if spent:
            await self.committer.change_stream(name, _forgetting(spent))

    async def _produce(self, view: StreamView, key: str, now: int) -> Produced | None:
        """The message the schedule of entry `key` publishes now; None if the entry is spent:
        its message is gone, no longer its subject's last, or holds no valid schedule (none
        of which can change back, so the entry can go)."""
        seq = seq_from_key(key)
        if not view.is_live(seq):
            return None
        subject = view.subject_of(seq)
        if view.last_for(subject) != seq:
            return None
        msg = await self.reader.read_message(view, seq)
        if msg is None:
            return None
        source: tuple[bytes, bytes] | None = None
        source_subject = source_of(msg.headers)
        if source_subject:
            last = view.last_for(source_subject)
            # Without a message of its own there, the schedule publishes itself.
            latest = await self.reader.read_message(view, last) if last else None
            if latest is not None:
                source = (latest.headers, latest.data)
        return produce(subject, msg.headers, msg.data, due_from_key(key), source, now)


def _forgetting(keys: list[str]) -> Callable[[StreamEntry, Changes], None]:
    def plan(_: StreamEntry, changes: Changes) -> None:
        for key in keys:
            changes.forget(key)

    return plan


def _holds_schedules(entry: StreamEntry) -> bool:
    return entry.config.allow_msg_schedules and not entry.config.sealed
