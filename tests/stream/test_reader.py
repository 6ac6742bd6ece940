"""MessageReader against a real (in-memory) object store: GETs, the cache, and checksums.

Bytes a reader keeps in the section cache are checked once, when fetched (or are this agent's
own writes); reads from the cache decode without checking again, and nothing damaged is kept.
"""

from __future__ import annotations

from array import array

import pytest

from infinistream.storage import (
    CODEC_NONE,
    CODEC_ZSTD,
    CorruptObjectError,
    ObjectBuilder,
    ObjectStore,
    SectionCache,
    encode_record,
)
from infinistream.stream.reader import MessageReader
from infinistream.stream.records import IndexEntry
from infinistream.stream.view import Segment

KEY = "obj-1"


def records(n: int, skipped: frozenset[int] = frozenset()) -> list[bytes]:
    return [
        encode_record(f"orders.{i % 3}", b"NATS/1.0\r\nK: v\r\n\r\n" if i == 2 else b"", b"m%d" % i)
        for i in range(n + len(skipped))
    ]


async def write_section(
    store: ObjectStore,
    recs: list[bytes],
    first_seq: int = 1,
    skipped: list[int] | None = None,
    codec: int = CODEC_NONE,
) -> Segment:
    builder = ObjectBuilder()
    ref = builder.add_section("ORDERS", recs, codec)
    await store.put(KEY, builder.finish())
    names: dict[str, int] = {}
    subjects = [decode_subject(r) for r in recs]
    ids = array("I", (names.setdefault(s, len(names)) for s in subjects))
    entry = IndexEntry(
        obj=KEY,
        offset=ref.offset,
        length=ref.length,
        first_seq=first_seq,
        ts=1_000,
        subjects=list(names),
        subject_ids=ids.tobytes(),
        lengths=array("I", (len(r) for r in recs)).tobytes(),
        skipped=skipped or [],
        codec=codec,
    )
    return Segment.from_entry("index-key", entry)


def decode_subject(record: bytes) -> str:
    slen = int.from_bytes(record[:2], "little")
    return record[14 : 14 + slen].decode()


@pytest.fixture
def store() -> ObjectStore:
    return ObjectStore.from_url("memory://")


async def test_a_section_is_fetched_once_then_read_from_the_cache(store: ObjectStore) -> None:
    seg = await write_section(store, records(10))
    reader = MessageReader(store, SectionCache(1 << 20))
    first = await reader.read_run(seg, 3, 7)
    assert [m.seq for m in first] == [3, 4, 5, 6, 7]
    assert [m.data for m in first] == [b"m2", b"m3", b"m4", b"m5", b"m6"]
    assert first[0].headers == b"NATS/1.0\r\nK: v\r\n\r\n" and first[0].subject == "orders.2"
    assert [m.ts for m in first] == [1_002, 1_003, 1_004, 1_005, 1_006]
    gets = store.stats.gets
    again = await reader.read_run(seg, 1, 10)
    assert store.stats.gets == gets
    assert [m.data for m in again] == [b"m%d" % i for i in range(10)]


async def test_records_refused_at_commit_are_stepped_over(store: ObjectStore) -> None:
    recs = records(6, skipped=frozenset({2, 5}))
    seg = await write_section(store, recs, first_seq=11, skipped=[2, 5])
    reader = MessageReader(store, SectionCache(1 << 20))
    got = await reader.read_run(seg, 11, 16)
    assert [(m.seq, m.data) for m in got] == [
        (11, b"m0"),
        (12, b"m1"),
        (13, b"m3"),
        (14, b"m4"),
        (15, b"m6"),
        (16, b"m7"),
    ]


async def test_a_damaged_section_is_refused_and_not_kept(store: ObjectStore) -> None:
    recs = records(8)
    seg = await write_section(store, recs)
    data = bytearray(await store.get(KEY))
    data[seg.offset + seg.offsets[6] + 15] ^= 0xFF  # inside message 7, which no one asks for
    damaged = ObjectStore.from_url("memory://")
    await damaged.put(KEY, bytes(data))
    cache: SectionCache[bytes] = SectionCache(1 << 20)
    reader = MessageReader(damaged, cache)
    with pytest.raises(CorruptObjectError):
        await reader.read_run(seg, 1, 2)
    assert cache.get(KEY, seg.offset) is None


async def test_a_large_section_is_read_by_range_and_checked(store: ObjectStore) -> None:
    recs = records(50)
    seg = await write_section(store, recs)
    data = bytearray(await store.get(KEY))
    data[seg.offset + seg.offsets[20] + 15] ^= 0xFF  # message 21
    damaged = ObjectStore.from_url("memory://")
    await damaged.put(KEY, bytes(data))
    cache: SectionCache[bytes] = SectionCache(1 << 20)
    reader = MessageReader(damaged, cache, whole_section_bytes=64)
    assert [m.seq for m in await reader.read_run(seg, 1, 20)] == list(range(1, 21))
    with pytest.raises(CorruptObjectError):
        await reader.read_run(seg, 15, 25)
    assert len(cache) == 0


async def test_parts_are_the_messages_as_they_go_on_the_wire(store: ObjectStore) -> None:
    recs = records(6, skipped=frozenset({2}))
    seg = await write_section(store, recs, first_seq=11, skipped=[2])
    reader = MessageReader(store, SectionCache(1 << 20))
    parts = await reader.read_parts(seg, 12, 14)
    assert parts == [
        (12, 1_001, b"orders.1", b"", b"m1"),
        (13, 1_002, b"orders.0", b"", b"m3"),
        (14, 1_003, b"orders.1", b"", b"m4"),
    ]
    messages = await reader.read_run(seg, 12, 14)
    assert [(m.seq, m.ts, m.subject.encode(), m.headers, m.data) for m in messages] == parts


# -- compressed sections -------------------------------------------------------------------------


async def test_a_compressed_section_is_fetched_whole_whatever_its_size(store: ObjectStore) -> None:
    recs = records(50, skipped=frozenset({4}))
    seg = await write_section(store, recs, first_seq=1, skipped=[4], codec=CODEC_ZSTD)
    assert seg.plain_length == sum(map(len, recs)) > seg.length
    cache: SectionCache[bytes] = SectionCache(1 << 20)
    # Small enough whole-section and window sizes to make a plain section be read by range.
    reader = MessageReader(store, cache, whole_section_bytes=64, window_bytes=64)
    parts = await reader.read_parts(seg, 20, 21)
    assert [(seq, data) for seq, _, _, _, data in parts] == [(20, b"m20"), (21, b"m21")]
    assert (store.stats.gets, store.stats.bytes_got) == (1, seg.length)
    assert cache.get(KEY, seg.offset) == b"".join(recs)  # plain bytes, checked, kept
    got = await reader.read_run(seg, 1, 50)
    assert [m.data for m in got] == [b"m%d" % i for i in range(51) if i != 4]
    assert store.stats.gets == 1


async def test_a_damaged_compressed_section_is_refused_and_not_kept(store: ObjectStore) -> None:
    seg = await write_section(store, records(30), codec=CODEC_ZSTD)
    data = await store.get(KEY)
    for at in (seg.offset + 2, seg.offset + seg.length // 2, seg.offset + seg.length - 1):
        damaged = bytearray(data)
        damaged[at] ^= 0x20
        broken = ObjectStore.from_url("memory://")
        await broken.put(KEY, bytes(damaged))
        cache: SectionCache[bytes] = SectionCache(1 << 20)
        with pytest.raises(CorruptObjectError) as err:
            await MessageReader(broken, cache).read_run(seg, 1, 1)
        assert err.value.key == KEY
        assert len(cache) == 0
