"""Routing `$JS.API.*` requests to their handlers, and answering the way nats-server answers.

Every response carries its `type`; a refused request answers with the same type and an
`error` object, so clients raise their usual exceptions. Unknown API subjects get nats-server's
system response with a bad-request error.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import msgspec

from infinistream.consumer.service import ConsumerService
from infinistream.handlers.consumers import ConsumerApi
from infinistream.handlers.responses import account_info_response, refusal, typed
from infinistream.handlers.streams import StreamApi
from infinistream.jetstream import errors
from infinistream.jetstream.api import (
    TYPE_PREFIX,
    DirectGetRequest,
    MsgGetRequest,
    decode,
    encode,
    parse_rfc3339,
    rfc3339,
)
from infinistream.jetstream.messages import Send, status
from infinistream.storage import KeyRefusedError
from infinistream.stream.damage import DamagedMessage
from infinistream.stream.erase import wants_erase
from infinistream.stream.view import seq_from_time

log = logging.getLogger(__name__)

_STREAM_OPS = {
    "CREATE": ("create", "stream_create_response"),
    "UPDATE": ("update", "stream_update_response"),
    "INFO": ("info", "stream_info_response"),
    "DELETE": ("delete", "stream_delete_response"),
}

_DIRECT_GET = (
    "NATS/1.0\r\nNats-Stream: {}\r\nNats-Subject: {}\r\nNats-Sequence: {}\r\n"
    "Nats-Time-Stamp: {}\r\n\r\n"
)
_DIRECT_GET_BATCH = (
    "NATS/1.0\r\nNats-Stream: {}\r\nNats-Subject: {}\r\nNats-Sequence: {}\r\n"
    "Nats-Time-Stamp: {}\r\nNats-Num-Pending: {}\r\nNats-Last-Sequence: {}\r\n\r\n"
)
# The status of a direct get whose message is damaged in object storage (InfiniStream's own:
# nats-server answers any message it can not load as not found).
MESSAGE_DAMAGED = "Message Damaged"
_EOB = "NATS/1.0 204 EOB\r\nNats-Num-Pending: {}\r\nNats-Last-Sequence: {}\r\n\r\n"


@dataclass(eq=False)
class JetStreamApi:
    """nats-server's JetStream API dispatch: every `$JS.API.>` subject to its handler."""

    streams: StreamApi
    consumers: ConsumerApi
    # MSG.NEXT is served by the consumer service: acks with +NXT queue requests too.
    service: ConsumerService
    send: Send
    total: int = field(default=0, init=False)
    errors: int = field(default=0, init=False)

    async def handle(
        self, subject: str, reply: str | None, headers: bytes | None, body: bytes
    ) -> bool:
        """Serve one request on `$JS.API.>`; the answer goes to `reply`.

        False means nothing serves this subject (nats-server would have no subscription
        there), so the caller answers with no-responders where the client asked for that.
        """
        tokens = subject.split(".")
        self.total += 1
        if len(tokens) >= 5 and tokens[2:5] == ["CONSUMER", "MSG", "NEXT"]:
            # A pull request is answered with messages and status headers, not JSON.
            if len(tokens) != 7:
                return False
            return await self.service.next_request(tokens[5], tokens[6], reply, body)
        if len(tokens) >= 4 and tokens[2] == "DIRECT" and tokens[3] == "GET":
            if not reply:
                return True
            try:
                return await self._direct_get(tokens, reply, body)
            except KeyRefusedError as exc:
                # Encryption at rest: the message's key is not held. Refused, never garbage.
                self.errors += 1
                log.error("JetStream direct get on %s refused: %s", subject, exc)
                self.send(reply, status(503, "Encryption Key Refused"), b"")
                return True
            except Exception:
                # Answered all the same: a direct get is a request someone waits on.
                log.exception("JetStream direct get on %s failed", subject)
                self.send(reply, status(500, "Internal Error"), b"")
                return True
        kind = TYPE_PREFIX + "system_response"
        try:
            response = await self._dispatch(tokens, reply or "", headers, body)
            if response is None:
                return True
        except errors.ApiError as exc:
            self.errors += 1
            kind = getattr(exc, "response_type", kind)
            response = refusal(kind, exc)
        except KeyRefusedError as exc:
            # Encryption at rest: a sealed object or index entry needs a key this agent does
            # not hold (wrong, or retired before `pipeline rewrap` moved it). Logged by the
            # reader; answered as nats-server answers a store that cannot read.
            self.errors += 1
            log.error("JetStream API request on %s refused: %s", subject, exc)
            error = errors.stream_store_failed(f"encryption key refused: {exc}")
            response = {"type": kind, "error": error.to_dict()}
        except Exception:
            log.exception("JetStream API request on %s failed", subject)
            self.errors += 1
            response = {"type": kind, "error": errors.stream_general("internal error").to_dict()}
        if reply:
            self.send(reply, None, encode(response))
        return True

    async def _dispatch(
        self, tokens: list[str], reply: str, headers: bytes | None, body: bytes
    ) -> dict[str, Any] | None:
        n = len(tokens)
        if n == 3 and tokens[2] == "INFO":
            return await self._account_info()
        if n >= 4 and tokens[2] == "STREAM":
            op = tokens[3]
            if op in ("NAMES", "LIST") and n == 4:
                kind = "stream_names_response" if op == "NAMES" else "stream_list_response"
                return await typed(kind, self._names_or_list(op, body))
            if op == "PURGE" and n == 5:
                erase = wants_erase(headers)
                return await typed(
                    "stream_purge_response", self.streams.purge(tokens[4], body, erase=erase)
                )
            if op in _STREAM_OPS and n == 5:
                method, kind = _STREAM_OPS[op]
                return await typed(kind, getattr(self.streams, method)(tokens[4], body))
            if op == "ERASE" and n == 6 and tokens[4] == "STATUS":
                return await self.streams.erase_status(tokens[5], body)
            if op == "MSG" and n == 6 and tokens[4] == "GET":
                return await typed("stream_msg_get_response", self.streams.get_msg(tokens[5], body))
            if op == "MSG" and n == 6 and tokens[4] == "DELETE":
                return await typed(
                    "stream_msg_delete_response", self.streams.delete_msg(tokens[5], body)
                )
        if n >= 4 and tokens[2] == "CONSUMER":
            return await self.consumers.handle(tokens, reply, headers, body)
        raise errors.bad_request()

    async def _account_info(self) -> dict[str, Any]:
        streams, storage = await self.streams.usage()
        return account_info_response(
            streams=streams,
            consumers=await self.consumers.count_all(),
            storage=storage,
            reserved=self.streams.reserved(),
            limits=self.streams.policy.limits,
            total=self.total,
            errors_count=self.errors,
        )

    async def _names_or_list(self, op: str, body: bytes) -> dict[str, Any]:
        return await (self.streams.names(body) if op == "NAMES" else self.streams.list(body))

    # -- direct get ------------------------------------------------------------------------

    async def _direct_get(self, tokens: list[str], reply: str, body: bytes) -> bool:
        """`$JS.API.DIRECT.GET.<stream>[.<subject>]`: answered with the message itself."""
        if len(tokens) < 5:
            return False
        name = tokens[4]
        await self.streams.catalog.refresh()
        entry = self.streams.catalog.streams.get(name)
        if entry is None or not entry.config.allow_direct:
            return False
        await self._direct_get_from(entry.name, tokens, reply, body)
        return True

    async def _direct_get_from(self, name: str, tokens: list[str], reply: str, body: bytes) -> None:
        if len(tokens) > 5:
            if body.strip():
                try:
                    probe = decode(body, DirectGetRequest)
                except msgspec.DecodeError:
                    self.send(reply, status(408, "Malformed Request"), b"")
                    return
                # Like nats-server, refuse only fields that make no sense here: no_hdr and
                # max_bytes are kept.
                if msgspec.structs.replace(probe, no_hdr=False, max_bytes=0) != DirectGetRequest():
                    self.send(reply, status(408, "Bad Request"), b"")
                    return
                req = MsgGetRequest(last_by_subj=".".join(tokens[5:]), no_hdr=probe.no_hdr)
            else:
                req = MsgGetRequest(last_by_subj=".".join(tokens[5:]))
        else:
            if not body.strip():
                self.send(reply, status(408, "Empty Request"), b"")
                return
            try:
                req = decode(body, DirectGetRequest)
            except msgspec.DecodeError:
                self.send(reply, status(408, "Malformed Request"), b"")
                return
            if _asks_nothing(req):
                # nats-server: a body that names no message is an empty request too.
                self.send(reply, status(408, "Empty Request"), b"")
                return
            if not _valid_direct(req):
                self.send(reply, status(408, "Bad Request"), b"")
                return
        try:
            await self._serve_direct(name, req, reply)
        except errors.ApiError:
            self.send(reply, status(404, "Message Not Found"), b"")
        except DamagedMessage:
            self.send(reply, status(500, MESSAGE_DAMAGED), b"")

    async def _serve_direct(self, name: str, req: MsgGetRequest, reply: str) -> None:
        if req.batch <= 0 or req.last_by_subj:
            msg = await self.streams.find(name, req)
            if msg is None:
                self.send(reply, status(404, "Message Not Found"), b"")
                return
            hdr = _with_direct_headers(msg.headers, name, msg.subject, msg.seq, rfc3339(msg.ts))
            self.send(reply, None if req.no_hdr else hdr, msg.data)
            return
        view = await self.streams.catalog.view(name)
        if view is None:
            self.send(reply, status(404, "Message Not Found"), b"")
            return
        filt = req.next_by_subj

        def batch() -> tuple[list[int], int]:
            start = req.seq
            if req.start_time is not None:
                start = seq_from_time(view, parse_rfc3339(req.start_time))
            # up_to_seq / up_to_time only bound multi_last requests in nats-server; a batch
            # ignores them.
            first = list(islice(view.live_seqs(start, filt), req.batch))
            return first, view.count_after(start - 1, [filt] if filt else [])

        seqs, pending = await self.streams.catalog.answer(batch)
        if not seqs:
            self.send(reply, status(404, "Message Not Found"), b"")
            return
        limit = req.max_bytes or 1024 * 1024 * 64
        sent_bytes = 0
        last = 0
        for seq in seqs:
            try:
                msg = await self.streams.read(view, seq)
            except DamagedMessage:
                # Left out of a batch (and reported), as if it had been deleted.
                pending -= 1
                continue
            if msg is None:
                continue
            pending -= 1
            hdr = _with_direct_headers(
                msg.headers, name, msg.subject, msg.seq, rfc3339(msg.ts), pending, last
            )
            self.send(reply, None if req.no_hdr else hdr, msg.data)
            last = msg.seq
            sent_bytes += len(msg.subject) + len(msg.headers) + len(msg.data)
            if sent_bytes >= limit:
                break
        self.send(reply, _EOB.format(pending, last).encode(), b"")


def _asks_nothing(req: MsgGetRequest) -> bool:
    return (
        not req.seq
        and not req.last_by_subj
        and not req.next_by_subj
        and not req.multi_last
        and req.start_time is None
    )


def _valid_direct(req: MsgGetRequest) -> bool:
    if _asks_nothing(req):
        return False
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
    stored: bytes,
    stream: str,
    subject: str,
    seq: int,
    ts: str,
    pending: int | None = None,
    last: int = 0,
) -> bytes:
    if pending is None:
        fresh = _DIRECT_GET.format(stream, subject, seq, ts)
    else:
        fresh = _DIRECT_GET_BATCH.format(stream, subject, seq, ts, pending, last)
    if not stored:
        return fresh.encode()
    # Keep the message's own headers and append ours, as nats-server's genHeader does.
    return stored[:-2] + fresh[len("NATS/1.0\r\n") :].encode()
