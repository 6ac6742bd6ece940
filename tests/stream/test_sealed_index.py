"""SealedIndex on a real SQLite store: what the store holds, what callers see, across a key
rotation, and without a key."""

from __future__ import annotations

import pytest

from infinistream.metadata import open_metadata
from infinistream.metadata.kv import Compare, Delete, DeletePrefix, Get, MetadataStore, Put, Scan
from infinistream.storage import Encryption, KeyRefusedError, LocalKeys
from infinistream.storage.keys import CIPHER_CHACHA
from infinistream.stream.sealed_index import SealedIndex, is_sealed_key

ID = "order-Zq7marker/42"
DEDUPE = f"g/sd/S/m/{ID}"
INDEX = "g/sd/S/i/00000000000000000001"
STATE = "g/sd/S/state"
CONFIG = "g/streams/S"


def _enc(key: str, *prev: str) -> Encryption:
    return Encryption(LocalKeys.from_texts(key, prev, cipher=CIPHER_CHACHA), CIPHER_CHACHA)


async def _raw(meta: MetadataStore) -> dict[str, bytes]:
    return {i.key: i.value for i in await meta.range("")}


async def test_values_sealed_ids_hashed_callers_see_plain() -> None:
    inner = open_metadata("sqlite://:memory:")
    meta = SealedIndex(inner, _enc("k1"))
    # A duplicate-window value is a sequence and a time: only its key holds the id.
    ops = [Put(DEDUPE, b"\x92\x01\x02")]
    ops += [Put(k, b"\x91" + ID.encode()) for k in (INDEX, STATE, CONFIG)]
    assert (await meta.txn([Compare(DEDUPE, 0)], list(ops))).succeeded
    raw = await _raw(inner)
    assert not any(ID.encode() in k.encode() + v for k, v in raw.items() if k != CONFIG)
    assert raw[CONFIG] == b"\x91" + ID.encode()  # configs stay in clear
    assert len([k for k in raw if k.startswith("g/sd/S/m/~")]) == 1
    got = await meta.get_many([DEDUPE, INDEX, STATE, CONFIG, "g/sd/S/m/other"])
    assert {k: v.value for k, v in got.items()} == {
        DEDUPE: b"\x92\x01\x02",
        **{k: b"\x91" + ID.encode() for k in (INDEX, STATE, CONFIG)},
    }
    assert (await meta.get(DEDUPE)) is not None and (await meta.get("g/sd/S/m/x")) is None

    # After a rotation, ids hashed under the old key are found while it is held; new writes
    # use the new key's token, and a delete removes both.
    rotated = SealedIndex(inner, _enc("k2", "k1"))
    assert (await rotated.get(DEDUPE)) is not None
    await rotated.txn([], [Put(DEDUPE, b"\x90")])
    assert len([k for k in await _raw(inner) if "/m/~" in k]) == 2
    assert (await rotated.get(DEDUPE)).value == b"\x90"  # type: ignore[union-attr]
    await rotated.txn([], [Delete(DEDUPE)])
    assert [k for k in await _raw(inner) if "/m/" in k] == []
    # Keys read back from a range hold tokens, and go back to the store as they are (a job
    # that forgets the ids of erased messages deletes what it ranged over).
    await rotated.txn([], [Put(DEDUPE, b"\x90")])
    [listed] = await rotated.range("g/sd/S/m/")
    assert listed.key.startswith("g/sd/S/m/~") and listed.value == b"\x90"
    assert (
        await rotated.txn([Compare(listed.key, listed.mod_revision)], [Delete(listed.key)])
    ).succeeded
    assert [k for k in await _raw(inner) if "/m/" in k] == []
    assert (await rotated.get(INDEX)) is not None  # sealed under k1, held as a previous key

    # Without the key the sealed values are refused; without any key too.
    with pytest.raises(KeyRefusedError):
        await SealedIndex(inner, _enc("k3")).get(STATE)
    with pytest.raises(KeyRefusedError):
        await SealedIndex(inner, None).range("g/sd/S/")
    await meta.close()


def test_which_values_are_sealed() -> None:
    assert is_sealed_key(INDEX) and is_sealed_key(STATE)
    assert not is_sealed_key(CONFIG) and not is_sealed_key(DEDUPE)
    assert not is_sealed_key("g/sd/S/t/00000000000000000003")
    assert not is_sealed_key("g/consumers/S/C/state")


