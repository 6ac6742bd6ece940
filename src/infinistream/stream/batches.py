"""Atomic batch publish: messages staged until their commit, then stored all or none.

A client publishes a batch's messages with `Nats-Batch-Id`, `Nats-Batch-Sequence` (1, 2, ...)
and, on the last, `Nats-Batch-Commit: 1` (or `eob`: an end-of-batch message that is not
stored, the one before it being the last). Until the commit the messages wait here, on the
agent the client publishes to: each is answered with an empty message once staged. On the
commit the batch goes to the write buffer in one piece, so it is in one flush and one commit,
and the commit's plan takes all of it or none (publish_rules). An agent that dies with a batch
staged loses only what no client was told was stored: the batch never commits.

The checks and limits are nats-server's (server/stream.go processJetStreamAtomicBatchMsg):
at most 1000 messages per batch, 50 batches in flight per stream, 1000 in all, a batch
abandoned 10 s after its last message.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Final

from infinistream.jetstream import errors
from infinistream.protocol import append_header, header_value
from infinistream.stream.catalog import Catalog
from infinistream.stream.publish_rules import batch_refusal
from infinistream.stream.write_buffer import AckSink, WriteBuffer, error_ack

BATCH_ID: Final = b"Nats-Batch-Id"
BATCH_SEQUENCE: Final = b"Nats-Batch-Sequence"
BATCH_COMMIT: Final = b"Nats-Batch-Commit"
MAX_BATCH_SIZE: Final = 1000
MAX_INFLIGHT_PER_STREAM: Final = 50
MAX_INFLIGHT: Final = 1000
MAX_ID_LEN: Final = 64
TIMEOUT_SECONDS: Final = 10.0
# nats-server's parseInt64 of something that is not a number, read as unsigned.
_NOT_A_NUMBER: Final = 2**64 - 1

Message = tuple[str, bytes, bytes]  # subject, headers, data


def is_batch_message(headers: bytes | None) -> bool:
    return headers is not None and header_value(headers, BATCH_ID) is not None


@dataclass(eq=False)
class _Batch:
    messages: list[Message] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class AtomicBatches:
    def __init__(self, catalog: Catalog, write_buffer: WriteBuffer, ack: AckSink) -> None:
        self.catalog = catalog
        self.write_buffer = write_buffer
        # Answers, as the write buffer answers publishes: to (replies, payloads).
        self.ack = ack
        self._batches: dict[tuple[str, str], _Batch] = {}

    def publish(
        self, stream: str, subject: str, reply: str | None, headers: bytes, data: bytes
    ) -> None:
        """A message with a `Nats-Batch-Id` for `stream`: staged, refused, or committed."""
        error = self._take(stream, subject, reply, headers, data)
        if error is not None:
            self._answer(reply, error_ack(stream, error))

    def _answer(self, reply: str | None, payload: bytes) -> None:
        if reply:
            self.ack([reply], [payload])

    def _take(
        self, stream: str, subject: str, reply: str | None, headers: bytes, data: bytes
    ) -> errors.ApiError | None:
        entry = self.catalog.streams.get(stream)
        if entry is None:
            return errors.stream_not_found()
        cfg = entry.config
        error = batch_refusal(cfg, headers, data)
        if error is not None:
            return error
        if not cfg.allow_atomic:
            return errors.atomic_publish_disabled()
        batch_id = (header_value(headers, BATCH_ID) or b"").decode(errors="replace")
        if len(batch_id) > MAX_ID_LEN:
            return errors.atomic_publish_invalid_batch_id()
        raw_seq = header_value(headers, BATCH_SEQUENCE)
        if not raw_seq:
            return errors.atomic_publish_missing_seq()
        seq = int(raw_seq) if raw_seq.isdigit() else _NOT_A_NUMBER
        commit_value = header_value(headers, BATCH_COMMIT)
        commit = commit_value is not None
        eob = commit_value == b"eob"
        key = (stream, batch_id)
        batch = self._batches.get(key)
        if batch is None:
            if seq != 1:
                size = seq - 1 if eob else seq
                if size > MAX_BATCH_SIZE:
                    return errors.atomic_publish_too_large_batch(MAX_BATCH_SIZE)
                return errors.atomic_publish_incomplete_batch()
            if sum(1 for s, _ in self._batches if s == stream) >= MAX_INFLIGHT_PER_STREAM:
                return errors.atomic_publish_too_many_inflight()
            if len(self._batches) >= MAX_INFLIGHT:
                return errors.atomic_publish_too_many_inflight()
            batch = self._batches[key] = _Batch()
        if commit and not eob and commit_value != b"1":
            self._drop(key)
            return errors.atomic_publish_invalid_batch_commit()
        if seq != len(batch.messages) + 1 or (seq == 1 and eob):
            self._drop(key)
            return errors.atomic_publish_incomplete_batch()
        if (seq - 1 if eob else seq) > MAX_BATCH_SIZE:
            self._drop(key)
            return errors.atomic_publish_too_large_batch(MAX_BATCH_SIZE)
        if not eob:
            batch.messages.append((subject, headers, data))
        if not commit:
            self._restart_timer(key, batch)
            # Staged: the client may send the next one.
            self._answer(reply, b"")
            return None
        self._drop(key)
        messages = batch.messages
        if eob:
            # The end-of-batch marker is not stored; the last message carries the commit.
            last_subject, last_headers, last_data = messages[-1]
            last_headers = append_header(last_headers, BATCH_COMMIT, b"1")
            messages[-1] = (last_subject, last_headers, last_data)
        self.write_buffer.append_batch(stream, messages, reply, batch_id)
        return None

    def _restart_timer(self, key: tuple[str, str], batch: _Batch) -> None:
        if batch.timer is not None:
            batch.timer.cancel()
        batch.timer = asyncio.get_running_loop().call_later(TIMEOUT_SECONDS, self._drop, key)

    def _drop(self, key: tuple[str, str]) -> None:
        batch = self._batches.pop(key, None)
        if batch is not None and batch.timer is not None:
            batch.timer.cancel()
