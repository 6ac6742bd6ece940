"""`$JS.API.DIRECT.GET.<stream>[.<subject>]`: messages answered with themselves, as nats-server
answers a direct get: the message with its own headers and the direct get's fields after them,
a batch closed by an `EOB` status, and its 408 and 404 statuses for what it can not serve.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from itertools import islice
from typing import Final

import msgspec

from infinistream.handlers.streams import StreamApi
from infinistream.jetstream import errors
from infinistream.jetstream.api import MsgGetRequest
from infinistream.jetstream.gojson import GoJSONError, unmarshal
from infinistream.jetstream.messages import Send, status
from infinistream.jetstream.times import go_time_or_zero, parse_go_time
from infinistream.protocol import append_headers
from infinistream.stream.catalog import StreamEntry
from infinistream.stream.damage import DamagedMessage
from infinistream.stream.reader import StoredMessage
from infinistream.stream.view import StreamView, seq_from_time

# The status of a direct get whose message is damaged in object storage (InfiniStream's own:
# nats-server answers any message it can not load as not found).
MESSAGE_DAMAGED: Final = "Message Damaged"
NOT_FOUND: Final = "Message Not Found"
# What a batch sends at most without a max_bytes of its own (nats-server's).
BATCH_BYTES: Final = 64 * 1024 * 1024
# The most subjects a multi-last request answers for (nats-server's maxAllowedResponses).
MULTI_LAST_LIMIT: Final = 1024
NO_RESULTS: Final = "No Results"


@dataclass(eq=False)
class DirectGet:
    """The direct gets of one account's streams."""

    streams: StreamApi
    send: Send

    async def serve(self, tokens: list[str], reply: str, body: bytes) -> bool:
        """Answer a direct get on `tokens` (its subject split on dots) to `reply`. False where
        nothing serves the subject (no such stream, or one without allow_direct): nats-server
        has no subscription there."""
        if len(tokens) < 5:
            return False
        catalog = self.streams.catalog
        req = _request(tokens, body)
        one = (
            not isinstance(req, str)
            and not req.multi_last
            and (req.batch <= 0 or bool(req.last_by_subj))
        )
        if not one or _serving(catalog.streams, tokens[4]) is None:
            # A single get reads the catalog's marker with the message's index (`_one`); the
            # others, and a stream this catalog does not serve (yet), read it first.
            await catalog.refresh()
        entry = _serving(catalog.streams, tokens[4])
        if entry is None:
            return False
        if isinstance(req, str):
            self.send(reply, status(408, req), b"")
            return True
        try:
            if req.multi_last:
                await self._multi_last(entry.name, req, reply)
            elif one:
                return await self._one(tokens[4], entry.name, req, reply)
            else:
                await self._batch(entry.name, req, reply)
        except errors.ApiError:
            self.send(reply, status(404, NOT_FOUND), b"")
        except DamagedMessage:
            self.send(reply, status(500, MESSAGE_DAMAGED), b"")
        return True

    async def _one(self, asked: str, name: str, req: MsgGetRequest, reply: str) -> bool:
        """The message of a single get to stream `asked`, served by stream `name`; False (no
        answer) when the catalog, read again with the message, no longer serves `asked`."""
        try:
            msg = await self.streams.find(name, req)
        except errors.ApiError:
            msg = None
        # The catalog as read with the message: the stream may be gone, or its direct gets off.
        if _serving(self.streams.catalog.streams, asked) is None:
            return False
        if msg is None:
            self.send(reply, status(404, NOT_FOUND), b"")
            return True
        self.send(reply, None if req.no_hdr else _with_direct_headers(msg, name), msg.data)
        return True

    async def _batch(self, name: str, req: MsgGetRequest, reply: str) -> None:
        catalog = self.streams.catalog
        view = await catalog.view(name)
        seqs, pending = (
            ([], 0) if view is None else await catalog.answer(lambda: _batch_seqs(view, req))
        )
        if view is None or not seqs:
            self.send(reply, status(404, NOT_FOUND), b"")
            return
        limit = req.max_bytes or BATCH_BYTES
        sent_bytes = 0
        last = 0
        for seq in seqs:
            try:
                msg = await catalog.answer_async(
                    lambda s=seq: self.streams.reader.read_message(view, s)  # type: ignore[misc]
                )
            except DamagedMessage:
                # Left out of a batch (and reported), as if it had been deleted.
                pending -= 1
                continue
            if msg is None:
                continue
            pending -= 1
            hdr = None if req.no_hdr else _with_direct_headers(msg, name, pending, last)
            self.send(reply, hdr, msg.data)
            last = msg.seq
            sent_bytes += len(msg.subject) + len(msg.headers) + len(msg.data)
            if sent_bytes >= limit:
                break
        eob = b"NATS/1.0 204 EOB\r\nNats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n\r\n"
        self.send(reply, eob % (pending, last), b"")

    async def _multi_last(self, name: str, req: MsgGetRequest, reply: str) -> None:
        """The last message of each subject matching `multi_last`, up to a sequence or a time,
        in stream order, then an EOB that says where the answer stands (getDirectMulti)."""
        view = await self.streams.catalog.view(name)
        if view is None:
            self.send(reply, status(404, NO_RESULTS), b"")
            return
        catalog = self.streams.catalog
        up_to = await catalog.answer(lambda: _up_to(view, req))
        if up_to is None:
            self.send(reply, status(404, NO_RESULTS), b"")
            return
        seqs = await catalog.answer(lambda: _multi_last_seqs(view, req.multi_last or [], up_to))
        if seqs is None:
            self.send(reply, status(413, "Too Many Results"), b"")
            return
        if not seqs:
            self.send(reply, status(404, NO_RESULTS), b"")
            return
        limit = req.max_bytes or BATCH_BYTES
        pending, last, sent, sent_bytes = len(seqs), 0, 0, 0
        for seq in seqs:
            pending -= 1
            if seq < req.seq:
                continue
            msg = await catalog.answer_async(partial(self.streams.reader.read_message, view, seq))
            if msg is None:
                self.send(reply, status(404, NOT_FOUND), b"")
                return
            # nats-server sends a multi-last answer's headers whatever no_hdr says.
            self.send(reply, _with_direct_headers(msg, name, pending, last), msg.data)
            last = msg.seq
            sent_bytes += len(msg.subject) + len(msg.headers) + len(msg.data)
            sent += 1
            if sent_bytes >= limit or (req.batch > 0 and sent >= req.batch):
                break
        eob = b"NATS/1.0 204 EOB\r\nNats-Num-Pending: %d\r\nNats-Last-Sequence: %d\r\n"
        eob += b"Nats-UpTo-Sequence: %d\r\n\r\n"
        self.send(reply, eob % (pending, last, up_to), b"")


