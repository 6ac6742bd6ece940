"""Keeping the core while the event loop waits on the disk.

A flush of the write buffer on an otherwise idle agent makes its object durable and commits it on
the loop's own thread (`localstore`, `metadata.sqlite`): the thread sleeps in `fdatasync`, and
its core goes to whatever else the machine runs. On a busy machine the thread, woken when the
disk is done, then waits for that other process's time slice to end before it runs again:
milliseconds, where the disk took a fraction of one (measured on a shared 2-core machine: 4 ms
against 0.2 ms per `fdatasync`). Go's runtime does not meet this, as its idle threads spin a
while before they sleep; nats-server answers from such a runtime.

`CoreHold` is that spinning thread for the agent: while the loop's thread waits on the disk, a
thread pinned to the same core yields it again and again (`sched_yield`, outside the GIL), so
the core stays with this process and the woken thread runs at once. It spins only within
`hold()`, around a blocking call, and for at most `SPIN_SECONDS` of each: as Go's idle threads
spin a while and then sleep. A wait longer than that is not the disk of an idle machine but a
busy one, where spinning on takes a core from the work waited on (the commit's own thread) and
from the other processes: agents publishing without a pause, each flush waiting tens of
milliseconds on a loaded 2-core machine, spun through 80% of their time.

Holding has a price: waking the thread and sharing the GIL with it around the sync cost about
0.1 ms per flush, which a machine with an idle core gains nothing for (its woken thread runs at
once). So a hold spins only while the machine's threads have lately waited for a core
(`cpupressure`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
from collections.abc import Callable, Iterator

from .cpupressure import CpuPressure
from .libc import libc_function

__all__ = ["SPIN_SECONDS", "CoreHold"]

# How long one hold spins at most: a disk sync of an idle machine takes a fraction of a
# millisecond, and being woken on a busy one a few (the module docstring).
SPIN_SECONDS = 0.005


_getcpu = libc_function("sched_getcpu", [], ctypes.c_int)


class CoreHold:
    """A thread that holds the caller's core while `hold()` is entered and `contended()`
    says cores are scarce; see the module docstring. Started on first use; a daemon."""

    def __init__(
        self,
        spin_seconds: float = SPIN_SECONDS,
        contended: Callable[[], bool] | None = None,
    ) -> None:
        self.spin_seconds = spin_seconds
        self._contended = contended if contended is not None else CpuPressure().contended
        self._active = 0
        # Holds entered so far, and the last of them the thread spun for: it spins once for each.
        self._entered = 0
        self._spun = 0
        self._wake = threading.Condition()
        self._cpu = -1
        self._thread: threading.Thread | None = None
        self.enabled = _getcpu is not None and hasattr(os, "sched_setaffinity")

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Keep this thread's core busy (yielding) until the block ends, if cores are scarce."""
        if not self.enabled or not self._contended():
            yield
            return
        assert _getcpu is not None
        cpu = _getcpu()
        with self._wake:
            self._cpu = cpu
            self._active += 1
            self._entered += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="core-hold", daemon=True)
                self._thread.start()
            self._wake.notify()
        try:
            yield
        finally:
            with self._wake:
                self._active -= 1

    def _run(self) -> None:
        pinned = -1
        yield_ = os.sched_yield
        clock = time.monotonic
        while True:
            with self._wake:
                while not self._active or self._entered == self._spun:
                    self._wake.wait()
                cpu, self._spun = self._cpu, self._entered
            if cpu != pinned and cpu >= 0:
                try:
                    os.sched_setaffinity(0, {cpu})
                    pinned = cpu
                except OSError:
                    pinned = cpu  # not allowed there: spin wherever the kernel puts us
            until = clock() + self.spin_seconds
            while self._active and clock() < until:
                yield_()
