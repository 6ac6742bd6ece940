"""nats-py as applications use it: the real-client rows of the benchmark.

Jobs run in a load-generator worker, as `loadgen`'s do; unlike them, every publish, PubAck,
fetch and ack goes through the client library (its request inbox, its futures, its message
objects), so the figures are what a Python application gets, client costs included.
"""

from __future__ import annotations

import asyncio
import inspect
import time

import nats
import nats.errors
from nats.aio.client import Client
from nats.js.api import PubAck
from nats.js.client import JetStreamContext

from infinistream_bench.connection import STALL_SECONDS, JobError
from infinistream_bench.jobs import (
    ClientFetchResult,
    ClientPublishResult,
    NatsPyFetchJob,
    NatsPyPublishJob,
)
from infinistream_bench.loadgen import Go

perf_counter = time.perf_counter


def async_publish_limit() -> int:
    """nats-py's default limit of `publish_async` publishes in flight (4,000 in 2.16)."""
    default = inspect.signature(JetStreamContext).parameters["publish_async_max_pending"].default
    return int(default)


async def connect(port: int) -> Client:
    async def quiet(exc: Exception) -> None:
        pass  # a failure shows as the job's error; nats-py would also log it

    return await nats.connect(
        f"nats://127.0.0.1:{port}", allow_reconnect=False, error_cb=quiet, connect_timeout=10
    )


def _note(result: ClientPublishResult, exc: BaseException) -> None:
    result.errors += 1
    if not result.first_error:
        result.first_error = f"{type(exc).__name__}: {exc}"


async def _publish_sequential(
    js: JetStreamContext, job: NatsPyPublishJob, result: ClientPublishResult
) -> tuple[float, int]:
    """`await js.publish()` until the window closes; the window's start and its acks."""
    payload = b"x" * job.payload_size
    start = perf_counter()
    open_at, close_at = start + job.warmup, start + job.warmup + job.duration
    in_window, last = 0, open_at
    while (t0 := perf_counter()) < close_at:
        try:
            await js.publish(job.subject, payload)
        except nats.errors.Error as exc:
            _note(result, exc)
            continue
        last = perf_counter()
        result.acked += 1
        if t0 >= open_at:
            result.latencies.append(last - t0)
            in_window += 1
    # Publishes are only begun in the window, so the window ends with the last PubAck.
    return last - open_at, in_window


async def _publish_async(
    js: JetStreamContext, job: NatsPyPublishJob, result: ClientPublishResult
) -> tuple[float, int]:
    """`await js.publish_async()` until the window closes, then wait for every PubAck."""
    payload = b"x" * job.payload_size
    start = perf_counter()
    open_at, close_at = start + job.warmup, start + job.warmup + job.duration
    counts = {"in_window": 0, "done": 0}
    last_ack = start

    def done(fut: asyncio.Future[PubAck]) -> None:
        nonlocal last_ack
        counts["done"] += 1
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            _note(result, exc)
            return
        result.acked += 1
        last_ack = perf_counter()
        if open_at <= last_ack < close_at:
            counts["in_window"] += 1

    async def publish() -> int:
        sent = 0
        while perf_counter() < close_at:
            fut = await js.publish_async(job.subject, payload)
            fut.add_done_callback(done)
            sent += 1
        await js.publish_async_completed()
        return sent

    task = asyncio.ensure_future(publish())
    # nats-py waits for a free slot without a timeout: watch for a server that stops acking.
    last_done, last_progress = -1, perf_counter()
    while not task.done():
        await asyncio.wait([task], timeout=1.0)
        if counts["done"] != last_done:
            last_done, last_progress = counts["done"], perf_counter()
        elif perf_counter() - last_progress > STALL_SECONDS:
            task.cancel()
            raise JobError(
                f"publish_async: no PubAck for {STALL_SECONDS:.0f}s "
                f"({js.publish_async_pending()} pending)"
            )
    await task
    if counts["in_window"] or not result.acked:
        return job.duration, counts["in_window"]
    # A server that answers in bursts further apart than the window (nats-server with
    # sync_interval: always): every ack over the whole run instead, as the raw rows do.
    result.rate_from = "whole run"
    return last_ack - start, result.acked


async def run_publish(job: NatsPyPublishJob, go: Go) -> ClientPublishResult:
    nc = await connect(job.port)
    js = nc.jetstream()
    result = ClientPublishResult()
    if job.mode == "async":
        result.in_flight_limit = async_publish_limit()
    await go()
    try:
        if job.mode == "sequential":
            seconds, in_window = await _publish_sequential(js, job, result)
        else:
            seconds, in_window = await _publish_async(js, job, result)
    finally:
        await nc.close()
    result.rate = in_window / seconds if seconds > 0 else 0.0
    return result


async def run_fetch(job: NatsPyFetchJob, go: Go) -> ClientFetchResult:
    nc = await connect(job.port)
    js = nc.jetstream()
    sub = await js.pull_subscribe_bind(consumer=job.durable, stream=job.stream)
    result = ClientFetchResult()
    await go()
    start = perf_counter()
    last_progress = start
    try:
        while result.messages < job.messages:
            try:
                msgs = await sub.fetch(job.batch, timeout=2.0)
            except nats.errors.TimeoutError:
                msgs = []
            for msg in msgs:
                await msg.ack()
            if msgs:
                result.messages += len(msgs)
                last_progress = perf_counter()
            elif perf_counter() - last_progress > STALL_SECONDS:
                result.errors.append(
                    f"nats-py fetch: no message for {STALL_SECONDS:g}s at "
                    f"{result.messages} of {job.messages}"
                )
                break
        await nc.flush()  # every ack read by the server
        result.seconds = perf_counter() - start
    finally:
        await nc.close()
    return result
