"""MessageReader against a real (in-memory) object store: GETs, the cache, and checksums.

Bytes a reader keeps in the section cache are checked once, when fetched (or are this agent's
own writes); reads from the cache decode without checking again, and nothing damaged is kept.
Each record is checked on its own: damage stays with the records it hit, which are reported,
and their neighbours are served.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from infinistream.storage import (
    CODEC_NONE,
    CODEC_ZSTD,
    BlockStore,
    ObjectBuilder,
    ObjectStore,
    ObjectStoreError,
    Peer,
    PeerClient,
    PeerServer,
    PoolSecret,
    RecordDirectory,
    SectionCache,
    ZoneCache,
    ZoneCacheStats,
    encode_record,
)
from infinistream.stream.damage import Damage, DamagedMessage, DamageLog
from infinistream.stream.reader import MessageReader, Unchecked
from infinistream.stream.records import IndexEntry, SectionEntry
from infinistream.stream.sections import Section, Segment, section_of
from support.s3proxy import Fault, S3FaultProxy
from support.s3server import S3Server, s3_server
from support.streamviews import add_segment, empty_view, kill

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
    return Segment.from_entry("default/sd/ORDERS/i/00000000000000000001", entry)


def decode_subject(record: bytes) -> str:
    slen = int.from_bytes(record[:2], "little")
    return record[14 : 14 + slen].decode()


@pytest.fixture
def store() -> ObjectStore:
    return ObjectStore.from_url("memory://")


async def test_a_section_is_fetched_once_then_read_from_the_cache(store: ObjectStore) -> None:
    seg = await write_section(store, records(10))
    reader = MessageReader(store, SectionCache(1 << 20), DamageLog())
    first = await reader.read_run(seg, 3, 7)
    assert [m.seq for m in first] == [3, 4, 5, 6, 7]
    assert [m.data for m in first] == [b"m2", b"m3", b"m4", b"m5", b"m6"]
    assert first[0].headers == b"NATS/1.0\r\nK: v\r\n\r\n" and first[0].subject == "orders.2"
    assert [m.ts for m in first] == [1_002, 1_003, 1_004, 1_005, 1_006]
    gets = store.stats.gets
    again = await reader.read_run(seg, 1, 10)
    assert store.stats.gets == gets
    assert [m.data for m in again] == [b"m%d" % i for i in range(10)]


async def test_a_message_is_read_from_a_view_while_it_is_live(store: ObjectStore) -> None:
    seg = await write_section(store, records(10), first_seq=11)
    view = empty_view(11)
    add_segment(view, seg)
    reader = MessageReader(store, SectionCache(1 << 20), DamageLog())
    msg = await reader.read_message(view, 13)
    assert msg is not None and (msg.seq, msg.subject, msg.data) == (13, "orders.2", b"m2")
    kill(view, [13, 11])
    for gone in (10, 11, 13, 21):  # before the stream, deleted, past its end
        assert await reader.read_message(view, gone) is None
    msg = await reader.read_message(view, 20)
    assert msg is not None and msg.data == b"m9"


async def test_records_refused_at_commit_are_stepped_over(store: ObjectStore) -> None:
    recs = records(6, skipped=frozenset({2, 5}))
    seg = await write_section(store, recs, first_seq=11, skipped=[2, 5])
    reader = MessageReader(store, SectionCache(1 << 20), DamageLog())
    got = await reader.read_run(seg, 11, 16)
    assert [(m.seq, m.data) for m in got] == [
        (11, b"m0"),
        (12, b"m1"),
        (13, b"m3"),
        (14, b"m4"),
        (15, b"m6"),
        (16, b"m7"),
    ]


async def damaged_copy(store: ObjectStore, change: Callable[[bytearray], None]) -> ObjectStore:
    data = bytearray(await store.get(KEY))
    change(data)
    damaged = ObjectStore.from_url("memory://")
    await damaged.put(KEY, bytes(data))
    return damaged


def flip(seg: Segment, position: int, at: int) -> Callable[[bytearray], None]:
    def change(data: bytearray) -> None:
        data[seg.offset + seg.offsets[position] + at] ^= 0xFF

    return change


@pytest.mark.parametrize(
    ("at", "reason"),
    [(15, "record checksum mismatch"), (3, "record length does not match its index")],
)
async def test_a_damaged_record_is_reported_and_its_neighbours_are_served(
    store: ObjectStore, at: int, reason: str
) -> None:
    seg = await write_section(store, records(8))
    # A byte of message 7's payload, or of its header's length fields.
    damaged = await damaged_copy(store, flip(seg, 6, at))
    cache: SectionCache[bytes] = SectionCache(1 << 20)
    log = DamageLog()
    reader = MessageReader(damaged, cache, log)
    found: list[Damage] = []
    got = await reader.read_run(seg, 1, 8, damaged=found)
    assert [m.seq for m in got] == [1, 2, 3, 4, 5, 6, 8]
    assert [m.data for m in got] == [b"m0", b"m1", b"m2", b"m3", b"m4", b"m5", b"m7"]
    expected = Damage("ORDERS", 7, KEY, seg.offset + seg.offsets[6], reason)
    assert found == [expected]
    with pytest.raises(DamagedMessage) as raised:
        await reader.read(seg, 7)
    assert raised.value.damage == expected
    assert (await reader.read(seg, 8)).data == b"m7"
    # Kept unchecked: the damaged record stays so, every read checks it again and each is
    # counted; the record is one record. Its neighbours were checked once.
    held = cache.get(KEY, seg.offset)
    assert isinstance(held, Unchecked) and list(held.checked) == [1, 1, 1, 1, 1, 1, 0, 1]
    assert (log.records, log.reads) == (1, 2)
    assert list(log.recent) == [expected]


async def test_a_large_section_is_read_by_range_and_checked(store: ObjectStore) -> None:
    recs = records(50)
    seg = await write_section(store, recs)
    damaged = await damaged_copy(store, flip(seg, 20, 15))  # message 21
    cache: SectionCache[bytes] = SectionCache(1 << 20)
    reader = MessageReader(damaged, cache, DamageLog(), whole_section_bytes=64)
    assert [m.seq for m in await reader.read_run(seg, 1, 20)] == list(range(1, 21))
    found: list[Damage] = []
    got = await reader.read_run(seg, 15, 25, damaged=found)
    assert [m.seq for m in got] == [15, 16, 17, 18, 19, 20, 22, 23, 24, 25]
    assert [d.seq for d in found] == [21]
    assert len(cache) == 0


async def test_records_past_the_end_of_a_truncated_object_are_damaged(
    store: ObjectStore,
) -> None:
    seg = await write_section(store, records(10))
    cut = seg.offset + seg.offsets[7] + 5  # inside message 8

    def truncate(data: bytearray) -> None:
        del data[cut:]

    reader = MessageReader(await damaged_copy(store, truncate), SectionCache(1 << 20), DamageLog())
    found: list[Damage] = []
    got = await reader.read_run(seg, 1, 10, damaged=found)
    assert [m.seq for m in got] == [1, 2, 3, 4, 5, 6, 7]
    assert [(d.seq, d.reason) for d in found] == [
        (s, f"object cut short at {cut} bytes") for s in (8, 9, 10)
    ]
    # By range too.
    short = await damaged_copy(store, truncate)
    reader = MessageReader(short, SectionCache(1 << 20), DamageLog(), whole_section_bytes=1)
    found = []
    assert [m.seq for m in await reader.read_run(seg, 6, 9, damaged=found)] == [6, 7]
    assert [d.seq for d in found] == [8, 9]


async def test_every_record_of_a_missing_object_is_damaged(store: ObjectStore) -> None:
    seg = await write_section(store, records(4))
    reader = MessageReader(ObjectStore.from_url("memory://"), SectionCache(1 << 20), DamageLog())
    found: list[Damage] = []
    assert await reader.read_run(seg, 1, 4, damaged=found) == []
    assert [(d.seq, d.reason) for d in found] == [(s, "object missing") for s in (1, 2, 3, 4)]


async def test_parts_are_the_messages_as_they_go_on_the_wire(store: ObjectStore) -> None:
    recs = records(6, skipped=frozenset({2}))
    seg = await write_section(store, recs, first_seq=11, skipped=[2])
    reader = MessageReader(store, SectionCache(1 << 20), DamageLog())
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
    reader = MessageReader(store, cache, DamageLog(), whole_section_bytes=64, window_bytes=64)
    parts = await reader.read_parts(seg, 20, 21)
    assert [(seq, data) for seq, _, _, _, data in parts] == [(20, b"m20"), (21, b"m21")]
    assert (store.stats.gets, store.stats.bytes_got) == (1, seg.length)
    assert cache.get(KEY, seg.offset) == b"".join(recs)  # plain bytes, checked, kept
    got = await reader.read_run(seg, 1, 50)
    assert [m.data for m in got] == [b"m%d" % i for i in range(51) if i != 4]
    assert store.stats.gets == 1


async def test_a_damaged_compressed_section_is_reported(store: ObjectStore) -> None:
    """A compressed section is checked once decoded: the records a flipped bit spoiled are
    reported, those it did not are served; one that no longer decodes loses all its records
    (nothing to check them against), and is not kept."""
    seg = await write_section(store, records(30), codec=CODEC_ZSTD)
    data = await store.get(KEY)
    for at in (seg.offset + 2, seg.offset + seg.length // 2, seg.offset + seg.length - 1):
        damaged = bytearray(data)
        damaged[at] ^= 0x20
        broken = ObjectStore.from_url("memory://")
        await broken.put(KEY, bytes(damaged))
        cache: SectionCache[bytes] = SectionCache(1 << 20)
        log = DamageLog()
        found: list[Damage] = []
        got = await MessageReader(broken, cache, log).read_run(seg, 1, 30, damaged=found)
        assert found and {d.obj for d in found} == {KEY}
        assert sorted([m.seq for m in got] + [d.seq for d in found]) == list(range(1, 31))
        assert all(m.data == b"m%d" % (m.seq - 1) for m in got)
        assert log.records == len(found)
        # What decoded is kept, its damaged records unchecked; what did not, is not.
        held = cache.get(KEY, seg.offset)
        if len(found) == 30:
            assert held is None
        else:
            assert isinstance(held, Unchecked)
            assert sum(held.checked) == len(got)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with s3_server() as server:
        yield server


@pytest.mark.parametrize("kind", [Fault.ERROR, Fault.UNAVAILABLE, Fault.DROP, Fault.HANG])
async def test_a_store_that_fails_is_not_damage(
    store: ObjectStore, s3: S3Server, kind: Fault
) -> None:
    """S3 answering errors, dropping connections or not answering at all: the read raises (it
    can be tried again), and nothing is reported damaged."""
    seg = await write_section(store, records(4))
    bucket = f"reader-{kind.value}"
    s3.create_bucket(bucket)
    with S3FaultProxy(s3.endpoint) as proxy:
        remote = ObjectStore.from_url(
            f"s3://{bucket}", endpoint=proxy.endpoint, timeout=1.0, retries=1, **_keys(s3)
        )
        await remote.put(KEY, await store.get(KEY))
        log = DamageLog()
        reader = MessageReader(remote, SectionCache(1 << 20), log)
        proxy.fault = kind
        with pytest.raises(ObjectStoreError):
            await reader.read_run(seg, 1, 4)
        assert (log.records, log.reads) == (0, 0)
        proxy.fault = Fault.NONE
        assert [m.seq for m in await reader.read_run(seg, 1, 4)] == [1, 2, 3, 4]


def _keys(s3: S3Server) -> dict[str, str]:
    return {"region": s3.region, "access_key_id": s3.access_key, "secret_access_key": s3.secret_key}


# --- through the zone cache ----------------------------------------------------------------


async def zone_with_owner(
    store: ObjectStore, serve: Callable[[str, int, int], Awaitable[bytes]]
) -> tuple[ZoneCache, PeerServer]:
    """A zone cache whose every block belongs to another agent, served by `serve`."""

    async def secret() -> bytes:
        return b"pool"

    stats = ZoneCacheStats()
    server = PeerServer(PoolSecret(secret), serve, stats)
    port = await server.start("127.0.0.1", 0)
    blocks = BlockStore(store, memory_bytes=1 << 20, disk_bytes=0, directory=None, stats=stats)
    zone = ZoneCache(
        blocks,
        PeerClient(PoolSecret(secret), timeout=5),
        stats,
        self_id="me",
        members=lambda: [Peer("owner", f"http://127.0.0.1:{port}")],
    )
    return zone, server


async def test_sections_come_from_the_owner_of_their_block(store: ObjectStore) -> None:
    seg = await write_section(store, records(10))
    owner_store = ObjectStore.from_url("memory://")
    await owner_store.put(KEY, await store.get(KEY))
    owner = BlockStore(
        owner_store, memory_bytes=1 << 20, disk_bytes=0, directory=None, stats=ZoneCacheStats()
    )
    zone, server = await zone_with_owner(store, owner.read_range)
    gets = store.stats.gets
    reader = MessageReader(store, SectionCache(1 << 20), DamageLog(), zone=zone)
    got = await reader.read_run(seg, 1, 10)
    assert [m.data for m in got] == [b"m%d" % i for i in range(10)]
    assert store.stats.gets == gets and owner_store.stats.gets == 1
    assert zone.stats.peer_reads == 1
    await zone.close()
    await server.close()


async def test_a_section_of_a_block_this_agent_owns_is_held_once(
    store: ObjectStore, tmp_path: Path
) -> None:
    """In the section cache, within its budget; not in the zone cache's memory too. Once the
    section cache has let it go, the zone cache's disk saves the GET."""
    seg = await write_section(store, records(10))
    stats = ZoneCacheStats()
    blocks = BlockStore(
        store, memory_bytes=1 << 20, disk_bytes=1 << 20, directory=tmp_path, stats=stats
    )
    zone = ZoneCache(
        blocks,
        PeerClient(PoolSecret(lambda: asyncio.sleep(0, b"pool")), timeout=5),
        stats,
        self_id="me",
        members=lambda: [Peer("me", "http://127.0.0.1:1")],
    )
    cache: SectionCache[bytes] = SectionCache(1 << 20)
    reader = MessageReader(store, cache, DamageLog(), zone=zone)
    gets = store.stats.gets
    assert [m.data for m in await reader.read_run(seg, 1, 10)] == [b"m%d" % i for i in range(10)]
    assert cache.size_bytes == seg.length and stats.memory_bytes == 0
    cache.clear()
    assert [m.seq for m in await reader.read_run(seg, 4, 6)] == [4, 5, 6]
    assert store.stats.gets == gets + 1 and stats.owned_reads == 2 and stats.disk_hits == 1
    await zone.close()


