"""The index cache's holds when tasks interleave: a mirror's copier reads its origin while a
commit holds the cache, and either may end first."""

from __future__ import annotations

from collections.abc import Hashable

from infinistream.stream.index_cache import IndexCache


class _Owner:
    def __init__(self) -> None:
        self.evicted: list[Hashable] = []

    def evict(self, key: Hashable) -> None:
        self.evicted.append(key)


def test_holds_of_concurrent_tasks_end_in_any_order() -> None:
    # Two open holds with the same items are equal lists: the later one ending first must
    # not take the earlier one's place, which then charges an item and ends.
    cache = IndexCache(1_000)
    owner = _Owner()
    first, second = cache.hold(), cache.hold()
    first.__enter__()
    second.__enter__()
    second.__exit__(None, None, None)
    cache.charge(owner, "a", 10)
    first.__exit__(None, None, None)
    # Nothing is held any more: a charge over the budget evicts the item.
    cache.charge(owner, "b", 2_000)
    assert "a" in owner.evicted


def test_grow_adds_to_an_item_held_and_refuses_one_not_held() -> None:
    cache = IndexCache(1_000)
    owner = _Owner()
    assert not cache.grow(owner, "page", 10)
    assert cache.used == 0
    cache.charge(owner, "page", 300)
    assert cache.grow(owner, "page", 50)
    assert cache.used == 350
    # Growth counts against the budget as a charge does: past it, the item goes.
    assert cache.grow(owner, "page", 700)
    assert owner.evicted == ["page"]
    assert cache.used == 0
