"""CoreHold: a thread that keeps the caller's core while the caller waits on the disk."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from infinistream.storage.corehold import CoreHold

pytestmark = pytest.mark.skipif(not CoreHold().enabled, reason="needs sched_getcpu (Linux)")


def _scarce() -> bool:
    """Cores are scarce: what a busy machine's pressure says."""
    return True


def _thread_cpu_ticks(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _thread_state(tid: int) -> str:
    with open(f"/proc/self/task/{tid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _until(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Whether `condition` came true: checked again and again, the timeout a safety net for a
    busy machine (the hold thread may wait a while for a time slice)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _hold_thread(hold: CoreHold) -> int:
    assert hold._thread is not None and hold._thread.native_id is not None
    return hold._thread.native_id


def test_it_spins_on_the_callers_core_only_while_held() -> None:
    hold = CoreHold(spin_seconds=3600, contended=_scarce)  # no bound within the test
    with hold.hold():
        tid = _hold_thread(hold)
        before = _thread_cpu_ticks(tid)
        # A blocking wait, the GIL released, as a disk sync is: the thread runs meanwhile.
        assert _until(lambda: _thread_cpu_ticks(tid) > before), "it did not run while held"
        # Pinned to the core the caller was on when it started to wait.
        assert os.sched_getaffinity(tid) == {hold._cpu}
    # It notices it is no longer held, and sleeps on its condition ...
    assert _until(lambda: _thread_state(tid) == "S"), "the hold thread still runs"
    before = _thread_cpu_ticks(tid)
    time.sleep(0.3)
    # ... and spends nothing while nobody waits.
    assert _thread_cpu_ticks(tid) - before == 0, "the hold thread spins when nobody waits"
    # Held again: the same thread, running again.
    with hold.hold():
        assert _hold_thread(hold) == tid
        before = _thread_cpu_ticks(tid)
        assert _until(lambda: _thread_cpu_ticks(tid) > before)


def _thread_cpu_ns(tid: int) -> int:
    """Nanoseconds the thread ran (schedstat: exact, where the tick counts sample)."""
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        return int(f.read().split()[0])


def test_it_spins_for_a_bounded_time_per_hold() -> None:
    """A long wait (a busy machine's) is spun through for `spin_seconds` only, then the thread
    sleeps while the hold lasts: it takes no core from the work waited on. A new hold spins
    again."""
    hold = CoreHold(spin_seconds=0.2, contended=_scarce)
    with hold.hold():
        tid = _hold_thread(hold)
        assert _until(lambda: _thread_state(tid) == "S"), "it spins past its bound"
        before = _thread_cpu_ns(tid)
        time.sleep(0.3)
        assert _thread_cpu_ns(tid) == before, "it spins again within one hold"
    with hold.hold():
        assert _hold_thread(hold) == tid
        assert _until(lambda: _thread_cpu_ns(tid) > before), "a new hold did not spin"


def test_it_does_not_spin_while_cores_are_free() -> None:
    """On a machine where no thread waits for a core, a woken thread runs at once: a hold
    starts no thread and spins nothing; once cores are scarce, it spins again."""
    scarce = [False]
    hold = CoreHold(spin_seconds=3600, contended=lambda: scarce[0])
    with hold.hold():
        time.sleep(0.05)
        assert hold._thread is None, "a hold started its thread while cores were free"
    scarce[0] = True
    with hold.hold():
        tid = _hold_thread(hold)
        before = _thread_cpu_ticks(tid)
        assert _until(lambda: _thread_cpu_ticks(tid) > before), "it did not run while held"