async def test_bytes_from_a_peer_that_do_not_check_are_read_again_from_the_store(
    store: ObjectStore,
) -> None:
    seg = await write_section(store, records(10))

    async def lying(key: str, start: int, end: int) -> bytes:
        data = bytearray(await store.get_range(key, start, end))
        data[len(data) // 2] ^= 0xFF
        return bytes(data)

    zone, server = await zone_with_owner(store, lying)
    log = DamageLog()
    for whole in (1 << 20, 1):  # a section fetched whole, and a range of a large one
        reader = MessageReader(
            store, SectionCache(1 << 20), log, zone=zone, whole_section_bytes=whole
        )
        got = await reader.read_run(seg, 1, 10)
        assert [m.data for m in got] == [b"m%d" % i for i in range(10)]
    assert zone.stats.peer_reads == 2
    assert log.records == 0  # the peer's damage is not the data's
    await zone.close()
    await server.close()


async def test_a_cold_read_checks_only_the_records_it_returns(store: ObjectStore) -> None:
    seg = await write_section(store, records(8))
    # Message 7 is damaged; a read of message 2 fetches the whole section but checks only 2.
    damaged = await damaged_copy(store, flip(seg, 6, 15))
    cache: SectionCache[bytes] = SectionCache(1 << 20)
    log = DamageLog()
    reader = MessageReader(damaged, cache, log)
    assert (await reader.read(seg, 2)).data == b"m1"
    held = cache.get(KEY, seg.offset)
    assert isinstance(held, Unchecked) and list(held.checked) == [0, 1, 0, 0, 0, 0, 0, 0]
    assert log.records == 0
    before = damaged.stats.gets
    with pytest.raises(DamagedMessage):
        await reader.read(seg, 7)
    assert damaged.stats.gets == before and log.records == 1


async def write_directory_section(
    store: ObjectStore, recs: list[bytes], first_seq: int
) -> tuple[Section, int]:
    """Write `recs` as one section with its record directory; its section as the index has
    it (sequences from `first_seq`, times from 5,000), and where its records start."""
    directory = RecordDirectory.of(
        [decode_subject(r) for r in recs],
        [len(r) for r in recs],
        [int.from_bytes(r[2:6], "little") for r in recs],
    )
    builder = ObjectBuilder()
    ref = builder.add_section("ORDERS", recs, CODEC_NONE, directory)
    await store.put(KEY, builder.finish())
    n = len(recs)
    entry = SectionEntry(
        obj=KEY,
        offset=ref.offset,
        length=ref.length,
        plain_length=ref.records_length,
        dir_length=ref.index_length,
        records=n,
        first_seq=first_seq,
        last_seq=first_seq + n - 1,
        count=n,
        size=ref.length,
        ts=5_000,
        last_ts=5_000 + n - 1,
    )
    section, _ = section_of(f"default/sd/ORDERS/i/{first_seq:020d}", entry)
    return section, ref.offset


async def test_a_cold_read_of_a_section_with_a_directory_is_one_get(store: ObjectStore) -> None:
    section, _ = await write_directory_section(store, records(20), 101)
    reader = MessageReader(store, SectionCache(1 << 20), DamageLog())
    before = store.stats.gets
    seg = await reader.segment(section)
    msg = await reader.read(seg, 113)
    assert (msg.seq, msg.ts, msg.subject, msg.data) == (113, 5_012, "orders.0", b"m12")
    assert store.stats.gets == before + 1
    # A directory that cannot be read: its messages are damaged, not a read that fails.
    gone = MessageReader(ObjectStore.from_url("memory://"), SectionCache(1 << 20), DamageLog())
    unreadable = await gone.segment(section)
    with pytest.raises(DamagedMessage):
        await gone.read(unreadable, 113)


async def test_a_section_cut_inside_its_records_keeps_those_before_the_cut(
    store: ObjectStore,
) -> None:
    # The object is cut inside record 8: its directory, after the records, is gone too. The
    # records before the cut check on their own, and only those from the cut on are damaged,
    # each reported once.
    recs = records(10)
    section, offset = await write_directory_section(store, recs, 1)
    cut = offset + sum(len(r) for r in recs[:7]) + 5

    def truncate(data: bytearray) -> None:
        del data[cut:]

    for whole_section_bytes in (1 << 20, 1):  # read with its directory, and the directory alone
        log = DamageLog()
        reader = MessageReader(
            await damaged_copy(store, truncate),
            SectionCache(1 << 20),
            log,
            whole_section_bytes=whole_section_bytes,
        )
        seg = await reader.segment(section)
        found: list[Damage] = []
        got = await reader.read_run(seg, 1, 10, damaged=found)
        assert [(m.seq, m.subject, m.data) for m in got] == [
            (i + 1, f"orders.{i % 3}", b"m%d" % i) for i in range(7)
        ]
        assert [d.seq for d in found] == [8, 9, 10]
        assert log.records == 3
