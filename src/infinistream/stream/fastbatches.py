"""Fast-ingest batch publishing (ADR-50, nats-server 2.14): many messages, acknowledged every N.

A client publishes each message of a fast batch with a reply subject that says what it is,
`<inbox>.<id>.<flow>.<gap mode>.<batch seq>.<operation>.$FI` (operation 0 starts the batch,
1 appends, 2 commits with this message, 3 commits without it, 4 pings), and listens on
`<inbox>.>`. Messages are stored as they come, through the write buffer like any publish
(not staged, as an atomic batch is); what the client hears is nats-server's
(server/stream.go processJetStreamFastBatchMsg, server/jetstream_batching.go):

- `{"type":"ack","seq":S,"msgs":N}` once message S is stored, every N messages (the first
  message is answered with seq 0 and the N the client starts at; N ramps up to the client's
  flow while this is the stream's only fast batch, and down when there are more);
- `{"type":"gap","last_seq":E,"seq":S}` when message S comes where E was expected: with gap
  mode `ok` the batch goes on from S, with `fail` it ends there;
- `{"type":"err","seq":S,"error":{...}}` when message S could not be stored;
- on the commit, a PubAck with `"batch"` and `"count"`, once everything before it is stored.

The batch's state lives on the agent the client publishes to, as nats-server keeps it on the
stream's leader; a batch idle for 10 s is forgotten. A client whose agent dies sees its next
message refused as of an unknown batch, as after a leader change that lost the batch.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, Final

from infinistream.jetstream import errors
from infinistream.jetstream.api import StreamConfig
from infinistream.stream.catalog import Catalog
from infinistream.stream.publish_rules import batch_refusal
from infinistream.stream.write_buffer import AckSink, WriteBuffer, error_ack, pub_ack_prefix

SUFFIX: Final = ".$FI"
START, APPEND, COMMIT, COMMIT_EOB, PING = range(5)
MAX_ID_LEN: Final = 64
MAX_INFLIGHT_PER_STREAM: Final = 1000
MAX_INFLIGHT: Final = 50_000
TIMEOUT_SECONDS: Final = 10.0
# The most messages between two flow acks nats-server allows all fast batches of a stream.
MAX_ACK_MESSAGES: Final = 500
DEFAULT_FLOW: Final = 10
_MAX_UINT16: Final = 65535


@dataclass(frozen=True, slots=True)
class FastRequest:
    """What a fast batch message's reply subject says."""

    id: str
    flow: int
    gap_ok: bool
    seq: int
    op: int

    @property
    def commit(self) -> bool:
        return self.op in (COMMIT, COMMIT_EOB)


def is_fast_batch(reply: str) -> bool:
    """A message of a fast batch: nats-server (getFastBatch) takes every publish whose reply
    ends in `.$FI` for one, well formed or not, and never stores it as a plain message."""
    return reply.endswith(SUFFIX)


def parse_reply(reply: str) -> FastRequest | None:
    """The request a `.$FI` reply subject makes; None for a pattern nats-server's getFastBatch
    rejects."""
    tokens = reply[: -len(SUFFIX)].split(".")
    if len(tokens) < 6:
        return None
    *_, batch_id, flow_text, gap, seq_text, op_text = tokens
    op = _go_int(op_text)
    seq = _go_int(seq_text)
    if not START <= op <= PING or not 0 < seq < 2**64 - 1:
        return None
    if (seq == 1 and op == COMMIT_EOB) or ((op == START) != (seq == 1) and op in (START, APPEND)):
        return None
    if gap not in ("ok", "fail"):
        return None
    flow = _go_int(flow_text)
    flow = DEFAULT_FLOW if flow <= 0 else min(flow, _MAX_UINT16)
    return FastRequest(batch_id, flow, gap == "ok", seq, op)


def _go_int(text: str) -> int:
    # nats-server's parseInt64/parseUint64: plain decimal digits, -1 otherwise.
    return int(text) if text.isdigit() and text.isascii() else -1


def refusal(cfg: StreamConfig, headers: bytes, data: bytes) -> errors.ApiError | None:
    """nats-server's checks of a fast batch message before its batch is looked at."""
    error = batch_refusal(cfg, headers, data)
    if error is None and not cfg.allow_batched:
        return errors.batch_publish_disabled()
    return error


@dataclass(eq=False)
class _Batch:
    gap_ok: bool
    max_ack: int
    ack_messages: int
    reply: str
    lseq: int = 0  # the highest batch sequence received
    pseq: int = 0  # the highest batch sequence stored
    fseq: int = 0  # the batch sequence of the last flow ack
    sseq: int = 0  # the stream sequence of the last message stored
    pending: int = 0  # messages queued, not yet stored
    commit: bool = False
    # Where the PubAck goes: the reply of the message that ended the batch (a client waits on
    # that one), even when the messages before it are stored after it arrived.
    commit_reply: str = ""
    timer: asyncio.TimerHandle | None = None


