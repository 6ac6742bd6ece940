"""CoreHold: a thread that keeps the caller's core while the caller waits on the disk."""

from __future__ import annotations

import os
import time

import pytest

from infinistream.storage.corehold import CoreHold

pytestmark = pytest.mark.skipif(not CoreHold().enabled, reason="needs sched_getcpu (Linux)")


def _thread_cpu_ticks(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _hold_thread(hold: CoreHold) -> int:
    assert hold._thread is not None and hold._thread.native_id is not None
    return hold._thread.native_id


def test_it_spins_on_the_callers_core_only_while_held() -> None:
    hold = CoreHold()
    with hold.hold():
        tid = _hold_thread(hold)
        before = _thread_cpu_ticks(tid)
        time.sleep(0.3)  # a blocking wait, the GIL released, as a disk sync is
        held = _thread_cpu_ticks(tid) - before
        # Pinned to the core the caller was on when it started to wait.
        assert os.sched_getaffinity(tid) == {hold._cpu}
    assert held > 0, "the hold thread did not run while held"
    time.sleep(0.05)  # it notices it is no longer held
    before = _thread_cpu_ticks(tid)
    time.sleep(0.3)
    assert _thread_cpu_ticks(tid) - before == 0, "the hold thread spins when nobody waits"
    # Held again: the same thread, running again.
    with hold.hold():
        assert _hold_thread(hold) == tid
        before = _thread_cpu_ticks(tid)
        time.sleep(0.3)
        assert _thread_cpu_ticks(tid) - before > 0
