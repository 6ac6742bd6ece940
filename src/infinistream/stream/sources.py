"""A stream's sources: messages of other streams stored as the stream's own, each with the
`Nats-Stream-Source` header saying where it came from, as nats-server writes it:
`<origin> <origin sequence> <filter> <destination> <original subject> <origin identity>`.

Sourced messages take the stream's next sequences like any publish (deduplication and limits
apply; the origin's `Nats-Expected-*` and `Nats-Batch-*` headers do not). Where each source
resumes is read from the stream itself, as nats-server's `startingSequenceForSources` does:
the last stored message of each source says its last sequence copied. The copier holds that
in memory while it runs and reads it again when it starts (after a restart, or on taking over
from another agent), so nothing is copied twice or skipped across either. The header's last
field, the origin's identity, tells an origin deleted and made again under its name from the
one copied so far: the new one is copied from its start, as nats-server does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from infinistream.jetstream.api import StreamSource
from infinistream.jetstream.identity import stream_identity
from infinistream.protocol import append_header, header_value, remove_header, remove_header_prefix
from infinistream.stream.catalog import Catalog, StreamEntry
from infinistream.stream.counters import STREAM_SOURCE, CounterIncrements
from infinistream.stream.mirror import (
    MAX_COPY,
    Copied,
    OriginCatalogs,
    SubjectFilter,
    origin_catalog,
    read_from,
    start_of,
)
from infinistream.stream.origins import source_identity
from infinistream.stream.reader import MessageReader
from infinistream.stream.upstream import UpstreamFeeds
from infinistream.stream.view import StreamView
from infinistream.stream.write_buffer import WriteBuffer

# Messages read back from the end of the stream, per pass, looking for each source's last.
SCAN_BATCH = 1_000


@dataclass(frozen=True, slots=True)
class SourcedUpTo:
    """Where a source stands: the last origin sequence copied, and the identity of the origin
    stream it came from ("": not known, as for an origin on another server)."""

    seq: int
    origin: str = ""

    def of(self, origin: str) -> SourcedUpTo | None:
        """This point if it was reached in the origin stream named `origin` (or either is not
        known); None if that origin has been made again since (nothing of it copied yet)."""
        return None if self.origin and origin and self.origin != origin else self


def parse_source_header(value: bytes) -> tuple[str, SourcedUpTo] | None:
    """(source identity, where it stands) of a `Nats-Stream-Source` value (streamAndSeq); None
    if it is not one nats-server would read."""
    fields = value.decode(errors="replace").split(" ")
    if len(fields) < 4 or not fields[1].isdigit():
        return None
    origin = fields[5] if len(fields) >= 6 else ""
    return f"{fields[0]} {fields[2]} {fields[3]}", SourcedUpTo(int(fields[1]), origin)


def sourced_headers(
    headers: bytes, identity: str, seq: int, subject: str, origin: str = ""
) -> bytes:
    """The headers a sourced copy is stored with (processInboundSourceMsg's); `origin` is the
    origin stream's identity, left out where it is not known."""
    block = headers or None
    if block:
        block = remove_header(block, STREAM_SOURCE)
        block = remove_header_prefix(block, b"Nats-Expected-")
        block = remove_header_prefix(block, b"Nats-Batch-")
    name, filters, destinations = identity.split(" ", 2)
    value = f"{name} {seq} {filters} {destinations} {subject}"
    if origin:
        value += f" {origin}"
    return append_header(block, STREAM_SOURCE, value.encode())


@dataclass(eq=False)
class SourceCopier:
    """Copies every source of a stream, one pass at a time."""

    catalog: Catalog
    reader: MessageReader
    write_buffer: WriteBuffer
    # Origins on running NATS servers (none: this agent has no upstreams).
    feeds: UpstreamFeeds | None = None
    # A counter stream takes what it sources as its origins' totals (stream.counters).
    counters: CounterIncrements | None = None
    # Origins in other accounts of this agent (none: only this account's).
    others: OriginCatalogs | None = None
    # Per stream: where each source stands, while this copier runs it.
    _resume: dict[str, dict[str, SourcedUpTo]] = field(default_factory=dict, init=False)

    def copied(self, name: str, identity: str) -> int | None:
        """The last origin sequence of a source copied into stream `name` (None: this
        copier does not run it)."""
        resume = self._resume.get(name)
        if resume is None:
            return None
        point = resume.get(identity)
        return 0 if point is None else point.seq

    def forget(self, name: str) -> None:
        """Read the resume points from the stream again before the next pass (another agent
        may have copied meanwhile)."""
        self._resume.pop(name, None)

    async def copy(self, name: str, sources: list[StreamSource]) -> dict[str, Copied]:
        """One pass of each source into stream `name`; what each did, by identity."""
        view = await self.catalog.view(name)
        if view is None:
            return {}
        resume = self._resume.get(name)
        if resume is None:
            resume = self._resume[name] = await self._resume_points(view, sources)
        done: dict[str, Copied] = {}
        for src in sources:
            identity = source_identity(src)
            point = resume.get(identity)
            upstream = self.feeds.upstream_of(src) if self.feeds is not None else None
            origin_last: int | None = None
            origin_id = ""
            if upstream is not None:
                last = point.seq if point else 0
                assert self.feeds is not None
                key = (name, identity)
                messages, lag = await self.feeds.read(
                    key, upstream, src, last + 1 if last else 0, MAX_COPY
                )
            else:
                catalog = origin_catalog(self.catalog, self.others, src, mirror=False)
                origin = None if catalog is None else await catalog.view(src.name)
                origin_entry = None if catalog is None else catalog.streams.get(src.name)
                if catalog is None or origin is None or origin_entry is None:
                    continue
                origin_id = stream_identity(origin_entry.created_ns)
                point = point.of(origin_id) if point else None
                last = point.seq if point else 0
                start = max(last + 1, origin.first_seq) if last else start_of(src, origin)
                messages = await read_from(catalog, self.reader, origin, start, MAX_COPY)
                lag, origin_last = 0, origin.last_seq
            taken = SubjectFilter.of(src)
            copied = 0
            entry = self.catalog.streams.get(name)
            for msg in messages:
                subject = taken.subject(msg.subject)
                if subject is not None:
                    headers = sourced_headers(
                        msg.headers, identity, msg.seq, msg.subject, origin_id
                    )
                    self._store(name, entry, subject, headers, msg.data)
                    copied += 1
            if messages:
                await self.write_buffer.settle()
                if self.counters is not None:
                    await self.counters.drained(name)
                point = resume[identity] = SourcedUpTo(messages[-1].seq, origin_id)
            if origin_last is not None:
                lag = max(0, origin_last - (point.seq if point else 0))
            done[identity] = Copied(copied, lag)
        return done

    def _store(
        self, name: str, entry: StreamEntry | None, subject: str, headers: bytes, data: bytes
    ) -> None:
        """Store a sourced message; a counter stream takes it as its origin's total."""
        counters = self.counters
        if entry is not None and entry.config.allow_msg_counter and counters is not None:
            cfg = entry.config
            if counters.publish(name, cfg, subject, headers, data, None, sourced=True):
                return
        self.write_buffer.append(name, subject, headers, data, None)

    async def _resume_points(
        self, view: StreamView, sources: list[StreamSource]
    ) -> dict[str, SourcedUpTo]:
        """Each source's last origin sequence stored in the stream, read back from its end
        (startingSequenceForSources) until every source is found or the stream ends."""
        wanted = {source_identity(s) for s in sources}
        found: dict[str, SourcedUpTo] = {}
        seq = view.last_seq
        while seq >= view.first_seq and len(found) < len(wanted):
            low = max(view.first_seq, seq - SCAN_BATCH + 1)
            for s in range(seq, low - 1, -1):
                msg = await self.catalog.answer_async(
                    lambda s=s: self.reader.read_message(view, s)  # type: ignore[misc]
                )
                if msg is None or not msg.headers:
                    continue
                value = header_value(msg.headers, STREAM_SOURCE)
                parsed = parse_source_header(value) if value else None
                if parsed is not None and parsed[0] in wanted and parsed[0] not in found:
                    found[parsed[0]] = parsed[1]
            seq = low - 1
        return found