def _up_to(view: StreamView, req: MsgGetRequest) -> int | None:
    """The last sequence a multi-last request looks at; None where its up_to_time is at or
    before the stream's first message (nats-server's "No Results")."""
    if req.up_to_time is not None:
        seq = seq_from_time(view, parse_go_time(req.up_to_time))
        if seq <= view.first_seq:
            return None
        return seq - 1
    return req.up_to_seq or view.last_seq


def _multi_last_seqs(view: StreamView, filters: list[str], up_to: int) -> list[int] | None:
    """The last live sequence at or below `up_to` of each subject matching a filter, in order;
    None for more than nats-server answers at once."""
    subjects: set[str] = set()
    for filter_subject in filters:
        subjects.update(view.subjects_matching(filter_subject))
    if len(subjects) > MULTI_LAST_LIMIT:
        return None
    seqs = []
    for subject in subjects:
        last = view.last_for(subject)
        if last > up_to:
            last = max((s for s in view.live_seqs(0, subject) if s <= up_to), default=0)
        if last:
            seqs.append(last)
    return sorted(seqs)


def _batch_seqs(view: StreamView, req: MsgGetRequest) -> tuple[list[int], int]:
    """The live sequences a batch hands out, and how many it could (up_to_seq and up_to_time
    bound only multi_last requests in nats-server: a batch ignores them)."""
    start = req.seq
    if req.start_time is not None:
        start = seq_from_time(view, parse_go_time(req.start_time))
    filt = req.next_by_subj
    first = list(islice(view.live_seqs(start, filt), req.batch))
    return first, view.count_after(start - 1, [filt] if filt else [])


