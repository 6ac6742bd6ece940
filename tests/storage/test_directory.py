"""Record directories: round trips, in objects (plain, compressed, sealed), damage, old objects."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infinistream.storage import (
    CODEC_NONE,
    CODEC_SEALED,
    CODEC_ZSTD,
    CorruptObjectError,
    Encryption,
    KeyRefusedError,
    LocalKeys,
    ObjectBuilder,
    ObjectStore,
    RecordDirectory,
    UnsupportedFormatError,
    decode_section,
    encode_record,
    parse_object,
    read_directory,
    read_toc,
    split_records,
)
from infinistream.storage.directory import DirectoryError, open_directory, store_directory
from infinistream.storage.keys import CIPHER_CHACHA
from infinistream.storage.segment import (
    HEADER_SIZE,
    SECTION_DIRECTORIES,
    rewrite_sections,
    verify_directory,
)


def enc(key: str = "k1", *prev: str) -> Encryption:
    return Encryption(LocalKeys.from_texts(key, prev, cipher=CIPHER_CHACHA), CIPHER_CHACHA)


MESSAGES = [
    ("orders.eu", b"NATS/1.0\r\nA: b\r\n\r\n", b"x" * 20),
    ("orders.us", b"", b""),
    ("orders.eu", b"", b"yy"),
] + [(f"ev.{i % 3}", b"", bytes([i]) * i) for i in range(40)]


def section(
    messages: list[tuple[str, bytes, bytes]], **known: list[int]
) -> tuple[list[bytes], RecordDirectory]:
    records = [encode_record(s, h, d) for s, h, d in messages]
    directory = RecordDirectory.of(
        [s for s, _, _ in messages],
        [len(r) for r in records],
        [len(h) for _, h, _ in messages],
        **known,
    )
    return records, directory


# --- the directory on its own ----------------------------------------------------------------


@given(
    st.lists(
        st.tuples(st.text(min_size=1, max_size=12), st.integers(14, 2**32 - 1), st.integers(0, 99)),
        max_size=60,
    ),
    st.booleans(),
)
def test_round_trip(rows: list[tuple[str, int, int]], explicit: bool) -> None:
    seqs = [i * 3 + 1 for i in range(len(rows))] if explicit else None
    stamps = [10**18 + i for i in range(len(rows))] if explicit else None
    directory = RecordDirectory.of(
        [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], seqs, stamps
    )
    again = RecordDirectory.decode(directory.encode())
    assert again == directory
    assert [again.subject_at(i) for i in range(len(rows))] == [r[0] for r in rows]
    assert [again.headers_at(i) for i in range(len(rows))] == [r[2] for r in rows]
    assert list(again.offsets()) == list(itertools.accumulate((r[1] for r in rows), initial=0))
    assert open_directory(store_directory(directory)) == directory


def test_subjects_are_named_once_and_no_headers_cost_nothing() -> None:
    directory = RecordDirectory.of(["a", "b", "a", "a"], [20, 21, 22, 23], [0, 0, 0, 0])
    assert directory.subjects == ["a", "b"] and list(directory.ids) == [0, 1, 0, 0]
    assert directory.header_lengths is None and directory.seqs is None
    # Small messages' directories compress to a few bytes a record.
    many = RecordDirectory.of([f"s.{i % 16}" for i in range(4000)], [40] * 4000)
    assert len(store_directory(many)) < 4000


def test_a_directory_of_other_records_is_refused() -> None:
    with pytest.raises(DirectoryError):
        RecordDirectory.of(["a", "b"], [20])
    with pytest.raises(DirectoryError):
        RecordDirectory.of(["a"], [20], seqs=[1, 2])
    plain = bytearray(RecordDirectory.of(["a", "b"], [20, 30]).encode())
    with pytest.raises(DirectoryError):
        RecordDirectory.decode(bytes(plain[:-3]))
    with pytest.raises(DirectoryError):
        open_directory(b"XX" + bytes(store_directory(RecordDirectory.of(["a"], [20])))[2:])


def test_sealed_directories_need_their_key() -> None:
    keys = enc()
    directory = RecordDirectory.of(["secret.subject"] * 3, [40, 41, 42])
    stored = store_directory(directory, keys.sealer())
    assert b"secret" not in stored
    assert open_directory(stored, keys=keys) == directory
    with pytest.raises(KeyRefusedError):
        open_directory(stored)
    with pytest.raises(KeyRefusedError):
        open_directory(stored, keys=enc("other"))
    damaged = bytearray(stored)
    damaged[-1] ^= 1
    with pytest.raises(DirectoryError):
        open_directory(bytes(damaged), keys=keys)


# --- in objects ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_ZSTD, CODEC_SEALED, CODEC_ZSTD | CODEC_SEALED])
def test_objects_carry_directories_after_their_sections(codec: int) -> None:
    keys = enc()
    builder = ObjectBuilder(keys.sealer())
    records, directory = section(MESSAGES)
    other_records, other = section(MESSAGES[:2], seqs=[7, 9], stamps=[100, 200])
    ref = builder.add_section("S", records, codec, directory)
    second = builder.add_section("T", other_records, CODEC_NONE, other)
    data = builder.finish()
    assert data[6] & SECTION_DIRECTORIES  # the header's flags
    refs = parse_object(data, keys=keys)
    assert refs == [ref, second] and ref.directory and second.directory
    # The directory follows its records: one range holds both.
    assert ref.index_offset == ref.end and second.offset == ref.index_end
    got = verify_directory(data[ref.index_offset : ref.index_end], ref, keys=keys)
    assert got == directory
    assert verify_directory(data[second.index_offset : second.index_end], second) == other
    plain = decode_section(data[ref.offset : ref.end], ref, keys=keys)
    parts = split_records(plain, list(directory.offsets())[:-1], list(directory.lengths))
    assert [(s.decode(), h, d) for s, h, d in parts] == MESSAGES
    if codec & CODEC_SEALED:
        assert b"orders" not in data[ref.offset : ref.index_end]


def test_every_section_has_a_directory_or_none_does() -> None:
    records, directory = section(MESSAGES[:3])
    builder = ObjectBuilder()
    builder.add_section("S", records, CODEC_NONE, directory)
    with pytest.raises(ValueError):
        builder.add_section("T", records)
    builder = ObjectBuilder()
    builder.add_section("S", records)
    with pytest.raises(ValueError):
        builder.add_section("T", records, CODEC_NONE, directory)
    with pytest.raises(ValueError):
        ObjectBuilder().add_section("S", records[:2], CODEC_NONE, directory)


def test_objects_without_directories_keep_their_index() -> None:
    records, _ = section(MESSAGES[:3])
    builder = ObjectBuilder()
    ref = builder.add_section("S", records)
    data = builder.finish()
    assert not ref.directory and ref.index_length == 4 * len(records)
    assert not data[6] & SECTION_DIRECTORIES and parse_object(data) == [ref]


def test_every_directory_byte_flip_is_detected() -> None:
    records, directory = section(MESSAGES[:5])
    builder = ObjectBuilder()
    ref = builder.add_section("S", records, CODEC_NONE, directory)
    data = builder.finish()
    for at in range(ref.index_offset, ref.index_end):
        damaged = bytearray(data)
        damaged[at] ^= 0x40
        with pytest.raises(CorruptObjectError):
            parse_object(bytes(damaged))


def test_an_earlier_reader_refuses_directories_rather_than_misread() -> None:
    # What a reader that knows flag 0x0001 only does with 0x0002: the TOC check of flags.
    records, directory = section(MESSAGES[:3])
    builder = ObjectBuilder()
    builder.add_section("S", records, CODEC_NONE, directory)
    data = bytearray(builder.finish())
    data[6] |= 0x04  # a flag this build does not know either
    with pytest.raises(UnsupportedFormatError):
        parse_object(bytes(data))
    assert read_toc(builder_tail(records, directory))[0].directory


def builder_tail(records: list[bytes], directory: RecordDirectory) -> bytes:
    builder = ObjectBuilder()
    builder.add_section("S", records, CODEC_NONE, directory)
    return builder.finish()


def test_key_rotation_rewraps_directories_too() -> None:
    old, new = enc("k1"), enc("k2", "k1")
    records, directory = section(MESSAGES)
    builder = ObjectBuilder(old.sealer())
    builder.add_section("S", records, CODEC_ZSTD | CODEC_SEALED, directory)
    data = builder.finish()
    rewrapped, [(_, ref)] = rewrite_sections(data, lambda _ref, stored: new.rewrap(stored))
    assert verify_directory(rewrapped[ref.index_offset : ref.index_end], ref, keys=enc("k2"))
    with pytest.raises(KeyRefusedError):
        parse_object(rewrapped, keys=old)


async def test_read_a_directory_with_one_get() -> None:
    store = ObjectStore.from_url("memory://")
    records, directory = section(MESSAGES)
    builder = ObjectBuilder()
    ref = builder.add_section("S", records, CODEC_NONE, directory)
    await store.put("obj", builder.finish())
    before = store.stats.gets
    got = await read_directory(store, "obj", ref.index_offset, ref.index_length)
    assert got == directory
    assert store.stats.gets == before + 1
    with pytest.raises(CorruptObjectError):
        await read_directory(store, "obj", ref.index_offset + 1, ref.index_length - 1)
    with pytest.raises(CorruptObjectError):
        await read_directory(store, "obj", HEADER_SIZE, ref.index_length)


def test_large_sections_directories_stay_small() -> None:
    rng = random.Random(4)
    messages = [(f"big.{rng.randrange(100_000)}", b"", b"x" * 16) for _ in range(20_000)]
    records, directory = section(messages)
    stored = store_directory(directory)
    # Well under the records' own size, and under 8 bytes a record for 100,000 subjects.
    assert len(stored) < 8 * len(records) < sum(map(len, records))
