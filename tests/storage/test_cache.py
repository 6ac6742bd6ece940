"""SectionCache: a byte-bounded LRU."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infinistream.storage import Record, SectionCache
from infinistream.storage.cache import DEFAULT_CACHE_BYTES


def test_defaults() -> None:
    cache: SectionCache[bytes] = SectionCache()
    assert cache.max_bytes == DEFAULT_CACHE_BYTES == 64 * 1024 * 1024
    assert cache.size_bytes == 0 and len(cache) == 0


def test_get_put_and_counters() -> None:
    cache: SectionCache[bytes] = SectionCache(100)
    assert cache.get("obj", 8) is None
    assert cache.put("obj", 8, b"x" * 10)
    assert cache.get("obj", 8) == b"x" * 10
    assert cache.get("obj", 9) is None  # another section of the same object
    assert (cache.hits, cache.misses) == (1, 2)
    assert cache.size_bytes == 10
    assert ("obj", 8) in cache and ("obj", 9) not in cache
    assert (cache.hits, cache.misses) == (1, 2)  # membership is not a lookup


def test_evicts_least_recently_used_by_bytes() -> None:
    cache: SectionCache[bytes] = SectionCache(100)
    cache.put("a", 0, b"a" * 40)
    cache.put("b", 0, b"b" * 40)
    assert cache.get("a", 0) is not None  # "a" is now the most recently used
    cache.put("c", 0, b"c" * 40)  # 120 > 100: evict the LRU entry, "b"
    assert cache.get("b", 0) is None
    assert cache.get("a", 0) is not None and cache.get("c", 0) is not None
    assert cache.size_bytes == 80 and cache.evictions == 1
    cache.put("d", 0, b"d" * 100)  # exactly the budget: everything else goes
    assert len(cache) == 1 and cache.size_bytes == 100 and cache.evictions == 3


def test_oversized_value_is_not_cached() -> None:
    cache: SectionCache[bytes] = SectionCache(10)
    cache.put("a", 0, b"small")
    assert not cache.put("big", 0, b"x" * 11)
    assert cache.get("big", 0) is None
    assert cache.get("a", 0) == b"small"  # and it did not flush the cache either


def test_replace_updates_size() -> None:
    cache: SectionCache[bytes] = SectionCache(100)
    cache.put("a", 0, b"x" * 60)
    cache.put("a", 0, b"y" * 30)
    assert cache.size_bytes == 30 and len(cache) == 1
    assert cache.get("a", 0) == b"y" * 30
    cache.put("a", 0, b"z" * 101)  # too big: the old value is dropped, not kept stale
    assert cache.size_bytes == 0 and cache.get("a", 0) is None


def test_discard_and_clear() -> None:
    cache: SectionCache[bytes] = SectionCache(100)
    cache.put("a", 0, b"12345")
    cache.put("a", 100, b"123")
    cache.discard("a", 0)
    cache.discard("missing", 0)
    assert cache.size_bytes == 3 and len(cache) == 1
    cache.clear()
    assert cache.size_bytes == 0 and len(cache) == 0


def test_weigher_for_decoded_records() -> None:
    def weigh(recs: list[Record]) -> int:
        return sum(len(r.subject) + len(r.headers) + len(r.data) + 64 for r in recs)

    cache: SectionCache[list[Record]] = SectionCache(200, weigher=weigh)
    recs = [Record("s", b"", b"x" * 10)]
    cache.put("o", 8, recs)
    assert cache.size_bytes == 75
    assert cache.get("o", 8) is recs


def test_negative_budget_rejected() -> None:
    with pytest.raises(ValueError):
        SectionCache(-1)


ops = st.lists(
    st.tuples(
        st.sampled_from(["get", "put", "discard"]),
        st.sampled_from(["a", "b", "c"]),
        st.integers(0, 3),
        st.integers(0, 60),
    ),
    max_size=200,
)


@given(ops)
def test_matches_reference_model(operations: list[tuple[str, str, int, int]]) -> None:
    """Against an obviously-correct model: same contents, size and counters."""
    budget = 100
    cache: SectionCache[bytes] = SectionCache(budget)
    model: OrderedDict[tuple[str, int], bytes] = OrderedDict()
    hits = misses = 0
    for op, obj, off, n in operations:
        key = (obj, off)
        if op == "get":
            got = cache.get(obj, off)
            if key in model:
                model.move_to_end(key)
                hits += 1
                assert got == model[key]
            else:
                misses += 1
                assert got is None
        elif op == "put":
            value = bytes([off]) * n
            model.pop(key, None)
            if n <= budget:
                model[key] = value
                while sum(map(len, model.values())) > budget:
                    model.popitem(last=False)
            cache.put(obj, off, value)
        else:
            model.pop(key, None)
            cache.discard(obj, off)
        assert cache.size_bytes == sum(map(len, model.values())) <= budget
        assert len(cache) == len(model)
    assert (cache.hits, cache.misses) == (hits, misses)


def test_evict_drops_every_section_of_an_object_and_refuses_it_until_readmitted() -> None:
    cache: SectionCache[bytes] = SectionCache(1000)
    cache.put("gone", 0, b"a" * 10)
    cache.put("gone", 10, b"b" * 10)
    cache.put("kept", 0, b"c" * 10)
    assert cache.evict("gone") == 2
    assert ("gone", 0) not in cache and ("gone", 10) not in cache and ("kept", 0) in cache
    assert cache.size_bytes == 10
    assert cache.put("gone", 0, b"a" * 10) is False and ("gone", 0) not in cache
    cache.readmit("gone")
    assert cache.put("gone", 0, b"a" * 10) is True and cache.size_bytes == 20
