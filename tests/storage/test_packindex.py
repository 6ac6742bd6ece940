"""The pack index's budget: what a local store keeps of where its objects are (storage.packindex).

Objects are named as the layout names them (a time first) and written to several packs; a
reader keeps the seals and entries of the packs it read within its budget, lets the least used
go past it, and reads a seal again, one read, when a key of its pack is asked for.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from infinistream.storage.localstore import LocalObjects
from infinistream.storage.packindex import PACK_BYTES, Pack, PackDirectory, _nearest

MIB = 1024 * 1024
LEVEL = "g/l0"


async def write_packs(
    root: Path, count: int, store: LocalObjects | None = None
) -> dict[str, bytes]:
    """`count` objects of 50 kB, about 20 to a 1 MiB pack, named by the time they are put."""
    writer = store or LocalObjects(str(root), pack_bytes=MIB, max_packed=MIB // 2)
    objects = {}
    for i in range(count):
        key = f"{LEVEL}/{time.time_ns():020d}-a-{i:08d}.iso"
        objects[key] = os.urandom(50_000)
        await writer.put(key, objects[key])
    if store is None:
        writer.close()
    return objects


def named_before_now(objects: dict[str, bytes]) -> None:
    """Wait until every key's time is more than a second past (the clocks' allowance), so
    that a listing made from now on is known to come after them."""
    newest = max(int(key.rpartition("/")[2][:20]) for key in objects)
    while time.time_ns() < newest + 1_100_000_000:
        time.sleep(0.05)


def pack_of(directory: PackDirectory, key: str) -> Pack:
    return directory.entries[key].pack


def seals_kept(directory: PackDirectory) -> int:
    return sum(p.seal is not None for p in directory.packs.values())


async def test_what_is_kept_of_other_stores_packs_stays_within_the_budget(tmp_path: Path) -> None:
    objects = await write_packs(tmp_path, 120)
    budget = 24 * 1024
    reader = LocalObjects(str(tmp_path), index_budget=budget)
    try:
        for key, data in objects.items():
            assert reader.read(key)[0] == data
            assert reader.index.used <= budget
        directory = reader.index.directory(LEVEL)
        assert len(directory.packs) >= 5
        let_go = [p for p in directory.packs.values() if p.sealed and p.seal is None]
        assert let_go, "some packs' seals were let go"
        assert len(directory.entries) < len(objects)
        # Listing reads every seal and keeps no more than the budget.
        assert {i.key for i in reader.list_all(LEVEL)} == set(objects)
        assert reader.index.used <= budget
    finally:
        reader.close()


async def test_a_key_of_a_pack_let_go_is_found_again_from_its_seal(tmp_path: Path) -> None:
    objects = await write_packs(tmp_path, 120)
    named_before_now(objects)
    keys = sorted(objects)
    reader = LocalObjects(str(tmp_path), index_budget=16 * 1024)
    try:
        first = keys[0]
        assert reader.read(first)[0] == objects[first]
        directory = reader.index.directory(LEVEL)
        pack = pack_of(directory, first)
        for key in reversed(keys):  # the other packs, until the first one is let go
            if pack.seal is None:
                break
            assert reader.read(key)[0] == objects[key]
        assert pack.seal is None and first not in directory.entries
        listed = directory.listed_ns
        kept = seals_kept(directory)
        assert reader.read(first)[0] == objects[first]
        # From its seal, read again without listing the directory.
        assert directory.listed_ns == listed
        assert pack.seal is not None and pack_of(directory, first) is pack
        assert seals_kept(directory) <= kept + 1
    finally:
        reader.close()


async def test_a_pack_in_use_is_kept_while_the_others_go(tmp_path: Path) -> None:
    objects = await write_packs(tmp_path, 120)
    keys = sorted(objects)
    reader = LocalObjects(str(tmp_path), index_budget=16 * 1024)
    try:
        hot = keys[0]
        assert reader.read(hot)[0] == objects[hot]
        directory = reader.index.directory(LEVEL)
        pack = pack_of(directory, hot)
        let_go = 0
        for key in reversed(keys[20:]):  # other packs, the hot key read between each
            assert reader.read(key)[0] == objects[key]
            let_go += sum(p.sealed and p.seal is None for p in directory.packs.values())
            assert pack.seal is not None and hot in directory.entries
            assert reader.read(hot)[0] == objects[hot]
        assert let_go, "other packs were let go meanwhile"
    finally:
        reader.close()


async def test_a_cold_key_reads_the_seals_nearest_it_without_listing(tmp_path: Path) -> None:
    objects = await write_packs(tmp_path, 120)
    named_before_now(objects)
    keys = sorted(objects)
    reader = LocalObjects(str(tmp_path))
    try:
        assert reader.read(keys[0])[0] == objects[keys[0]]
        directory = reader.index.directory(LEVEL)
        listed = directory.listed_ns
        for key in (keys[60], keys[-1], keys[30]):
            before = seals_kept(directory)
            assert reader.read(key)[0] == objects[key]
            assert seals_kept(directory) <= before + 2
        assert directory.listed_ns == listed
    finally:
        reader.close()


async def test_packs_this_store_wrote_are_let_go_once_sealed(tmp_path: Path) -> None:
    budget = 24 * 1024
    store = LocalObjects(str(tmp_path), pack_bytes=MIB, max_packed=MIB // 2, index_budget=budget)
    try:
        objects = await write_packs(tmp_path, 120, store)
        directory = store.index.directory(LEVEL)
        # The pack being written keeps every entry; the sealed ones were let go to the budget.
        own = [p for p in directory.packs.values() if p.own]
        assert len(own) == 1
        assert store.index.used <= budget + sum(p.charge for p in own)
        assert len(directory.entries) < len(objects)
        for key, data in objects.items():
            assert store.read(key)[0] == data
    finally:
        store.close()


async def test_a_pack_another_store_writes_later_is_found(tmp_path: Path) -> None:
    objects = await write_packs(tmp_path, 40)
    named_before_now(objects)
    reader = LocalObjects(str(tmp_path), index_budget=16 * 1024)
    other = LocalObjects(str(tmp_path), pack_bytes=MIB, max_packed=MIB // 2)
    try:
        some = min(objects)
        assert reader.read(some)[0] == objects[some]
        directory = reader.index.directory(LEVEL)
        listed = directory.listed_ns
        # Named after the reader listed the directory, in a pack it has not seen.
        later = await write_packs(tmp_path, 3, other)
        for key, data in later.items():
            assert reader.read(key)[0] == data
        assert directory.listed_ns > listed
        # Named long before the reader's listing, written only now, to a new pack: the packs
        # nearest its time do not hold it, so the directory is listed again.
        late = f"{LEVEL}/{listed - 10_000_000_000:020d}-b-00000000.iso"
        await other.put(late, b"late")
        listed = directory.listed_ns
        assert reader.read(late)[0] == b"late"
        assert directory.listed_ns > listed
    finally:
        other.close()
        reader.close()


async def test_a_budget_of_nothing_keeps_only_the_pack_rows(tmp_path: Path) -> None:
    objects = await write_packs(tmp_path, 60)
    reader = LocalObjects(str(tmp_path), index_budget=0)
    try:
        for key, data in objects.items():
            assert reader.read(key)[0] == data
            directory = reader.index.directory(LEVEL)
            # The pack just read stays until another is read.
            assert seals_kept(directory) <= 1
        assert reader.index.used >= PACK_BYTES * len(directory.packs)
    finally:
        reader.close()


def rows(times: list[int]) -> list[Pack]:
    """Pack rows created at `times` (no files: what the nearest-first order reads of them)."""
    return [Pack(f"p{i}", f"p{i}", -1, created_ns=t) for i, t in enumerate(times)]


def test_the_packs_nearest_a_key_come_first_alternating_around_its_time() -> None:
    by_time = rows([10, 20, 30, 40, 50, 60])
    skipped = {by_time[1].name, by_time[3].name}  # sealed before the key, say
    order = list(_nearest(by_time, 35, lambda p: p.name not in skipped))
    # Before it: 30 (20 skipped), 10; after it: 50 (40 skipped), 60.
    assert [p.created_ns for p in order] == [30, 50, 10, 60]
    assert [p.created_ns for p in _nearest(by_time, 5, lambda p: True)] == [10, 20, 30, 40, 50, 60]
    assert [p.created_ns for p in _nearest(by_time, 99, lambda p: True)] == [60, 50, 40, 30, 20, 10]
    assert [p.created_ns for p in _nearest(by_time, 20, lambda p: True)][:3] == [20, 30, 10]


def test_finding_a_keys_nearest_packs_reads_no_other_pack_rows() -> None:
    for count in (10, 100_000):
        by_time = rows(list(range(0, 10 * count, 10)))
        asked: list[Pack] = []

        def wanted(pack: Pack, asked: list[Pack] = asked) -> bool:
            asked.append(pack)
            return True

        nearest = _nearest(by_time, 10 * (count // 2) + 5, wanted)
        first_two = [next(nearest), next(nearest)]
        assert [p.created_ns for p in first_two] == [10 * (count // 2), 10 * (count // 2 + 1)]
        assert asked == first_two


def test_a_directory_keeps_its_packs_in_creation_order_as_they_come_and_go() -> None:
    d = PackDirectory("d")
    packs = rows([30, 10, 20, 20, 40])
    for pack in packs:
        d.add(pack)
    foreign = Pack("f", "f", -1, foreign=True)
    d.add(foreign)
    assert [p.created_ns for p in d.by_time] == [10, 20, 20, 30, 40]
    assert d.remove(packs[3])  # the second created at 20
    assert not d.remove(packs[3])
    assert d.by_time == [packs[1], packs[2], packs[0], packs[4]]
    assert d.remove(foreign)
    assert set(d.packs) == {p.name for p in d.by_time}


async def test_a_store_that_only_read_a_pack_removes_it_once_it_deleted_all_of_it(
    tmp_path: Path,
) -> None:
    objects = await write_packs(tmp_path, 60)
    # A budget of nothing: the seals are let go before the deletes count them.
    for budget in (16 * MIB, 0):
        reader = LocalObjects(str(tmp_path), index_budget=budget)
        try:
            directory = reader.index.directory(LEVEL)
            keys = sorted(objects)
            for key in keys:
                assert reader.read(key)[0] == objects[key]
            sealed = [p for p in directory.packs.values() if p.sealed]
            assert sealed
            pack = sealed[0]
            mine = [k for k in keys if getattr(reader.index.find(LEVEL, k), "pack", None) is pack]
            *first, last = mine
            for key in first:
                reader.delete(key)
                del objects[key]
            assert os.path.exists(pack.path), "one of its objects is still live"
            reader.delete(last)
            del objects[last]
            assert not os.path.exists(pack.path)
            for key, data in objects.items():
                assert reader.read(key)[0] == data
        finally:
            reader.close()
