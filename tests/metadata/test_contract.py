"""The `MetadataStore` contract: every backend must pass all of this, unchanged.

Semantics pinned here, beyond the docstrings in kv.py:
- A successful txn that changes data moves the revision by exactly one; every key it writes gets
  that revision. A txn that changes nothing (no ops, deletes of missing keys) or fails its
  compares leaves the revision as it was, and reports it.
- Ops apply in order (a later op on the same key wins).
- `range(limit=0)` is empty; `start`/`end` outside the prefix are clipped to it.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from infinistream.metadata import (
    Compare,
    Delete,
    DeletePrefix,
    DeleteRange,
    Item,
    MetadataError,
    MetadataStore,
    Op,
    Put,
)
from support.metadatabackends import SHARED_BACKENDS

# Code points whose UTF-8 byte order differs from naive expectations: NUL, DEL, Latin-1, the top
# of the BMP (U+FFFF, bytes EF BF BF) and astral (F0 ...): an upper bound of prefix + '\uffff'
# would miss the astral key, and a UTF-16 order would put it before U+FFFF.
ODD_SUFFIXES = ["", "\x00", "a", "z", "\x7f", "é", "ê", "ÿ", "\u017f", "中", "\uffff", "😀", "𝄞x"]


async def put(store: MetadataStore, **items: bytes) -> int:
    result = await store.txn([], [Put(k, v) for k, v in items.items()])
    assert result.succeeded
    return result.revision


async def put_keys(store: MetadataStore, keys: list[str]) -> int:
    result = await store.txn([], [Put(k, k.encode()) for k in keys])
    assert result.succeeded
    return result.revision


def keys_of(items: list[Item]) -> list[str]:
    return [item.key for item in items]


def byte_order(keys: list[str]) -> list[str]:
    return sorted(keys, key=lambda k: k.encode())


# -- get / put / delete -------------------------------------------------------------------------


async def test_get_missing_is_none(store: MetadataStore) -> None:
    assert await store.get("g/none") is None


async def test_put_then_get(store: MetadataStore) -> None:
    result = await store.txn([], [Put("g/a", b"\x00binary\xff")])
    assert result.succeeded
    assert await store.get("g/a") == Item("g/a", b"\x00binary\xff", result.revision)


async def test_values_round_trip_empty_and_large(store: MetadataStore) -> None:
    large = random.Random(1).randbytes(256 * 1024)
    await put(store, **{"g/empty": b"", "g/large": large})
    assert (await store.get("g/empty")) == Item("g/empty", b"", (await store.revision()))
    item = await store.get("g/large")
    assert item is not None and item.value == large


async def test_overwrite_moves_mod_revision(store: MetadataStore) -> None:
    first = await put(store, **{"g/a": b"1"})
    second = await put(store, **{"g/a": b"2"})
    assert second == first + 1
    assert await store.get("g/a") == Item("g/a", b"2", second)


async def test_delete(store: MetadataStore) -> None:
    await put(store, **{"g/a": b"1", "g/b": b"2"})
    result = await store.txn([], [Delete("g/a")])
    assert result.succeeded
    assert await store.get("g/a") is None
    assert await store.get("g/b") is not None


async def test_delete_missing_key_succeeds_without_a_new_revision(store: MetadataStore) -> None:
    before = await put(store, **{"g/a": b"1"})
    result = await store.txn([], [Delete("g/missing"), DeletePrefix("g/nothing/")])
    assert result.succeeded
    assert result.revision == before == await store.revision()


async def test_empty_txn_succeeds_without_a_new_revision(store: MetadataStore) -> None:
    before = await store.revision()
    result = await store.txn([], [])
    assert result.succeeded and result.revision == before
    assert await store.revision() == before


async def test_ops_apply_in_order(store: MetadataStore) -> None:
    await put(store, **{"o/gone": b"x", "o/p/old": b"x"})
    result = await store.txn(
        [],
        [
            Put("o/twice", b"1"),
            Put("o/twice", b"2"),
            Put("o/gone", b"y"),
            Delete("o/gone"),
            DeletePrefix("o/p/"),
            Put("o/p/new", b"z"),
        ],
    )
    assert result.succeeded
    assert await store.range("o/") == [
        Item("o/p/new", b"z", result.revision),
        Item("o/twice", b"2", result.revision),
    ]


async def test_one_txn_writes_all_keys_at_one_revision(store: MetadataStore) -> None:
    keys = [f"big/{i:06d}" for i in range(5000)]
    result = await store.txn([], [Put(k, k.encode()) for k in keys])
    assert result.succeeded
    items = await store.range("big/")
    assert keys_of(items) == keys
    assert {item.mod_revision for item in items} == {result.revision}
    assert all(item.value == item.key.encode() for item in items)


# -- get_many -----------------------------------------------------------------------------------


async def test_get_many(store: MetadataStore) -> None:
    rev = await put(store, **{"m/a": b"1", "m/b": b"2", "m/é": b"3"})
    got = await store.get_many(["m/a", "m/missing", "m/é", "m/a"])
    assert got == {"m/a": Item("m/a", b"1", rev), "m/é": Item("m/é", b"3", rev)}


async def test_get_many_empty(store: MetadataStore) -> None:
    assert await store.get_many([]) == {}


async def test_get_many_thousands(store: MetadataStore) -> None:
    present = [f"m/{i:05d}" for i in range(0, 3000, 2)]
    rev = await put_keys(store, present)
    wanted = [f"m/{i:05d}" for i in range(3000)]
    random.Random(2).shuffle(wanted)
    got = await store.get_many(wanted)
    assert got == {k: Item(k, k.encode(), rev) for k in present}


# -- range --------------------------------------------------------------------------------------


@pytest.fixture
async def abc(store: MetadataStore) -> list[str]:
    """Keys under "r/" plus neighbours that must never show up in a "r/" range."""
    inside = [f"r/{c}" for c in "abcdefgh"] + ["r/b/1", "r/b/2"]
    await put_keys(store, [*inside, "r", "q/z", "r0", "s/a", "r.x"])
    return byte_order(inside)


async def test_range_by_prefix(store: MetadataStore, abc: list[str]) -> None:
    items = await store.range("r/")
    assert keys_of(items) == abc
    assert all(item.value == item.key.encode() for item in items)


async def test_range_prefix_is_a_string_prefix(store: MetadataStore, abc: list[str]) -> None:
    assert keys_of(await store.range("r/b")) == ["r/b", "r/b/1", "r/b/2"]
    assert keys_of(await store.range("r/b/")) == ["r/b/1", "r/b/2"]
    assert await store.range("r/zz") == []


async def test_range_empty_prefix_is_everything(store: MetadataStore, abc: list[str]) -> None:
    everything = byte_order([*abc, "r", "q/z", "r0", "s/a", "r.x"])
    assert keys_of(await store.range("")) == everything


async def test_range_start_end(store: MetadataStore, abc: list[str]) -> None:
    assert keys_of(await store.range("r/", start="r/c", end="r/f")) == ["r/c", "r/d", "r/e"]
    # start need not exist; end is exclusive
    assert keys_of(await store.range("r/", start="r/b/15", end="r/d")) == ["r/b/2", "r/c"]
    # bounds outside the prefix are clipped to it
    assert keys_of(await store.range("r/", start="a", end="zzz")) == abc
    assert keys_of(await store.range("r/", start="r/g")) == ["r/g", "r/h"]
    assert keys_of(await store.range("r/", end="r/b/")) == ["r/a", "r/b"]
    # empty and inverted windows
    assert await store.range("r/", start="r/d", end="r/d") == []
    assert await store.range("r/", start="r/e", end="r/c") == []
    assert await store.range("r/", start="s") == []


async def test_range_limit_and_reverse(store: MetadataStore, abc: list[str]) -> None:
    assert keys_of(await store.range("r/", limit=3)) == abc[:3]
    assert keys_of(await store.range("r/", reverse=True)) == abc[::-1]
    # reverse with a limit gives the last keys, last first (a "latest N" query)
    assert keys_of(await store.range("r/", reverse=True, limit=2)) == ["r/h", "r/g"]
    assert keys_of(await store.range("r/", start="r/c", end="r/f", reverse=True, limit=2)) == [
        "r/e",
        "r/d",
    ]
    assert await store.range("r/", limit=0) == []
    assert keys_of(await store.range("r/", limit=1000)) == abc


async def test_range_negative_limit_is_refused(store: MetadataStore) -> None:
    with pytest.raises(ValueError):
        await store.range("r/", limit=-1)


async def test_range_keys_only(store: MetadataStore) -> None:
    rev_a = await put(store, **{"k/a": b"value-a"})
    rev_b = await put(store, **{"k/b": b"value-b"})
    assert await store.range("k/", keys_only=True) == [
        Item("k/a", b"", rev_a),
        Item("k/b", b"", rev_b),
    ]
    assert await store.range("k/", keys_only=True, reverse=True, limit=1) == [
        Item("k/b", b"", rev_b)
    ]


async def test_non_ascii_keys_sort_bytewise(store: MetadataStore) -> None:
    keys = list(dict.fromkeys([f"u/{s}" for s in ODD_SUFFIXES] + [f"u/é{s}" for s in ODD_SUFFIXES]))
    shuffled = keys[:]
    random.Random(3).shuffle(shuffled)
    await put_keys(store, shuffled)
    assert keys_of(await store.range("u/")) == byte_order(keys)
    assert keys_of(await store.range("u/", reverse=True)) == byte_order(keys)[::-1]
    assert keys_of(await store.range("u/é")) == byte_order(
        ["u/é"] + [f"u/é{s}" for s in ODD_SUFFIXES if s]
    )
    # prefixes whose last UTF-8 byte is the top of its range (U+00FF: C3 BF, U+FFFF: EF BF BF)
    assert keys_of(await store.range("u/ÿ")) == ["u/ÿ"]
    assert keys_of(await store.range("u/\uffff")) == ["u/\uffff"]
    assert keys_of(await store.range("u/😀")) == ["u/😀"]
    got = await store.get_many(keys)
    assert set(got) == set(keys)


# -- compares -----------------------------------------------------------------------------------


async def test_compare_existing_key(store: MetadataStore) -> None:
    rev = await put(store, **{"c/a": b"1"})
    stale = await store.txn([Compare("c/a", rev - 1)], [Put("c/a", b"stale")])
    assert not stale.succeeded
    fresh = await store.txn([Compare("c/a", rev)], [Put("c/a", b"2")])
    assert fresh.succeeded and fresh.revision == rev + 1
    assert await store.get("c/a") == Item("c/a", b"2", fresh.revision)


async def test_compare_zero_means_missing(store: MetadataStore) -> None:
    create = await store.txn([Compare("c/new", 0)], [Put("c/new", b"1")])
    assert create.succeeded
    again = await store.txn([Compare("c/new", 0)], [Put("c/new", b"2")])
    assert not again.succeeded
    assert (await store.get("c/new")) == Item("c/new", b"1", create.revision)


async def test_compare_on_missing_key_with_a_revision_fails(store: MetadataStore) -> None:
    rev = await put(store, **{"c/other": b"x"})
    result = await store.txn([Compare("c/missing", rev)], [Put("c/missing", b"1")])
    assert not result.succeeded
    assert await store.get("c/missing") is None


async def test_compare_after_delete_sees_missing(store: MetadataStore) -> None:
    rev = await put(store, **{"c/a": b"1"})
    await store.txn([], [Delete("c/a")])
    assert not (await store.txn([Compare("c/a", rev)], [Put("c/b", b"")])).succeeded
    assert (await store.txn([Compare("c/a", 0)], [Put("c/b", b"")])).succeeded


async def test_all_compares_must_hold(store: MetadataStore) -> None:
    rev = await put(store, **{"c/a": b"1", "c/b": b"1"})
    ok = [Compare("c/a", rev), Compare("c/b", rev), Compare("c/none", 0)]
    assert not (await store.txn([*ok, Compare("c/b", rev + 7)], [Put("c/x", b"")])).succeeded
    assert not (await store.txn([*ok, Compare("c/a", 0)], [Put("c/x", b"")])).succeeded
    assert (await store.txn(ok, [Put("c/x", b"")])).succeeded


async def test_failed_compare_changes_nothing(store: MetadataStore) -> None:
    keys = [f"f/{i:04d}" for i in range(2000)]
    rev = await put_keys(store, keys)
    before = await store.range("")
    ops: list[Op] = [Put(f"f/{i:04d}", b"new") for i in range(0, 2000, 3)]
    ops += [Put(f"f/new/{i}", b"new") for i in range(500)]
    ops += [Delete(f"f/{i:04d}") for i in range(1, 2000, 3)]
    ops += [DeletePrefix("f/1"), DeletePrefix("")]
    # the failing compare comes last, after many that hold
    compares = [Compare(k, rev) for k in keys] + [Compare("f/0000", rev + 1)]
    result = await store.txn(compares, ops)
    assert not result.succeeded
    assert result.revision == rev == await store.revision()
    assert await store.range("") == before


# -- DeleteRange --------------------------------------------------------------------------------


async def test_delete_range_deletes_from_start_to_before_end(store: MetadataStore) -> None:
    keys = [f"d/{i:02d}" for i in range(10)] + ["d/05/x", "d/é", "d/😀", "e"]
    await put_keys(store, keys)
    result = await store.txn([], [DeleteRange("d/03", "d/07"), Put("d/04", b"kept")])
    assert result.succeeded
    assert keys_of(await store.range("")) == byte_order(
        ["d/00", "d/01", "d/02", "d/04", "d/07", "d/08", "d/09", "d/é", "d/😀", "e"]
    )
    # Bytewise: é (C3 A9) sorts before 😀 (F0 ...); an empty or inverted range deletes nothing.
    before = await store.revision()
    result = await store.txn([], [DeleteRange("d/z", "d/a"), DeleteRange("d/x", "d/x")])
    assert result.succeeded and result.revision == before
    await store.txn([], [DeleteRange("d/é", "d/😀")])
    assert keys_of(await store.range("d/é")) == [] and keys_of(await store.range("d/😀"))


# -- DeletePrefix -------------------------------------------------------------------------------


async def test_delete_prefix_bounds(store: MetadataStore) -> None:
    doomed = ["d/a", "d/a/x", "d/ab", "d/a\x00", "d/a\uffff", "d/a😀", "d/aé"]
    # keys that sort right after the range ("d/b", "d0") or right before it ("d/`", "d/")
    kept = ["d/", "d/`", "d/A", "d/b", "d/b/a", "d0", "d", "e", "c/a"]
    await put_keys(store, [*doomed, *kept])
    result = await store.txn([], [DeletePrefix("d/a")])
    assert result.succeeded
    assert keys_of(await store.range("")) == byte_order(kept)


async def test_delete_prefix_non_ascii_bounds(store: MetadataStore) -> None:
    await put_keys(store, [f"n/{s}" for s in ODD_SUFFIXES] + [f"n/é{s}" for s in ODD_SUFFIXES])
    await store.txn([], [DeletePrefix("n/é")])
    assert keys_of(await store.range("n/")) == byte_order(
        [f"n/{s}" for s in ODD_SUFFIXES if s != "é"]
    )
    await store.txn([], [DeletePrefix("n/\uffff")])
    assert "n/\uffff" not in keys_of(await store.range("n/"))
    assert "n/😀" in keys_of(await store.range("n/"))


async def test_delete_empty_prefix_deletes_everything(store: MetadataStore) -> None:
    await put_keys(store, ["a", "b/c", "\uffff", "😀"])
    result = await store.txn([], [DeletePrefix("")])
    assert result.succeeded
    assert await store.range("") == []


# -- revision -----------------------------------------------------------------------------------


async def test_revision_moves_by_one_per_writing_txn(store: MetadataStore) -> None:
    seen = [await store.revision()]
    for i in range(20):
        result = await store.txn([], [Put(f"v/{i % 3}", b"x"), Put("v/last", b"x")])
        assert result.revision == seen[-1] + 1
        seen.append(await store.revision())
        assert seen[-1] == result.revision


async def test_revision_unchanged_by_failed_txn(store: MetadataStore) -> None:
    rev = await put(store, **{"v/a": b"1"})
    result = await store.txn([Compare("v/a", rev + 1)], [Put("v/a", b"2"), DeletePrefix("")])
    assert not result.succeeded
    assert result.revision == rev == await store.revision()
    assert (await store.txn([Compare("v/a", rev)], [Put("v/a", b"2")])).revision == rev + 1


@pytest.mark.parametrize("backend", SHARED_BACKENDS, indirect=True)
async def test_second_handle_sees_writes(
    store: MetadataStore, second_handle: MetadataStore
) -> None:
    rev = await put(store, **{"h/a": b"1"})
    assert await second_handle.revision() == rev
    assert await second_handle.get("h/a") == Item("h/a", b"1", rev)
    other = await second_handle.txn([Compare("h/a", rev)], [Put("h/a", b"2")])
    assert other.succeeded
    assert not (await store.txn([Compare("h/a", rev)], [Put("h/a", b"3")])).succeeded
    assert await store.revision() == other.revision


# -- concurrency --------------------------------------------------------------------------------


async def cas_increment(store: MetadataStore, key: str) -> tuple[int, int]:
    """Increment the counter at `key` by compare-and-set; (revision, failed attempts)."""
    failures = 0
    while True:
        item = await store.get(key)
        count = 0 if item is None else int(item.value)
        expected = 0 if item is None else item.mod_revision
        result = await store.txn([Compare(key, expected)], [Put(key, str(count + 1).encode())])
        if result.succeeded:
            return result.revision, failures
        failures += 1


async def test_concurrent_cas_from_many_tasks(store: MetadataStore) -> None:
    tasks, rounds = 20, 10

    async def worker() -> list[int]:
        revisions = []
        for _ in range(rounds):
            revision, _failures = await cas_increment(store, "cas/counter")
            revisions.append(revision)
            await asyncio.sleep(0)
        return revisions

    results = await asyncio.gather(*(worker() for _ in range(tasks)))
    revisions = [r for worker_revisions in results for r in worker_revisions]
    item = await store.get("cas/counter")
    assert item is not None
    assert int(item.value) == tasks * rounds
    # every successful increment committed at its own revision
    assert len(set(revisions)) == tasks * rounds
    assert item.mod_revision == max(revisions)


@pytest.mark.parametrize("backend", SHARED_BACKENDS, indirect=True)
async def test_concurrent_handles_cas(store: MetadataStore, second_handle: MetadataStore) -> None:
    async def worker(handle: MetadataStore) -> None:
        for _ in range(50):
            await cas_increment(handle, "cas/shared")

    await asyncio.gather(*(worker(h) for h in (store, second_handle, store, second_handle)))
    item = await store.get("cas/shared")
    assert item is not None and int(item.value) == 200


# -- lifecycle ----------------------------------------------------------------------------------


async def test_closed_store_refuses_calls(store: MetadataStore) -> None:
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(MetadataError):
        await store.get("x")
    with pytest.raises(MetadataError):
        await store.txn([], [Put("x", b"")])
