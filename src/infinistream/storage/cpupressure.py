"""Whether runnable threads on this machine wait for a core: Linux's pressure stall information.

`/proc/pressure/cpu` says, over the last ten seconds, the share of time at least one runnable
thread had no core to run on (`some avg10`, a percentage). A thread woken from a disk sync on
such a machine may wait a time slice of another process (milliseconds) before it runs; on a
machine with an idle core it runs at once. `CoreHold` spins only on the first kind.

Read at most once per `REFRESH_SECONDS`: the kernel's average moves every two seconds, and a
flush must not pay a file read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["CONTENDED_PERCENT", "PSI_CPU", "REFRESH_SECONDS", "CpuPressure"]

PSI_CPU = "/proc/pressure/cpu"

# Above this share of time with a thread waiting for a core, a woken thread is likely enough
# to wait that holding the core pays: a hold costs about 0.1-0.2 ms per sync, a wait a time
# slice (3-4 ms). The share counts this agent's own threads and its clients too: a sequential
# publisher and its agent alone on 2 idle cores read 4%, 8-10% while the agent holds, where
# holding cost them 0.2 ms a publish; other work on the machine read 22-88%, where holding
# saved milliseconds (docs/benchmarks.md, "Durable speed: the targets", the core hold).
CONTENDED_PERCENT = 15.0

REFRESH_SECONDS = 1.0


def read_some_avg10(path: str = PSI_CPU) -> float | None:
    """The `some avg10` figure of a pressure file; None where there is none (a kernel built
    without it, or booted with `psi=0`) or it cannot be read."""
    try:
        with open(path, "rb") as f:
            first = f.readline()
    except OSError:
        return None
    for pair in first.split():
        name, _, value = pair.partition(b"=")
        if name == b"avg10":
            try:
                return float(value)
            except ValueError:
                return None
    return None


@dataclass(slots=True)
class CpuPressure:
    """`contended()`: whether threads have lately waited for a core (see the module
    docstring). Where the kernel does not tell, it answers True: the caller keeps the
    behaviour that is safe on a busy machine."""

    read: Callable[[], float | None] = read_some_avg10
    threshold: float = CONTENDED_PERCENT
    clock: Callable[[], float] = time.monotonic
    refresh: float = REFRESH_SECONDS
    # When the figure is read next, and what it said last.
    _next: float = field(default=float("-inf"), init=False)
    _contended: bool = field(default=True, init=False)

    def contended(self) -> bool:
        now = self.clock()
        if now >= self._next:
            self._next = now + self.refresh
            avg10 = self.read()
            self._contended = avg10 is None or avg10 >= self.threshold
        return self._contended
