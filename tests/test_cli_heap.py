"""The `infinistream` command's own work around serving."""

from __future__ import annotations

import gc
import weakref

from infinistream import cli


class _Node:
    def __init__(self) -> None:
        self.peer: _Node | None = None


def test_a_started_agents_heap_is_frozen_after_its_garbage_is_collected() -> None:
    # A cycle left by starting: unreachable, freed only by the cyclic collector.
    garbage = _Node()
    garbage.peer = garbage
    gone = weakref.ref(garbage)
    del garbage
    kept = _Node()
    before = gc.get_freeze_count()
    try:
        cli._settle_heap()
        assert gone() is None, "garbage was frozen, never to be freed"
        assert gc.get_freeze_count() > before
        assert not any(o is kept for o in gc.get_objects()), "the heap is still collected"
    finally:
        gc.unfreeze()
