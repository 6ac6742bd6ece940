"""Event-loop stalls, logged with where the loop was.

Everything an agent does runs on one event loop: a call that holds it (a sync that the disk
takes seconds over, a long computation) delays every client, every PubAck and every timer at
once, and from outside looks like an agent that forgot its work. The loop beats a few times a
second; a thread of its own looks at the beats and, when they stop for `threshold`, logs a
warning with the loop thread's stack at that moment, then how long the loop was away once it
beats again. The beat costs one timer callback per quarter threshold.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

# Long enough that a busy but healthy loop never reaches it; short against the timers it
# would delay (a TTL's expiry, a consumer's ack wait).
STALL_SECONDS = 1.0
# Frames of the loop thread's stack the warning shows, innermost last.
STACK_FRAMES = 12


@dataclass(eq=False)
class StallWatch:
    threshold: float = STALL_SECONDS
    clock: Callable[[], float] = time.monotonic
    _beat: float = field(default=0.0, init=False)

    async def run(self) -> None:
        """Beat until cancelled, watched by a thread of its own."""
        self._beat = self.clock()
        stop = threading.Event()
        watcher = threading.Thread(
            target=self._watch,
            args=(threading.get_ident(), stop),
            name="stall-watch",
            daemon=True,
        )
        watcher.start()
        try:
            while True:
                await asyncio.sleep(self.threshold / 4)
                self._beat = self.clock()
        finally:
            stop.set()

    def _watch(self, loop_thread: int, stop: threading.Event) -> None:
        stalled_since = 0.0  # the last beat before the stall being reported; 0: none
        while not stop.wait(self.threshold / 4):
            beat = self._beat
            if stalled_since and beat != stalled_since:
                log.warning("the event loop ran again after %.1f s", beat - stalled_since)
                stalled_since = 0.0
            away = self.clock() - beat
            if not stalled_since and away >= self.threshold:
                stalled_since = beat
                log.warning(
                    "the event loop has not run for %.1f s; it is at:\n%s",
                    away,
                    _stack_of(loop_thread),
                )


def _stack_of(thread: int) -> str:
    frame = sys._current_frames().get(thread)
    if frame is None:
        return "  (its thread is gone)"
    return "".join(traceback.format_stack(frame, limit=STACK_FRAMES)).rstrip()
