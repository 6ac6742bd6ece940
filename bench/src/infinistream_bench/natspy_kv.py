"""nats-py's Key-Value API as applications use it: the Key-Value rows of the benchmark.

Jobs run in a load-generator worker, as `natspy`'s do: every put, get and watch goes through
`nats.js.kv.KeyValue` (a put is `js.publish` to `$KV.<bucket>.<key>`, a get is a direct get
or a `STREAM.MSG.GET` request, a watch is an ordered push consumer), so the figures are what a
Python application gets, client costs included.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import nats.errors
from nats.js.kv import KeyValue

from infinistream_bench.connection import STALL_SECONDS, JobError
from infinistream_bench.jobs import (
    KvOpsResult,
    KvWatchResult,
    NatsPyKvGetJob,
    NatsPyKvPutJob,
    NatsPyKvWatchJob,
)
from infinistream_bench.loadgen import Go
from infinistream_bench.natspy import connect

perf_counter = time.perf_counter
# Puts kept in flight while a get job fills its bucket (set-up, not measured).
FILL_IN_FLIGHT = 256
# Bytes of a watched value that carry the put's number.
NUMBER_BYTES = 12


def watched_puts(rate: float, seconds: float) -> int:
    """How many puts a watch job makes in `seconds` at `rate` (put n is due at n / rate)."""
    return round(rate * seconds)


def _note(result: KvOpsResult | KvWatchResult, exc: BaseException) -> None:
    result.errors += 1
    if not result.first_error:
        result.first_error = f"{type(exc).__name__}: {exc}"


def _window_rate(result: KvOpsResult, in_window: int, duration: float, run: float) -> None:
    """Operations completed in the window per second; over the whole run for a server whose
    answers come further apart than the window (nats-server with sync always, in a quick run)."""
    if in_window or not result.ops:
        result.rate = in_window / duration if duration > 0 else 0.0
    else:
        result.rate_from = "whole run"
        result.rate = result.ops / run if run > 0 else 0.0


async def run_put(job: NatsPyKvPutJob, go: Go) -> KvOpsResult:
    nc = await connect(job.port)
    result = KvOpsResult()
    try:
        kv = await nc.jetstream().create_key_value(bucket=job.bucket)
        keys = [f"k.{i}" for i in range(job.keys)]
        value = b"x" * job.payload_size
        turn = itertools.count()
        await go()
        start = perf_counter()
        open_at, close_at = start + job.warmup, start + job.warmup + job.duration
        in_window, last = 0, start
        timed = job.tasks == 1  # with many in flight a put's time is mostly its queue

        async def putter() -> None:
            nonlocal in_window, last
            while (t0 := perf_counter()) < close_at:
                try:
                    await kv.put(keys[next(turn) % job.keys], value)
                except nats.errors.Error as exc:
                    _note(result, exc)
                    continue
                last = perf_counter()
                result.ops += 1
                if open_at <= last < close_at:
                    in_window += 1
                if timed and t0 >= open_at:
                    result.latencies.append(last - t0)

        await asyncio.gather(*(putter() for _ in range(job.tasks)))
        _window_rate(result, in_window, job.duration, last - start)
    finally:
        await nc.close()
    return result


async def _fill(kv: KeyValue, keys: list[str], value: bytes) -> None:
    """Every key put once, FILL_IN_FLIGHT at a time."""
    for i in range(0, len(keys), FILL_IN_FLIGHT):
        await asyncio.gather(*(kv.put(key, value) for key in keys[i : i + FILL_IN_FLIGHT]))


async def run_get(job: NatsPyKvGetJob, go: Go) -> KvOpsResult:
    nc = await connect(job.port)
    result = KvOpsResult()
    try:
        kv = await nc.jetstream().create_key_value(bucket=job.bucket, direct=job.direct)
        keys = [f"k.{i}" for i in range(job.keys)]
        await _fill(kv, keys, b"x" * job.payload_size)
        turn = itertools.count()
        await go()
        start = perf_counter()
        open_at, close_at = start + job.warmup, start + job.warmup + job.duration
        in_window, last = 0, start
        while (t0 := perf_counter()) < close_at:
            key = keys[next(turn) % job.keys]
            try:
                entry = await kv.get(key)
            except nats.errors.Error as exc:
                _note(result, exc)
                continue
            last = perf_counter()
            if entry.key != key or entry.value is None or len(entry.value) != job.payload_size:
                _note(result, JobError(f"kv.get({key!r}) answered {entry!r}"))
                continue
            result.ops += 1
            if last < close_at and t0 >= open_at:
                in_window += 1
                result.latencies.append(last - t0)
        _window_rate(result, in_window, job.duration, last - start)
    finally:
        await nc.close()
    return result


async def run_watch(job: NatsPyKvWatchJob, go: Go) -> KvWatchResult:
    putter_nc = await connect(job.port)
    watcher_nc = await connect(job.port)
    result = KvWatchResult()
    try:
        kv = await putter_nc.jetstream().create_key_value(bucket=job.bucket)
        watched = await watcher_nc.jetstream().key_value(job.bucket)
        watcher = await watched.watch("w.>")
        # An empty bucket: nats-py yields None at once (nothing pending). (nats-py leaves
        # KeyWatcher's methods unannotated.)
        first = await watcher.updates(timeout=STALL_SECONDS)  # type: ignore[no-untyped-call]
        if first is not None:
            raise JobError(f"the watcher of a new bucket began with {first!r}")
        total = watched_puts(job.rate, job.warmup + job.duration)
        measured_from = watched_puts(job.rate, job.warmup)
        sent: dict[int, float] = {}  # put number -> when its put was called

        async def watch() -> None:
            async for entry in watcher:
                seen_at = perf_counter()
                if entry is None or entry.value is None:
                    continue
                n = int(entry.value[:NUMBER_BYTES])
                t0 = sent.pop(n, None)
                if t0 is None:
                    continue  # seen already (never expected of an ordered consumer)
                result.seen += 1
                if n >= measured_from:
                    result.latencies.append(seen_at - t0)

        await go()
        consumer = asyncio.ensure_future(watch())
        try:
            start = perf_counter()
            filler = b"x" * max(0, job.payload_size - NUMBER_BYTES)
            for n in range(total):
                lag = perf_counter() - (start + n / job.rate)
                if lag < 0:
                    await asyncio.sleep(-lag)
                result.max_send_lag = max(result.max_send_lag, lag)
                sent[n] = perf_counter()
                try:
                    await kv.put(f"w.{n % job.keys}", b"%012d" % n + filler)
                except nats.errors.Error as exc:
                    _note(result, exc)
                    continue
                result.put += 1
            # Every acked put seen, or the watcher stalled.
            seen, progress = result.seen, perf_counter()
            while result.seen < result.put and perf_counter() - progress < STALL_SECONDS:
                await asyncio.sleep(0.005)
                if result.seen != seen:
                    seen, progress = result.seen, perf_counter()
        finally:
            consumer.cancel()
            await watcher.stop()  # type: ignore[no-untyped-call]
    finally:
        await putter_nc.close()
        await watcher_nc.close()
    return result
