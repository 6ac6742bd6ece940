"""Load-generator worker processes, started once and given one job at a time.

A run hands each worker a job; every worker sets up (connects, subscribes) and reports ready;
when all are ready the caller's `on_start` runs (to read CPU counters) and every worker gets
`go` at the same moment. Workers are separate processes so that the load generator uses more
than one core, and are started with `spawn` so that none inherits the parent's threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import traceback
from collections.abc import Callable, Coroutine, Sequence
from multiprocessing.connection import Connection as Pipe
from multiprocessing.process import BaseProcess
from typing import Any

from infinistream_bench import loadgen, natspy, natspy_kv
from infinistream_bench.control import BenchError
from infinistream_bench.jobs import (
    FetchJob,
    Job,
    NatsPyFetchJob,
    NatsPyKvGetJob,
    NatsPyKvPutJob,
    NatsPyKvWatchJob,
    NatsPyPublishJob,
    PacedJob,
    PublishJob,
    Result,
)
from infinistream_bench.loadgen import Go
from infinistream_bench.systems import cpu_seconds

READY_TIMEOUT = 60.0


def _run(coro: Coroutine[Any, Any, Result]) -> Result:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    result: Result = uvloop.run(coro)
    return result


async def run_job(job: Job, go: Go) -> Result:
    if isinstance(job, PublishJob):
        return await loadgen.run_publish(job, go)
    if isinstance(job, PacedJob):
        return await loadgen.run_paced(job, go)
    if isinstance(job, FetchJob):
        return await loadgen.run_fetch(job, go)
    if isinstance(job, NatsPyPublishJob):
        return await natspy.run_publish(job, go)
    if isinstance(job, NatsPyFetchJob):
        return await natspy.run_fetch(job, go)
    if isinstance(job, NatsPyKvPutJob):
        return await natspy_kv.run_put(job, go)
    if isinstance(job, NatsPyKvGetJob):
        return await natspy_kv.run_get(job, go)
    if isinstance(job, NatsPyKvWatchJob):
        return await natspy_kv.run_watch(job, go)
    return await loadgen.run_tail(job, go)


async def _job(job: Job, pipe: Pipe) -> Result:
    loop = asyncio.get_running_loop()

    async def go() -> None:
        pipe.send(("ready", None))
        signal = await loop.run_in_executor(None, pipe.recv)
        if signal != "go":
            raise BenchError("run aborted")

    return await run_job(job, go)


def _serve(pipe: Pipe) -> None:
    """A worker's life: run jobs until told to stop (None)."""
    while True:
        job = pipe.recv()
        if job is None:
            return
        try:
            pipe.send(("done", _run(_job(job, pipe))))
        except BaseException:
            pipe.send(("error", traceback.format_exc()))


class WorkerPool:
    def __init__(self, size: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.pipes: list[Pipe] = []
        self.processes: list[BaseProcess] = []
        for n in range(size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(child,), name=f"loadgen-{n}", daemon=True)
            proc.start()
            child.close()
            self.pipes.append(parent)
            self.processes.append(proc)

    @property
    def size(self) -> int:
        return len(self.pipes)

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.processes if p.pid is not None)

    def run(
        self,
        jobs: Sequence[Job],
        timeout: float,
        on_start: Callable[[], None] | None = None,
    ) -> list[Result]:
        """Run one job per worker, started together; `timeout` bounds each job once started."""
        if len(jobs) > self.size:
            raise ValueError(f"{len(jobs)} jobs for {self.size} workers")
        pipes = self.pipes[: len(jobs)]
        for pipe, job in zip(pipes, jobs, strict=True):
            pipe.send(job)
        states = [self._receive(pipe, READY_TIMEOUT) for pipe in pipes]
        failed = [value for state, value in states if state == "error"]
        if failed:
            for pipe, (state, _) in zip(pipes, states, strict=True):
                if state == "ready":
                    pipe.send("abort")
                    self._receive(pipe, READY_TIMEOUT)
            raise BenchError(f"load generator failed to set up:\n{failed[0]}")
        if on_start is not None:
            on_start()
        for pipe in pipes:
            pipe.send("go")
        outcomes = [self._receive(pipe, timeout) for pipe in pipes]
        errors = [value for state, value in outcomes if state == "error"]
        if errors:
            raise BenchError(f"load generator job failed:\n{errors[0]}")
        return [value for _, value in outcomes]

    def _receive(self, pipe: Pipe, timeout: float) -> tuple[str, Any]:
        if not pipe.poll(timeout):
            raise BenchError(f"load generator worker silent for {timeout:.0f}s")
        message: tuple[str, Any] = pipe.recv()
        return message

    def close(self) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(BrokenPipeError, OSError):
                pipe.send(None)
        for proc in self.processes:
            proc.join(5)
            if proc.is_alive():
                proc.terminate()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