class FastBatches:
    """The fast batches being published to this agent, by stream and batch id."""

    def __init__(self, catalog: Catalog, send: AckSink, domain: str = "") -> None:
        self.catalog = catalog
        self.send = send
        self.domain = domain
        self.write_buffer: WriteBuffer | None = None
        self._batches: dict[tuple[str, str], _Batch] = {}

    def bind(self, write_buffer: WriteBuffer) -> None:
        """The write buffer that stores the messages (and answers them to `acks`)."""
        self.write_buffer = write_buffer

    # -- the client's messages ---------------------------------------------------------------

    def publish(
        self, stream: str, subject: str, reply: str, headers: bytes | None, data: bytes
    ) -> None:
        """A message with a `.$FI` reply for `stream`: stored, refused or answered."""
        entry = self.catalog.streams.get(stream)
        if entry is None:
            self._say(reply, error_ack(stream, errors.stream_not_found()))
            return
        error = refusal(entry.config, headers or b"", data) or self._take(
            stream, subject, reply, headers, data
        )
        if error is not None:
            self._say(reply, error_ack(stream, error))

    def _take(
        self, stream: str, subject: str, reply: str, headers: bytes | None, data: bytes
    ) -> errors.ApiError | None:
        req = parse_reply(reply)
        if req is None:
            return errors.batch_publish_invalid_pattern()
        if len(req.id) > MAX_ID_LEN:
            return errors.batch_publish_invalid_batch_id()
        key = (stream, req.id)
        b = self._batches.get(key)
        if b is None:
            if req.seq != 1:
                return errors.batch_publish_unknown_batch_id()
            mine = sum(1 for s, _ in self._batches if s == stream)
            if mine + 1 > MAX_INFLIGHT_PER_STREAM or len(self._batches) + 1 > MAX_INFLIGHT:
                return errors.batch_publish_too_many_inflight()
            b = self._batches[key] = _Batch(req.gap_ok, req.flow, 0, reply)
            # The stream's only fast batch goes at the client's pace; more start slow.
            b.ack_messages = 1 if mine else min(MAX_ACK_MESSAGES, req.flow)
        if not b.commit:
            self._restart_timer(key, b)
        if req.op == PING:
            self._ping(key, b, req, reply)
        elif not b.commit and self._in_order(key, b, req, reply):
            self._store(key, b, req, stream, subject, reply, headers, data)
        return None

    def _ping(self, key: tuple[str, str], b: _Batch, req: FastRequest, reply: str) -> None:
        """A ping reports a gap up to its sequence and repeats the last flow ack."""
        if req.seq > b.lseq:
            self._say(reply, _gap(b.lseq + 1, req.seq + 1))
            if not b.gap_ok:
                self._commit(key, b, reply)
                return
            b.lseq = req.seq
            if b.pending == 0:
                b.pseq = b.lseq
            if self._flow(key, b, reply):
                return
        self._say(reply, _flow_ack(b.fseq, b.ack_messages))

    def _in_order(self, key: tuple[str, str], b: _Batch, req: FastRequest, reply: str) -> bool:
        """Whether the message goes on; a gap is reported, and ends a `fail` batch."""
        expected = b.lseq + 1
        if req.seq == expected:
            b.lseq = expected
            return True
        if req.seq > expected:
            self._say(reply, _gap(expected, req.seq))
            if b.gap_ok:
                b.lseq = req.seq
                return True
        self._commit(key, b, reply)
        return False

    def _store(
        self,
        key: tuple[str, str],
        b: _Batch,
        req: FastRequest,
        stream: str,
        subject: str,
        reply: str,
        headers: bytes | None,
        data: bytes,
    ) -> None:
        if req.op == COMMIT_EOB:
            # The end-of-batch message is not stored: the batch ends before it.
            b.lseq -= 1
            if b.pending == 0:
                b.pseq = b.lseq
            self._commit(key, b, reply)
            return
        if req.op == COMMIT:
            b.commit = True
            b.commit_reply = reply
            self._stop_timer(b)
        elif req.seq == 1:
            # The first message is answered at once with the pace to start at.
            self._say(reply, _flow_ack(0, b.ack_messages))
        b.pending += 1
        if self.write_buffer is None:
            raise RuntimeError("fast batches are not bound to a write buffer")
        self.write_buffer.append(stream, subject, headers, data, reply)

    # -- answers from the write buffer -------------------------------------------------------

    def acks(self, replies: list[str | bytes], payloads: list[bytes]) -> None:
        """The write buffer's answers: those to fast batch messages are the batches' to
        turn into flow acks; the others go to their clients."""
        if not self._batches:
            self.send(replies, payloads)
            return
        others: list[str | bytes] = []
        answers: list[bytes] = []
        for reply, payload in zip(replies, payloads, strict=True):
            text = reply if isinstance(reply, str) else reply.decode("utf-8", "surrogateescape")
            if text.endswith(SUFFIX):
                self._stored(text, payload)
            else:
                others.append(reply)
                answers.append(payload)
        if others:
            self.send(others, answers)

    def _stored(self, reply: str, payload: bytes) -> None:
        req = parse_reply(reply)
        answer: dict[str, Any] = json.loads(payload)
        key = (answer.get("stream", ""), req.id if req is not None else "")
        b = self._batches.get(key)
        if req is None or b is None:
            return
        b.reply = reply
        b.pending = max(b.pending - 1, 0)
        if "error" in answer:
            self._failed(key, b, req, reply, answer)
            return
        if not answer.get("duplicate"):
            b.sseq = answer["seq"]
        b.pseq = b.lseq if b.pending == 0 else req.seq
        if b.commit and b.pseq == b.lseq:
            self._commit(key, b, reply)
            return
        self._flow(key, b, reply)

    def _failed(
        self, key: tuple[str, str], b: _Batch, req: FastRequest, reply: str, answer: dict[str, Any]
    ) -> None:
        """A message that could not be stored: reported; a `fail` batch ends before it."""
        if not b.gap_ok and req.seq == 1:
            # A batch that fails at once is answered as a plain publish would be.
            self._forget(key, b)
            self._say(reply, json.dumps(answer).encode())
            return
        err = {"type": "err", "seq": req.seq, "error": answer["error"]}
        self._say(reply, json.dumps(err, separators=(",", ":")).encode())
        if b.gap_ok and not req.commit:
            if b.pending == 0:
                b.pseq = b.lseq
            return
        b.lseq = min(b.lseq, req.seq - 1)
        if b.pending == 0:
            b.pseq = b.lseq
        self._commit(key, b, reply)

    # -- flow, commit, cleanup ---------------------------------------------------------------

    def _flow(self, key: tuple[str, str], b: _Batch, reply: str) -> bool:
        """A flow ack if N more messages are stored since the last (nats-server's
        checkFlowControl, its pacing too); whether one was sent."""
        step = b.ack_messages
        if b.pseq < b.fseq + step:
            return False
        b.fseq += (b.pseq - b.fseq) // step * step
        stream = key[0]
        share = MAX_ACK_MESSAGES // sum(1 for s, _ in self._batches if s == stream)
        ceiling = min(max(share, 1), b.max_ack)
        if b.ack_messages < ceiling:
            b.ack_messages = min(b.ack_messages * 2, ceiling)
        elif b.ack_messages > ceiling:
            b.ack_messages = max(b.ack_messages // 2, ceiling)
        self._say(reply, _flow_ack(b.fseq, b.ack_messages))
        return True

    def _commit(self, key: tuple[str, str], b: _Batch, reply: str) -> None:
        """The batch ends: its PubAck now if all of it is stored, else when the rest is."""
        if not b.commit_reply:
            b.commit_reply = reply
        b.commit = True
        self._stop_timer(b)
        if b.lseq != b.pseq:
            return
        self._forget(key, b)
        stream, batch_id = key
        ack = pub_ack_prefix(stream, self.domain) + b"%d,%s}" % (
            b.sseq,
            b'"batch":%s,"count":%d' % (json.dumps(batch_id).encode(), b.lseq),
        )
        self._say(b.commit_reply, ack)

    def _restart_timer(self, key: tuple[str, str], b: _Batch) -> None:
        self._stop_timer(b)
        b.timer = asyncio.get_running_loop().call_later(TIMEOUT_SECONDS, self._forget, key, b)

    @staticmethod
    def _stop_timer(b: _Batch) -> None:
        if b.timer is not None:
            b.timer.cancel()
            b.timer = None

    def _forget(self, key: tuple[str, str], b: _Batch) -> None:
        self._stop_timer(b)
        if self._batches.get(key) is b:
            del self._batches[key]

    def _say(self, reply: str, payload: bytes) -> None:
        self.send([reply], [payload])


def _flow_ack(seq: int, messages: int) -> bytes:
    return b'{"type":"ack","seq":%d,"msgs":%d}' % (seq, messages)


def _gap(expected: int, seq: int) -> bytes:
    return b'{"type":"gap","last_seq":%d,"seq":%d}' % (expected, seq)
