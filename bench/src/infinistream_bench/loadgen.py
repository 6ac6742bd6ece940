"""The load generator: asyncio connections that speak the NATS protocol directly.

Each job runs in a worker process (see `workers`) and does one kind of work:

    PublishJob  pipelined publishes, each with its own reply subject under one wildcard inbox
                subscription as clients send them, up to `window` unanswered per
                connection, counting the PubAcks (throughput)
    PacedJob    publishes sent on a fixed schedule whatever the acks do (open loop), timing
                each one from send to ack (latency, and the steady traffic of the cost model)
    FetchJob    pull requests to durable consumers, every message acked explicitly
    TailJob     one long-poll pull request waiting on the tail while a second connection
                publishes; times each message from publish to delivery

On the hot path nothing is built per message that can be built once: throughput frames are
one pre-built buffer of frames with cycling reply tokens, written in slices, and replies are
parsed with `protocol.Parser`, which copes with a frame split anywhere across reads. Set-up
(connect, subscribe) happens before the job's `go` signal, so only the work itself is timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import time
from array import array
from collections.abc import Awaitable, Callable, Iterator

from infinistream_bench import protocol
from infinistream_bench.connection import STALL_SECONDS, Connection, JobError, connect, describe
from infinistream_bench.jobs import (
    FetchJob,
    FetchResult,
    PacedJob,
    PacedResult,
    PublishJob,
    PublishResult,
    TailJob,
    TailResult,
)
from infinistream_bench.protocol import Message

Go = Callable[[], Awaitable[None]]
# Throughput frames written per write() call, at most.
CHUNK_FRAMES = 128

perf_counter = time.perf_counter


# -- pipelined publishing ----------------------------------------------------------------------


class _Pipeline:
    """One connection's pipelined publishes and the acks that answer them.

    `frames` holds `frames_count` PUB frames of one length, written in turn and over again
    (with a reply subject per publish, their tokens differ: see `protocol.pub_cycle`).
    """

    def __init__(self, conn: Connection, frames: bytes, frames_count: int, job: PublishJob) -> None:
        self.conn = conn
        self.frames = memoryview(frames)
        self.frames_count = frames_count
        self.frame_len = len(frames) // frames_count
        self.window = job.window
        self.expect = job.expect
        self.limit = job.messages
        self.sent = 0
        self.acked = 0
        self.errors = 0
        self.first_error = ""
        self.in_window = 0
        self.window_open = math.inf
        self.window_close = math.inf
        self.last_ack = 0.0
        self.progress = asyncio.Event()
        conn.on_messages = self.on_messages

    def on_messages(self, msgs: list[Message], t: float) -> None:
        ok = 0
        if self.expect == "puback":
            for m in msgs:
                if m[3] is None and m[4].startswith(b'{"stream"'):
                    ok += 1
                else:
                    self._error(m)
        else:
            for m in msgs:
                headers = m[3]
                if headers is not None and headers.startswith(b"NATS/1.0 503"):
                    ok += 1
                else:
                    self._error(m)
        self.acked += len(msgs)
        if self.window_open <= t < self.window_close:
            self.in_window += ok
        self.last_ack = t
        self.progress.set()

    def _error(self, msg: Message) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = describe(msg)

    async def _wait_progress(self) -> None:
        self.progress.clear()
        try:
            await asyncio.wait_for(self.progress.wait(), STALL_SECONDS)
        except TimeoutError:
            raise JobError(
                f"no ack for {STALL_SECONDS:.0f}s ({self.sent - self.acked} outstanding)"
            ) from None
        if self.conn.error is not None:
            raise JobError(f"connection failed: {self.conn.error}")

    def _write(self, k: int) -> None:
        """The next `k` frames of the cycle (k <= frames_count)."""
        first = self.sent % self.frames_count
        end = first + k
        frames, size = self.frames, self.frame_len
        if end <= self.frames_count:
            self.conn.write(frames[first * size : end * size])
        else:
            self.conn.write(frames[first * size :])
            self.conn.write(frames[: (end - self.frames_count) * size])
        self.sent += k

    async def run(self, stop_at: float) -> None:
        conn = self.conn
        # Refill when a quarter of the window is free, so writes stay large.
        low_water = max(1, min(self.window // 4, CHUNK_FRAMES))
        while True:
            if self.limit:
                remaining = self.limit - self.sent
                if remaining <= 0:
                    break
            else:
                remaining = CHUNK_FRAMES
                if perf_counter() >= stop_at:
                    break
            free = self.window - (self.sent - self.acked)
            if free < low_water and free < remaining:
                await self._wait_progress()
                continue
            self._write(min(free, CHUNK_FRAMES, remaining))
            await conn.drain()
            await asyncio.sleep(0)  # let replies in
        while self.acked < self.sent:
            await self._wait_progress()


def _frames(job: PublishJob, inbox: str) -> tuple[bytes, int, bytes]:
    """The frames one connection sends in turn, how many, and its inbox subscription."""
    payload = b"x" * job.payload_size
    if job.reply == "literal":
        frame = protocol.pub(job.subject, inbox, payload)
        return frame * CHUNK_FRAMES, CHUNK_FRAMES, protocol.sub(inbox, 1)
    # At least a window's worth of distinct reply subjects: no two publishes in flight share one.
    count = max(job.window, CHUNK_FRAMES)
    frames = protocol.pub_cycle(job.subject, inbox, payload, count)
    return frames, count, protocol.sub(inbox + ".*", 1)


async def run_publish(job: PublishJob, go: Go) -> PublishResult:
    pid = os.getpid()
    conns: list[Connection] = []
    pipelines: list[_Pipeline] = []
    for n in range(job.connections):
        i = job.first_connection + n
        conn = await connect(job.ports[i % len(job.ports)])
        inbox = "_INBOX." + protocol.inbox_id(f"p{pid}c{i}")
        frames, count, subscription = _frames(job, inbox)
        conn.write(subscription)
        await conn.flush()
        conns.append(conn)
        pipelines.append(_Pipeline(conn, frames, count, job))
    await go()
    start = perf_counter()
    window_open = start + job.warmup
    window_close = window_open + job.duration
    for p in pipelines:
        p.window_open, p.window_close = window_open, window_close
    try:
        await asyncio.gather(*(p.run(window_close) for p in pipelines))
    finally:
        for conn in conns:
            conn.close()
    errors = [p for p in pipelines if p.errors]
    in_window = sum(p.in_window for p in pipelines)
    elapsed = max(p.last_ack for p in pipelines) - start
    acked = sum(p.acked for p in pipelines)
    if in_window or not job.duration:
        rate, rate_from = in_window / job.duration if job.duration else 0.0, "window"
    else:
        # A server that answers in bursts further apart than the window (nats-server with
        # sync_interval: always, when fsync is slow): every ack over the whole run instead.
        rate, rate_from = acked / elapsed, "whole run"
    return PublishResult(
        rate=rate,
        rate_from=rate_from,
        acked_in_window=in_window,
        window_seconds=job.duration,
        sent=sum(p.sent for p in pipelines),
        acked=acked,
        errors=sum(p.errors for p in pipelines),
        first_error=errors[0].first_error if errors else "",
        elapsed=elapsed,
    )


# -- open-loop publishing ----------------------------------------------------------------------


async def run_paced(job: PacedJob, go: Go) -> PacedResult:
    conn = await connect(job.port)
    inbox = f"_INBOX.l{os.getpid()}".encode()
    conn.write(protocol.sub(inbox.decode() + ".*", 1))
    await conn.flush()
    total = max(1, round(job.rate * job.duration))
    sent_at = array("d", bytes(8 * total))
    subjects = [s.encode() for s in job.subjects]
    payload = b"x" * job.payload_size
    skip = len(inbox) + 1
    first_kept = round(job.rate * job.warmup)
    result = PacedResult()
    answered = bytearray(total)

    def on_messages(msgs: list[Message], t: float) -> None:
        for m in msgs:
            i = int(m[0][skip:])
            answered[i] = 1
            if m[3] is None and m[4].startswith(b'{"stream"'):
                if i >= first_kept:
                    result.latencies.append(t - sent_at[i])
            else:
                result.errors += 1
                if not result.first_error:
                    result.first_error = describe(m)
        result.acked += len(msgs)

    conn.on_messages = on_messages
    await go()
    start = perf_counter()
    i = 0
    n_subjects = len(subjects)
    result.scheduled = total
    while i < total:
        now = perf_counter()
        if job.max_outstanding and i - result.acked > job.max_outstanding:
            result.overloaded_at = now - start
            break
        due = min(total, int((now - start) * job.rate) + 1)
        if due > i:
            result.max_send_lag = max(result.max_send_lag, now - (start + i / job.rate))
            conn.write(
                b"".join(
                    b"PUB %b %b.%d %d\r\n%b\r\n"
                    % (subjects[j % n_subjects], inbox, j, job.payload_size, payload)
                    for j in range(i, due)
                )
            )
            written = perf_counter()
            for j in range(i, due):
                sent_at[j] = written
            i = due
        delay = start + i / job.rate - perf_counter()
        await asyncio.sleep(max(delay, 0.0))
    result.sent = i
    await _drain(result, job.drain)
    result.elapsed = perf_counter() - start
    conn.close()
    if result.unanswered:
        # Still waiting when the drain ended: count them as having waited until now, so the
        # percentiles of an overloaded server are lower bounds rather than flattering.
        now = perf_counter()
        result.latencies.extend(
            now - sent_at[j] for j in range(first_kept, result.sent) if not answered[j]
        )
    return result


async def _drain(result: PacedResult, limit: float) -> None:
    """Wait for every answer to what was sent, at most `limit` seconds."""
    deadline = perf_counter() + limit
    while result.acked < result.sent and perf_counter() < deadline:
        await asyncio.sleep(0.02)
    result.unanswered = result.sent - result.acked


# -- fetching ---------------------------------------------------------------------------------


class _Fetcher:
    """Pull requests for one consumer, `outstanding` at a time, acking every message.

    Each request has its own inbox and subscription id: delivered messages carry the
    stream's subject, so the sid is what says which request a message answers.
    """

    def __init__(
        self,
        conn: Connection,
        inbox: str,
        sids: Iterator[int],
        stream: str,
        durable: str,
        expected: int,
        job: FetchJob,
        result: FetchResult,
    ) -> None:
        self.conn = conn
        self.inbox = inbox
        self.sids = sids
        self.next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self.expected = expected
        self.batch = job.batch
        self.request = json.dumps({"batch": job.batch, "expires": int(job.expires * 1e9)}).encode()
        self.outstanding = job.outstanding
        self.result = result
        self.received = 0
        self.open: dict[bytes, int] = {}  # sid of an open request -> messages delivered to it
        self.done = asyncio.Event()
        self.progress = asyncio.Event()
        conn.on_messages = self.on_messages

    def _request_more(self) -> None:
        frames: list[bytes] = []
        while len(self.open) < self.outstanding and (
            self.received + len(self.open) * self.batch < self.expected
        ):
            sid = next(self.sids)
            reply = f"{self.inbox}.{sid}"
            self.open[str(sid).encode()] = 0
            frames.append(protocol.sub(reply, sid))
            frames.append(protocol.pub(self.next_subject, reply, self.request))
        if frames:
            self.conn.write(b"".join(frames))

    def _close(self, sid: bytes) -> None:
        del self.open[sid]
        self.conn.write(b"UNSUB %b\r\n" % sid)

    def on_messages(self, msgs: list[Message], t: float) -> None:
        acks: list[bytes] = []
        open_requests = self.open
        result = self.result
        for _, sid, reply, headers, payload in msgs:
            count = open_requests.get(sid)
            if reply is not None:
                self.received += 1
                result.payload_bytes += len(payload)
                acks.append(b"PUB %b 0\r\n\r\n" % reply)
                if count is not None:
                    if count + 1 >= self.batch:
                        self._close(sid)
                    else:
                        open_requests[sid] = count + 1
            else:
                code = protocol.status_code(headers)
                result.statuses[code] = result.statuses.get(code, 0) + 1
                if code != 100 and count is not None:  # not a heartbeat: the request is over
                    self._close(sid)
        if acks:
            self.conn.write(b"".join(acks))
        self.progress.set()
        if self.received >= self.expected:
            self.done.set()
        else:
            self._request_more()

    async def run(self) -> None:
        self._request_more()
        last_received, last_progress = -1, perf_counter()
        while not self.done.is_set():
            if self.received != last_received:
                last_received, last_progress = self.received, perf_counter()
            elif perf_counter() - last_progress > STALL_SECONDS:
                # Statuses (408 for an expired request) may keep coming; messages do not.
                # Reported, not raised: the run goes on and the report shows it.
                self.result.errors.append(
                    f"{self.next_subject}: no message for {STALL_SECONDS:g}s at "
                    f"{self.received} of {self.expected}; statuses so far {self.result.statuses}"
                )
                break
            self.progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.progress.wait(), 1.0)
            if self.conn.error is not None:
                raise JobError(f"connection failed: {self.conn.error}")
        for sid in list(self.open):
            self._close(sid)
        self.result.messages += self.received


async def run_fetch(job: FetchJob, go: Go) -> FetchResult:
    conn = await connect(job.port)
    inbox = f"_INBOX.f{os.getpid()}"
    sids = itertools.count(1)
    result = FetchResult()
    await go()
    start = perf_counter()
    try:
        for stream, durable, count in job.consumers:
            fetcher = _Fetcher(conn, inbox, sids, stream, durable, count, job, result)
            await fetcher.run()
        await conn.flush()  # every ack read by the server
        result.seconds = perf_counter() - start
    finally:
        conn.close()
    return result


# -- end to end -------------------------------------------------------------------------------


async def run_tail(job: TailJob, go: Go) -> TailResult:
    pid = os.getpid()
    consumer = await connect(job.port)
    publisher = await connect(job.port)
    inbox = f"_INBOX.t{pid}"
    consumer.write(protocol.sub(inbox, 1))
    acks = f"_INBOX.ta{pid}"
    publisher.write(protocol.sub(acks, 1))
    total = max(1, round(job.rate * job.duration))
    first_kept = round(job.rate * job.warmup)
    request = {"batch": total + 1000, "expires": int((job.duration + 60) * 1e9)}
    consumer.write(
        protocol.pub(
            f"$JS.API.CONSUMER.MSG.NEXT.{job.stream}.{job.durable}",
            inbox,
            json.dumps(request).encode(),
        )
    )
    await consumer.flush()
    await publisher.flush()
    await asyncio.sleep(0.2)  # let the server file the request before the clock starts
    result = TailResult()
    done = asyncio.Event()

    def on_delivery(msgs: list[Message], t: float) -> None:
        ack_frames: list[bytes] = []
        for _, _, reply, _, payload in msgs:
            if reply is None:
                continue  # a status: the request ended early; the count below will show it
            sent_ns, index = int(payload[:20]), int(payload[21:31])
            if index >= first_kept:
                result.latencies.append(t - sent_ns / 1e9)
            result.delivered += 1
            ack_frames.append(b"PUB %b 0\r\n\r\n" % reply)
        if ack_frames:
            consumer.write(b"".join(ack_frames))
        if result.delivered >= total:
            done.set()

    def on_ack(msgs: list[Message], t: float) -> None:
        for m in msgs:
            if m[3] is not None or not m[4].startswith(b'{"stream"'):
                result.publish_errors += 1
                if not result.first_error:
                    result.first_error = describe(m)

    consumer.on_messages = on_delivery
    publisher.on_messages = on_ack
    await go()
    start = perf_counter()
    head = f"PUB {job.subject} {acks} {job.payload_size}\r\n".encode()
    pad = b"x" * (job.payload_size - 31)
    for i in range(total):
        delay = start + i / job.rate - perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        payload = b"%020d %010d" % (time.perf_counter_ns(), i)
        publisher.write(head + payload + pad + protocol.CRLF)
        result.published += 1
    try:
        await asyncio.wait_for(done.wait(), STALL_SECONDS)
    except TimeoutError:
        raise JobError(f"{total - result.delivered} of {total} messages never delivered") from None
    finally:
        consumer.close()
        publisher.close()
    return result
