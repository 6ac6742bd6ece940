"""A mirror's write path: copies of its origin's messages, each keeping the origin's sequence
and timestamp, and the gaps of what the origin deleted skipped.

One pass copies what the origin holds past the mirror's last sequence, up to `MAX_COPY`
messages. The mirror's own last sequence is the resume point (nats-server's too): nothing is
kept beside the stream, so a restart, or another agent taking over, carries on from what the
mirror holds. Each copy is committed only as the mirror's next sequence
(`publish_rules.plan_mirrored`), so a copy made twice (two copiers for a moment, or a pass
retried after its flush failed) is stored once, and nothing is skipped.

The origin is read through the library (the catalog's view and the message reader), not as a
consumer over the wire: in one agent group every agent reads every stream's objects, so a
consumer would only add a hop and an acknowledgement protocol to the same reads.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from infinistream.jetstream.api import StreamSource
from infinistream.jetstream.subjects import matches
from infinistream.jetstream.times import parse_go_time
from infinistream.jetstream.transforms import SubjectTransform, compile_transform
from infinistream.stream.catalog import Catalog
from infinistream.stream.committer import Committer
from infinistream.stream.reader import MessageReader, StoredMessage
from infinistream.stream.upstream import UpstreamFeeds
from infinistream.stream.view import StreamView, seq_from_time
from infinistream.stream.write_buffer import WriteBuffer

# Messages read and copied in one pass (the next pass copies the rest).
MAX_COPY = 2_000


@dataclass(frozen=True, slots=True)
class SubjectFilter:
    """Which of an origin's messages a mirror or source takes, and the subject each gets:
    its `filter_subject`, or its subject transforms (the first whose source matches)."""

    filters: tuple[tuple[str, SubjectTransform | None], ...]

    @classmethod
    def of(cls, origin: StreamSource) -> SubjectFilter:
        if origin.subject_transforms:
            return cls(
                tuple(
                    (t.src or ">", compile_transform(t.src or ">", t.dest) if t.dest else None)
                    for t in origin.subject_transforms
                )
            )
        if origin.filter_subject:
            return cls(((origin.filter_subject, None),))
        return cls(())

    def subject(self, subject: str) -> str | None:
        """The subject the message is stored under; None if it is not taken."""
        if not self.filters:
            return subject
        for src, transform in self.filters:
            if matches(src, subject):
                if transform is None:
                    return subject
                return transform.transform(subject) or subject
        return None


class OriginCatalogs(Protocol):
    """Where origins in other accounts of this agent are read from."""

    def catalog_of(self, origin: StreamSource, *, mirror: bool) -> Catalog | None:
        """The catalog of the account an external origin is imported from (its store is
        read directly, as this account's own is); None if the imports reach none."""
        ...


def origin_catalog(
    own: Catalog, others: OriginCatalogs | None, origin: StreamSource, *, mirror: bool
) -> Catalog | None:
    """The catalog an origin stream is in: this account's, or the exporting account's."""
    if origin.external is None:
        return own
    return None if others is None else others.catalog_of(origin, mirror=mirror)


@dataclass(frozen=True, slots=True)
class Copied:
    """What a pass did: messages copied, and how far the origin is ahead still (its lag)."""

    copied: int
    lag: int


def start_of(origin: StreamSource, view: StreamView) -> int:
    """The first origin sequence to copy into a stream that holds nothing of it yet."""
    if origin.opt_start_seq:
        return max(origin.opt_start_seq, view.first_seq)
    if origin.opt_start_time:
        return seq_from_time(view, parse_go_time(origin.opt_start_time))
    return view.first_seq


async def read_from(
    catalog: Catalog, reader: MessageReader, view: StreamView, start: int, limit: int
) -> list[StoredMessage]:
    """Up to `limit` live messages of the origin `view` from `start`, in order."""
    seqs: list[int] = await catalog.answer(lambda: _live(view.live_seqs(start), limit))
    found: list[StoredMessage] = []
    for seq in seqs:
        msg = await catalog.answer_async(lambda s=seq: reader.read_message(view, s))  # type: ignore[misc]
        if msg is not None:
            found.append(msg)
    return found


def _live(seqs: Iterable[int], limit: int) -> list[int]:
    out: list[int] = []
    for seq in seqs:
        out.append(seq)
        if len(out) >= limit:
            break
    return out


@dataclass(eq=False)
class MirrorCopier:
    """Copies origins into mirrors, one pass at a time (see the module's docstring)."""

    catalog: Catalog
    committer: Committer
    reader: MessageReader
    write_buffer: WriteBuffer
    # Origins on running NATS servers (none: this agent has no upstreams).
    feeds: UpstreamFeeds | None = None
    # Origins in other accounts of this agent (none: only this account's).
    others: OriginCatalogs | None = None

    async def copy(self, name: str, origin: StreamSource) -> Copied:
        """One pass of mirror `name` from its origin (in this group, or on an upstream)."""
        mirror = await self.catalog.view(name)
        if mirror is None:
            return Copied(0, 0)
        empty = not mirror.msgs and not mirror.last_seq
        upstream = self.feeds.upstream_of(origin) if self.feeds is not None else None
        if upstream is not None:
            assert self.feeds is not None
            start = 0 if empty else mirror.last_seq + 1
            key = (name, "")
            messages, lag = await self.feeds.read(key, upstream, origin, start, MAX_COPY)
            copied = await self._store(name, origin, messages)
            return Copied(copied, lag)
        catalog = origin_catalog(self.catalog, self.others, origin, mirror=True)
        source = None if catalog is None else await catalog.view(origin.name)
        if catalog is None or source is None:
            return Copied(0, 0)
        start = start_of(origin, source) if empty else mirror.last_seq + 1
        start = max(start, source.first_seq)
        messages = await read_from(catalog, self.reader, source, start, MAX_COPY)
        copied = await self._store(name, origin, messages)
        # What the origin deleted, or the filter leaves out, after its last message taken is
        # skipped only when a later message comes (nats-server's mirror sees it no sooner).
        after = await self.catalog.view(name)
        done = after.last_seq if after is not None else 0
        return Copied(copied, max(0, source.last_seq - done))

    async def _store(self, name: str, origin: StreamSource, messages: list[StoredMessage]) -> int:
        """The messages the mirror's filter takes, stored run by run of consecutive ones."""
        taken = SubjectFilter.of(origin)
        copied = 0
        run: list[tuple[StoredMessage, str]] = []
        for msg in messages:
            subject = taken.subject(msg.subject)
            if subject is None:
                continue
            if run and run[-1][0].seq + 1 != msg.seq:
                copied += await self.store_run(name, run)
                run = []
            run.append((msg, subject))
        if run:
            copied += await self.store_run(name, run)
        return copied

    async def store_run(self, name: str, run: list[tuple[StoredMessage, str]]) -> int:
        """Copies of consecutive origin sequences, after skipping to the first of them (a
        mirror of a stream on another server stores what it receives this way too)."""
        await self._skip(name, run[0][0].seq - 1)
        view = await self.catalog.view(name)
        if view is None or view.last_seq != run[0][0].seq - 1:
            return 0
        for msg, subject in run:
            self.write_buffer.append(
                name,
                subject,
                msg.headers or None,
                msg.data,
                None,
                origin_seq=msg.seq,
                stamp=msg.ts,
            )
        await self.write_buffer.settle()
        return len(run)

    async def _skip(self, name: str, last: int) -> None:
        """The mirror's last sequence moved up to `last` over what the origin deleted (or the
        mirror's filter leaves out)."""
        view = await self.catalog.view(name)
        if view is None or view.last_seq >= last:
            return
        await self.committer.change_stream(name, lambda _entry, changes: changes.skip_to(last))
