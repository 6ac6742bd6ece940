"""The agent's memory for stream indexes: one budget for every stream it serves.

Views of streams (`stream.view`) keep what they have read of a stream's index (summaries of
sections, the detail of some, subject records, tombstones) in their own maps, and charge each
item to the one `IndexCache` of the agent: when the total passes the budget, the items used
least recently are dropped from their views, whichever streams they belong to, and read again
when needed. So an agent's memory for indexes stays within the budget (`--index-cache`)
however many streams it serves and however long they are.

An operation that reads several items (a fetch, a commit's plan) takes a `hold`: the items it
loads are not dropped until it is done, so it never has to load what it just loaded again. Its
items may take the cache past the budget for as long as it runs; the first load after it
makes room again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Protocol

DEFAULT_INDEX_CACHE_BYTES = 64 * 1024 * 1024


class CacheOwner(Protocol):
    """A holder of cached items (a stream's view): told when one of its items is dropped."""

    def evict(self, key: Hashable) -> None: ...


class IndexCache:
    def __init__(self, budget: int = DEFAULT_INDEX_CACHE_BYTES) -> None:
        self.budget = budget
        self.used = 0
        self._items: OrderedDict[tuple[int, Hashable], tuple[CacheOwner, int]] = OrderedDict()
        self._pins: dict[tuple[int, Hashable], int] = {}
        self._holds: list[list[tuple[int, Hashable]]] = []
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._items)

    def charge(self, owner: CacheOwner, key: Hashable, cost: int) -> None:
        """`owner` keeps the item `key`, of about `cost` bytes; room is made for it."""
        ident = (id(owner), key)
        old = self._items.pop(ident, None)
        if old is not None:
            self.used -= old[1]
        self._items[ident] = (owner, cost)
        self.used += cost
        for hold in self._holds:
            hold.append(ident)
            self._pins[ident] = self._pins.get(ident, 0) + 1
        self._make_room()

    def grow(self, owner: CacheOwner, key: Hashable, extra: int) -> bool:
        """The item `key` grew by about `extra` bytes, as `charge` with its cost plus that
        would say; False, with nothing charged, when the cache does not hold it."""
        ident = (id(owner), key)
        item = self._items.get(ident)
        if item is None:
            return False
        self.charge(owner, key, item[1] + extra)
        return True

    def touch(self, owner: CacheOwner, key: Hashable) -> None:
        """The item was used: it goes last in the eviction order."""
        ident = (id(owner), key)
        if ident in self._items:
            self._items.move_to_end(ident)

    def forget(self, owner: CacheOwner, key: Hashable) -> None:
        """The owner dropped the item itself."""
        entry = self._items.pop((id(owner), key), None)
        if entry is not None:
            self.used -= entry[1]

    def forget_owner(self, owner: CacheOwner) -> None:
        """The owner is gone (a view dropped): everything it kept."""
        mine = [ident for ident, (o, _) in self._items.items() if o is owner]
        for ident in mine:
            self.used -= self._items.pop(ident)[1]

    @contextmanager
    def hold(self) -> Iterator[None]:
        """While inside, items charged are not dropped (see the module docstring)."""
        held: list[tuple[int, Hashable]] = []
        self._holds.append(held)
        try:
            yield
        finally:
            # By identity: holds of concurrent tasks end in any order, and two of them with
            # the same items are equal lists (`remove` would take the other's).
            del self._holds[next(i for i, h in enumerate(self._holds) if h is held)]
            for ident in held:
                left = self._pins[ident] - 1
                if left:
                    self._pins[ident] = left
                else:
                    del self._pins[ident]

    def _make_room(self) -> None:
        over = self.used - self.budget
        if over <= 0:
            return
        victims: list[tuple[int, Hashable]] = []
        for ident, (_, cost) in self._items.items():  # least recently used first
            if ident in self._pins:
                continue
            victims.append(ident)
            over -= cost
            if over <= 0:
                break
        for ident in victims:
            owner, cost = self._items.pop(ident)
            self.used -= cost
            self.evictions += 1
            owner.evict(ident[1])
