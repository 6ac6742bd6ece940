"""Interest and workqueue retention: removing messages that every interested consumer is done with.

A message goes once each consumer whose filter matches it has acknowledged it (interest), or once
its one consumer has (workqueue). An interest stream also drops messages no consumer wants.
The check runs after acks are committed and after a consumer is deleted; since it only ever
removes what every consumer has finished, running it late or twice is harmless.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from infinistream.consumer.progress import Filter, acked_by
from infinistream.consumer.store import ConsumerStore
from infinistream.stream.catalog import StreamEntry
from infinistream.stream.changes import Changes
from infinistream.stream.committer import Committer

# Bound the work of one pass; the next ack or sweep continues where this one stopped.
MAX_SCAN = 100_000


class Retention:
    def __init__(self, store: ConsumerStore, committer: Committer) -> None:
        self.store = store
        self.committer = committer
        self.removed = 0

    async def apply(self, stream: str) -> int:
        entry = self.store.catalog.streams.get(stream)
        if entry is None or entry.config.retention == "limits":
            return 0
        consumers = await self.store.load_all(stream)
        filters = [(Filter(c.record.config), c.state) for c in consumers]
        reach = max((c.state.stream_seq for c in consumers), default=0)

        def plan(entry: StreamEntry, changes: Changes) -> int:
            interest = entry.config.retention == "interest"
            view = changes.view
            removed = 0
            for scanned, seq in enumerate(view.live_seqs(view.first_seq)):
                if scanned >= MAX_SCAN:
                    break
                subject = view.subject_of(seq)
                wanted = [(f, s) for f, s in filters if f.matches(subject)]
                if not wanted:
                    if interest and changes.kill(seq):
                        removed += 1
                    continue
                if seq > reach:
                    # No consumer got this far; later messages may still be unwanted ones.
                    continue
                if all(acked_by(s, f, seq, subject) for f, s in wanted) and changes.kill(seq):
                    removed += 1
            return removed

        removed = await self.committer.change_stream(stream, plan)
        self.removed += removed
        return removed


def interest_lookup(store: ConsumerStore) -> Callable[[str], Awaitable[Callable[[str], bool]]]:
    """For the committer: whether any consumer of a stream wants a subject (interest retention
    keeps nothing that no consumer wants)."""

    async def interest_in(stream: str) -> Callable[[str], bool]:
        filters = [Filter(c.record.config) for c in await store.load_all(stream)]
        return lambda subject: any(f.matches(subject) for f in filters)

    return interest_in
