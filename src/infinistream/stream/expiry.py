"""Messages go when they are due even if nobody publishes: max_age, per-message TTLs, and the
delete markers that replace a subject's last message when it goes (subject_delete_marker_ttl).

Every agent runs the same pass when a stream falls due: a timer armed from the due times in
metadata (stream.due), the first `x/` key of the stream and the timestamp of its oldest message
that max_age concerns, woken again by commits that may bring them nearer. What the pass
removes, it removes with a compare-and-set on the stream; a marker is committed only while the
message it replaces is still its subject's last (`Publish.replaces`). So however many agents
run the pass, each message goes once and each marker is placed once. Expiry entries live in
metadata (`x/` keys, written with the message), so an agent's restart loses none and any agent
can act on them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from infinistream.stream.catalog import StreamEntry
from infinistream.stream.changes import Changes
from infinistream.stream.due import DuePass, DueWork
from infinistream.stream.limits import expire
from infinistream.stream.records import due_from_key, seq_from_key
from infinistream.stream.ttl import is_delete_marker, marker_headers
from infinistream.stream.view import StreamView

log = logging.getLogger(__name__)

# Expiry entries taken per stream and pass; the next pass takes the rest.
MAX_DUE = 10_000


@dataclass(eq=False)
class Expiry(DuePass):
    def due_work(self) -> DueWork:
        return DueWork("expiry", _expires, self.next_due, self._expire_entry)

    async def expire_once(self) -> None:
        """Every stream due now: expired (for tests; `run` does this when they fall due)."""
        await self.timer.run_due()

    async def next_due(self, entry: StreamEntry) -> int:
        """When the stream next has something to remove: its first expiry entry, or the time
        its oldest message that max_age concerns reaches max_age (0: nothing)."""
        cfg = entry.config
        due = 0
        if cfg.allow_msg_ttl:
            keys = entry.keys
            first = await self.meta.range(keys.expiry_prefix, limit=1, keys_only=True)
            if first:
                due = due_from_key(first[0].key)
        if cfg.max_age > 0:
            view = await self.catalog.view(entry.name)
            oldest = _oldest_aging(view) if view is not None else 0
            if oldest:
                aged = oldest + cfg.max_age
                due = min(due, aged) if due else aged
        return due

    async def _expire_entry(self, entry: StreamEntry) -> None:
        await self._expire(entry.name, entry)

    async def _expire(self, name: str, entry: StreamEntry) -> None:
        cfg = entry.config
        now = self.clock()
        keys = self.catalog.keys(name)
        due: list[tuple[str, int]] = []
        if cfg.allow_msg_ttl:
            items = await self.meta.range(
                keys.expiry_prefix, end=keys.expiry(now + 1), limit=MAX_DUE, keys_only=True
            )
            due = [(item.key, seq_from_key(item.key)) for item in items]
        view = await self.catalog.view(name)
        if view is None:
            return
        aged = cfg.max_age > 0 and view.msgs > 0 and view.first_ts <= now - cfg.max_age
        if not due and not aged:
            return
        markers: dict[int, str] = {}
        spent: list[int] = []
        if cfg.subject_delete_marker_ttl > 0:
            markers, spent = await self.catalog.answer_async(
                lambda: self._last_of_subjects(entry, view, due, now)
            )

        def plan(e: StreamEntry, changes: Changes) -> None:
            for key, seq in due:
                if seq in markers:
                    continue  # its marker removes it; the entry goes in a later pass
                changes.kill(seq)
                changes.forget(key)
            for seq in spent:
                changes.kill(seq)
            expire(e, changes, now)

        await self.committer.change_stream(name, plan)
        headers = marker_headers(cfg)
        for seq, subject in markers.items():
            self.write_buffer.append(name, subject, headers, b"", None, replaces=seq)

    async def _last_of_subjects(
        self, entry: StreamEntry, view: StreamView, due: list[tuple[str, int]], now: int
    ) -> tuple[dict[int, str], list[int]]:
        """Of the messages going now, those that are their subject's last: ({seq: subject}
        to replace with a marker, [markers that are themselves going, and leave nothing])."""
        candidates = {seq for _, seq in due if view.is_live(seq)}
        max_age = entry.config.max_age
        if max_age > 0:
            for seq in view.live_seqs(view.first_seq):
                if view.ts_of(seq) > now - max_age or len(candidates) >= MAX_DUE:
                    break
                if seq not in view.nevers():
                    candidates.add(seq)
        markers: dict[int, str] = {}
        spent: list[int] = []
        for seq in sorted(candidates):
            subject = view.subject_of(seq)
            if view.last_for(subject) != seq:
                continue
            msg = await self.reader.read_message(view, seq)
            if msg is None:
                continue
            if is_delete_marker(msg.headers):
                spent.append(seq)
            else:
                markers[seq] = subject
        return markers, spent


def _oldest_aging(view: StreamView) -> int:
    """The timestamp of the oldest live message that max_age removes (not one whose TTL
    says never); 0 if there is none."""
    if not view.msgs:
        return 0
    if not view.never:
        return view.first_ts
    for n, seq in enumerate(view.live_seqs(view.first_seq)):
        if seq not in view.never:
            return view.ts_of(seq)
        if n >= MAX_DUE:
            # A long run of never-expiring messages: look again later rather than walk it all.
            return view.ts_of(seq)
    return 0


def _expires(entry: StreamEntry) -> bool:
    return entry.config.max_age > 0 or entry.config.allow_msg_ttl