async def test_a_snapshot_sees_what_gets_and_ranges_see() -> None:
    inner = open_metadata("sqlite://:memory:")
    meta = SealedIndex(inner, _enc("k2", "k1"))
    older = SealedIndex(inner, _enc("k1"))
    # An id hashed under the previous key, and values sealed under either key.
    await older.txn([], [Put(DEDUPE, b"\x92\x01\x02"), Put(INDEX, b"\x91\x01")])
    await meta.txn([], [Put(STATE, b"\x91\x02"), Put(CONFIG, b"\x91\x03")])
    snap = await meta.snapshot(
        [
            Get(DEDUPE),
            Get("g/sd/S/m/other"),
            Scan("g/sd/S/", keys_only=True),
            Get(STATE),
            Scan("g/sd/S/i/"),
            Get(CONFIG),
        ]
    )
    assert snap.revision == await inner.revision()
    assert snap.item(0) == await meta.get(DEDUPE) and snap.item(0) is not None
    assert snap.item(1) is None
    assert snap.items(2) == await meta.range("g/sd/S/", keys_only=True)
    assert [i.value for i in snap.found[3] + snap.items(4)] == [b"\x91\x02", b"\x91\x01"]
    assert snap.item(5) == await meta.get(CONFIG)
    with pytest.raises(KeyRefusedError):
        await SealedIndex(inner, None).snapshot([Get(STATE)])
    await meta.close()


async def test_subject_records_hold_no_subject_in_clear() -> None:
    inner = open_metadata("sqlite://:memory:")
    meta = SealedIndex(inner, _enc("k1"))
    subjects = ["orders.eu.alice", "orders.eu.bob", "orders.us/x", "people.carol"]
    base = "g/sd/S/p/"
    await meta.txn(
        [], [Put(base + s, b"\x93\x01\x02" + bytes([i])) for i, s in enumerate(subjects)]
    )
    raw = await _raw(inner)
    assert not any(
        s.split(".")[-1].encode() in k.encode() + v for k, v in raw.items() for s in subjects
    )
    assert all(k.startswith(base + "~") for k in raw)
    # Gets by subject; ranges under plain keys, narrowed and ordered as plain keys would be.
    assert (await meta.get(base + "orders.us/x")).value == b"\x93\x01\x02\x02"  # type: ignore[union-attr]
    assert await meta.get(base + "orders.xx") is None
    got = await meta.range(base + "orders.eu.")
    assert [i.key for i in got] == [base + "orders.eu.alice", base + "orders.eu.bob"]
    assert [i.key for i in await meta.range(base, reverse=True, limit=2, keys_only=True)] == [
        base + "people.carol",
        base + "orders.us/x",
    ]
    assert [i.key for i in await meta.range(base, start=base + "orders.eu.b", end=base + "p")] == [
        base + "orders.eu.bob",
        base + "orders.us/x",
    ]
    snap = await meta.snapshot([Scan(base + "people."), Get(base + "orders.eu.bob")])
    assert [i.key for i in snap.items(0)] == [base + "people.carol"]
    assert snap.item(1) is not None and snap.item(1).key == base + "orders.eu.bob"  # type: ignore[union-attr]
    # After a rotation the records are still found, rewritten under the new token, and gone
    # with a delete by subject or a delete of the prefix.
    rotated = SealedIndex(inner, _enc("k2", "k1"))
    assert len(await rotated.range(base)) == 4
    await rotated.txn([], [Put(base + "orders.eu.bob", b"\x93\x00\x00\x00")])
    # The old token's copy goes with the put: one record a subject.
    assert len(await _raw(inner)) == 4 and len(await rotated.range(base)) == 4
    assert (await rotated.get(base + "orders.eu.bob")).value == b"\x93\x00\x00\x00"  # type: ignore[union-attr]
    await rotated.txn([], [Delete(base + "orders.eu.bob")])
    assert len(await _raw(inner)) == 3
    await rotated.txn([], [DeletePrefix(base)])
    assert await _raw(inner) == {}
    await meta.close()


async def test_subject_records_without_encryption_are_plain() -> None:
    inner = open_metadata("sqlite://:memory:")
    meta = SealedIndex(inner, None)
    await meta.txn([], [Put("g/sd/S/p/a.b", b"\x93\x01\x01\x01")])
    assert await _raw(inner) == {"g/sd/S/p/a.b": b"\x93\x01\x01\x01"}
    assert [i.key for i in await meta.range("g/sd/S/p/a")] == ["g/sd/S/p/a.b"]
    await meta.close()
