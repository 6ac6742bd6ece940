"""A byte-bounded LRU of object sections, keyed by ``(object_key, section_offset)``.

Objects are write-once (invariant 3), so a cached section can never go stale: there is no
invalidation, only eviction, and `evict` for an object a GDPR erase names (its bytes must go,
and stay out until `readmit`: the object may be read again until the janitor deletes it).
The agent puts the sections it has just written (so consumers
that follow the head of a stream read them without a GET) and the ones it has just read.

Not thread-safe: it lives on the agent's event loop, like everything that uses it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sized
from typing import Generic, TypeVar

__all__ = ["DEFAULT_CACHE_BYTES", "SectionCache"]

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024

V = TypeVar("V", bound=Sized)
CacheKey = tuple[str, int]


class SectionCache(Generic[V]):
    """LRU by bytes. Values are usually ``bytes``; their size is ``len(value)`` unless a
    ``weigher`` says otherwise (e.g. for decoded record lists)."""

    def __init__(
        self,
        max_bytes: int = DEFAULT_CACHE_BYTES,
        *,
        weigher: Callable[[V], int] = len,
    ) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self._weigher = weigher
        self._items: OrderedDict[CacheKey, tuple[V, int]] = OrderedDict()
        self._size = 0
        # Objects named by an erase not complete yet: never cached (see `evict`).
        self._refused: set[str] = set()
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    @property
    def size_bytes(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        # A membership test is not a use: it neither counts nor refreshes recency.
        return key in self._items

    def get(self, object_key: str, offset: int) -> V | None:
        entry = self._items.get((object_key, offset))
        if entry is None:
            self.misses += 1
            return None
        self._items.move_to_end((object_key, offset))
        self.hits += 1
        return entry[0]

    def put(self, object_key: str, offset: int, value: V) -> bool:
        """Cache ``value``; returns False if it is larger than the whole cache."""
        if object_key in self._refused:
            return False
        size = self._weigher(value)
        key = (object_key, offset)
        old = self._items.pop(key, None)
        if old is not None:
            self._size -= old[1]
        if size > self.max_bytes:
            return False
        self._items[key] = (value, size)
        self._size += size
        while self._size > self.max_bytes:
            _, (_, evicted) = self._items.popitem(last=False)
            self._size -= evicted
            self.evictions += 1
        return True

    def discard(self, object_key: str, offset: int) -> None:
        old = self._items.pop((object_key, offset), None)
        if old is not None:
            self._size -= old[1]

    def evict(self, object_key: str) -> int:
        """Drop every entry of `object_key` and cache none until `readmit`; how many went."""
        self._refused.add(object_key)
        gone = [key for key in self._items if key[0] == object_key]
        for key in gone:
            self.discard(*key)
        return len(gone)

    def refuses(self, object_key: str) -> bool:
        return object_key in self._refused

    def readmit(self, object_key: str) -> None:
        """Cache `object_key` again (its erase is complete: the object no longer exists)."""
        self._refused.discard(object_key)

    def clear(self) -> None:
        self._items.clear()
        self._size = 0
