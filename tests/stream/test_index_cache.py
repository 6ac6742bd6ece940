"""The agent's one budget for stream indexes: holds that overlap."""

from __future__ import annotations

from collections.abc import Hashable

from infinistream.stream.index_cache import IndexCache


class Owner:
    def __init__(self) -> None:
        self.evicted: list[Hashable] = []

    def evict(self, key: Hashable) -> None:
        self.evicted.append(key)


def test_holds_that_end_out_of_order_release_their_own_items() -> None:
    cache = IndexCache(budget=100)
    owner = Owner()
    first, second = cache.hold(), cache.hold()
    first.__enter__()
    second.__enter__()
    # Both holds are empty, equal lists: the one that ends must release its own, not the
    # other's, and the other still pins what is charged meanwhile until it ends.
    second.__exit__(None, None, None)
    cache.charge(owner, "a", 60)
    cache.charge(owner, "b", 60)
    assert owner.evicted == []
    first.__exit__(None, None, None)
    cache.charge(owner, "c", 60)
    assert owner.evicted == ["a", "b"]
    assert cache.used == 60
