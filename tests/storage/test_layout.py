"""Object keys: the format agents and compaction write, and what the janitor and compaction read
back from a key."""

from __future__ import annotations

import pytest

from infinistream.storage import check_key
from infinistream.storage.layout import (
    compacted_key,
    is_objects_prefix,
    l0_key,
    level_of,
    level_prefix,
    objects_prefix,
    time_floor,
    written_ns_of,
)

T = 1_763_000_000_123_456_789


def test_keys_have_the_format_of_the_stores_in_use() -> None:
    # Stores written by earlier builds hold these keys: the format must not drift.
    assert l0_key("default", T, "a1b2", 7, "0f0f0f") == (
        "default/objects/l0/01763000000123456789-a1b2-00000007-0f0f0f.iso"
    )
    assert compacted_key("g", 2, 5, "abcdef012345") == (
        "g/objects/l2/00000000000000000005-cabcdef012345.iso"
    )
    assert objects_prefix("g") == "g/objects"
    assert level_prefix("g", 0) == "g/objects/l0"
    assert time_floor("g/objects/l1", 5) == "g/objects/l1/00000000000000000005"
    check_key(l0_key("default", T, "a1b2", 7, "0f0f0f"))
    check_key(compacted_key("g", 2, T, "abcdef012345"))


@pytest.mark.parametrize("time_ns", [0, 1, T, 10**20 - 1])
def test_level_and_time_round_trip(time_ns: int) -> None:
    flushed = l0_key("g", time_ns, "agent", 3, "aaaaaa")
    assert (level_of(flushed), written_ns_of(flushed)) == (0, time_ns)
    for level in (1, 2, 12):
        key = compacted_key("g", level, time_ns, "c0ffee")
        assert (level_of(key), written_ns_of(key)) == (level, time_ns)
        assert key.startswith(level_prefix("g", level) + "/")
        assert key.startswith(objects_prefix("g") + "/")


def test_keys_sort_by_time_within_a_level() -> None:
    # The janitor splits a level's listing into ranges of time: keys must sort as their times.
    times = [5, 40, 10**9, T, T + 1]
    keys = [l0_key("g", t, "zz", 99, "ffffff") for t in reversed(times)]
    keys.append(l0_key("g", T, "aa", 0, "000000"))
    assert [written_ns_of(k) for k in sorted(keys)] == [5, 40, 10**9, T, T, T + 1]
    floor = time_floor(level_prefix("g", 0), T)
    assert [written_ns_of(k) for k in sorted(keys) if k >= floor] == [T, T, T + 1]
    assert all(k < floor for k in keys if (written_ns_of(k) or 0) < T)


def test_keys_of_other_shapes() -> None:
    # Objects compaction may meet in an index or the janitor in a listing that no agent of
    # this layout wrote: no time (age then comes from the store), level 0.
    for key in (
        "g/c1",
        "g/objects/loose.iso",
        "g/objects/l1/ORDERS/no-timestamp-1.iso",
        "g/objects/l1/0000000000000000001-short.iso",
        "g/objects/l1/000000000000000000012-long.iso",
        "g/objects/l1/0000000000000000000x-c1.iso",
    ):
        assert written_ns_of(key) is None, key
        assert level_of(key) == 0, key
    # A timed name outside a level: its time counts (the janitor's age), its level is 0.
    assert written_ns_of("g/objects/00000000000000000042-x.iso") == 42
    assert level_of("g/objects/00000000000000000042-x.iso") == 0
    assert level_of("g/objects/l3/sub/00000000000000000042-x.iso") == 0


def test_objects_prefix_is_told_from_prefixes_under_it() -> None:
    assert is_objects_prefix(objects_prefix("default"))
    assert not is_objects_prefix(level_prefix("default", 0))
    assert not is_objects_prefix("default/objects/l1/ORDERS")