def _serving(streams: Mapping[str, StreamEntry], name: str) -> StreamEntry | None:
    """The stream that answers direct gets for stream `name`: itself if it allows them, else
    a mirror of it with `mirror_direct` (nats-server's mirrors join the origin's direct get
    queue group, so they answer while the origin is gone or elsewhere; the agent's own origin
    is as current as any mirror of it, and is asked first)."""
    entry = streams.get(name)
    if entry is not None and entry.config.allow_direct:
        return entry
    for candidate in streams.values():
        cfg = candidate.config
        if cfg.mirror_direct and cfg.mirror is not None and cfg.mirror.name == name:
            return candidate
    return None


def _request(tokens: list[str], body: bytes) -> MsgGetRequest | str:
    """What a direct get asks for, or the description of nats-server's 408 refusing it."""
    if len(tokens) > 5:
        # The subject names the message: the last one on it.
        last_by_subj = ".".join(tokens[5:])
        if not body.strip():
            return MsgGetRequest(last_by_subj=last_by_subj)
        probe = _decode(body)
        if probe is None:
            return "Malformed Request"
        # Like nats-server, refuse only fields that make no sense here: no_hdr and max_bytes
        # are kept.
        if msgspec.structs.replace(probe, no_hdr=False, max_bytes=0) != MsgGetRequest():
            return "Bad Request"
        return MsgGetRequest(last_by_subj=last_by_subj, no_hdr=probe.no_hdr)
    if not body.strip():
        return "Empty Request"
    req = _decode(body)
    if req is None:
        return "Malformed Request"
    if _asks_nothing(req):
        # nats-server: a body that names no message is an empty request too.
        return "Empty Request"
    return req if _valid(req) else "Bad Request"


def _decode(body: bytes) -> MsgGetRequest | None:
    """The request as nats-server's json.Unmarshal reads it (unknown fields ignored), or None
    where that fails."""
    try:
        return unmarshal(body, MsgGetRequest)
    except GoJSONError:
        return None


def _asks_nothing(req: MsgGetRequest) -> bool:
    return (
        not req.seq
        and not req.last_by_subj
        and not req.next_by_subj
        and not req.multi_last
        and req.start_time is None
    )


def _valid(req: MsgGetRequest) -> bool:
    conflicts = (
        (req.seq > 0 and bool(req.last_by_subj)),
        (req.seq > 0 and req.start_time is not None),
        (req.start_time is not None and bool(req.last_by_subj)),
        (bool(req.last_by_subj) and bool(req.next_by_subj)),
        (bool(req.last_by_subj) and req.batch > 0),
        (bool(req.last_by_subj) and bool(req.multi_last)),
        (bool(req.next_by_subj) and bool(req.multi_last)),
        (req.up_to_seq > 0 and req.up_to_time is not None),
    )
    return not any(conflicts)


def _with_direct_headers(
    msg: StoredMessage, stream: str, pending: int | None = None, last: int = 0
) -> bytes:
    """The message's own headers, then what a direct get adds (nats-server's genHeader)."""
    fields = [
        (b"Nats-Stream", stream.encode()),
        (b"Nats-Subject", msg.subject.encode()),
        (b"Nats-Sequence", b"%d" % msg.seq),
        (b"Nats-Time-Stamp", go_time_or_zero(msg.ts).encode()),
    ]
    if pending is not None:
        fields += ((b"Nats-Num-Pending", b"%d" % pending), (b"Nats-Last-Sequence", b"%d" % last))
    return append_headers(msg.headers, fields)
