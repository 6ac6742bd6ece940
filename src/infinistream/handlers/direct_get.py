"""`$JS.API.DIRECT.GET.<stream>[.<subject>]`: messages answered with themselves, as nats-server
answers a direct get: the message with its own headers and the direct get's fields after them,
a batch closed by an `EOB` status, and its 408 and 404 statuses for what it can not serve.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import Final

import msgspec

from infinistream.handlers.streams import StreamApi
from infinistream.jetstream import errors
from infinistream.jetstream.api import DirectGetRequest, MsgGetRequest, decode
from infinistream.jetstream.messages import Send, status
from infinistream.jetstream.times import go_time_or_zero, parse_go_time
from infinistream.protocol import append_headers
from infinistream.stream.damage import DamagedMessage
from infinistream.stream.reader import StoredMessage
from infinistream.stream.view import StreamView, seq_from_time

# The status of a direct get whose message is damaged in object storage (InfiniStream's own:
# nats-server answers any message it can not load as not found).
MESSAGE_DAMAGED: Final = "Message Damaged"
NOT_FOUND: Final = "Message Not Found"
# What a batch sends at most without a max_bytes of its own (nats-server's).
BATCH_BYTES: Final = 64 * 1024 * 1024


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
        await catalog.refresh()
        entry = catalog.streams.get(tokens[4])
        if entry is None or not entry.config.allow_direct:
            return False
        req = _request(tokens, body)
        if isinstance(req, str):
            self.send(reply, status(408, req), b"")
            return True
        try:
            if req.batch <= 0 or req.last_by_subj:
                await self._one(entry.name, req, reply)
            else:
                await self._batch(entry.name, req, reply)
        except errors.ApiError:
            self.send(reply, status(404, NOT_FOUND), b"")
        except DamagedMessage:
            self.send(reply, status(500, MESSAGE_DAMAGED), b"")
        return True

    async def _one(self, name: str, req: MsgGetRequest, reply: str) -> None:
        msg = await self.streams.find(name, req)
        if msg is None:
            self.send(reply, status(404, NOT_FOUND), b"")
            return
        self.send(reply, None if req.no_hdr else _with_direct_headers(msg, name), msg.data)

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


def _batch_seqs(view: StreamView, req: MsgGetRequest) -> tuple[list[int], int]:
    """The live sequences a batch hands out, and how many it could (up_to_seq and up_to_time
    bound only multi_last requests in nats-server: a batch ignores them)."""
    start = req.seq
    if req.start_time is not None:
        start = seq_from_time(view, parse_go_time(req.start_time))
    filt = req.next_by_subj
    first = list(islice(view.live_seqs(start, filt), req.batch))
    return first, view.count_after(start - 1, [filt] if filt else [])


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
        if msgspec.structs.replace(probe, no_hdr=False, max_bytes=0) != DirectGetRequest():
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
    """The request, or None where nats-server's decoding fails (a start time that is no
    time.Time too)."""
    try:
        req: MsgGetRequest = decode(body, DirectGetRequest)
        if req.start_time is not None:
            parse_go_time(req.start_time)
    except (msgspec.DecodeError, ValueError):
        return None
    return req


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
        (bool(req.multi_last)),
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
