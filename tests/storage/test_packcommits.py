"""Commit records in packs: read back for recovery, passed over by everything reading objects,
retired (gone from the disk) once the metadata store needs them no more."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from infinistream.storage.localstore import LocalObjects
from infinistream.storage.packcommits import commit_records, pack_commit_records
from infinistream.storage.packformat import (
    PACK_PREFIX,
    STATE_DELETED,
    STATE_OFFSET,
    encode_commit,
    encode_entry_head,
    encode_pack_header,
)


def _object(key: str, data: bytes) -> bytes:
    return encode_entry_head(key.encode(), len(data), 1, zlib.crc32(data)) + data


def _write_pack(directory: Path, parts: list[bytes]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    pack = directory / f"{PACK_PREFIX}00000000000000000001-1-abcd"
    pack.write_bytes(encode_pack_header(1) + b"".join(parts) + bytes(4096))
    return pack


def test_records_come_back_in_order_and_objects_stay_readable(tmp_path: Path) -> None:
    first, second = os.urandom(300), os.urandom(70)
    _write_pack(
        tmp_path / "g" / "l0",
        [
            _object("g/l0/a", first),
            encode_commit(b"record one", 2),
            _object("g/l0/b", second),
            encode_commit(b"record two", 3),
        ],
    )
    assert list(commit_records(str(tmp_path))) == [b"record one", b"record two"]
    store = LocalObjects(str(tmp_path))
    try:
        assert [item.key for item in store.list_all()] == ["g/l0/a", "g/l0/b"]
        assert store.read("g/l0/a")[0] == first
        assert store.read("g/l0/b")[0] == second
    finally:
        store.close()


def test_a_record_cut_short_ends_what_is_read(tmp_path: Path) -> None:
    whole = encode_commit(b"kept", 2)
    torn = bytearray(encode_commit(b"lost to the power cut", 3))
    torn[-4:] = bytes(4)  # its last bytes never reached the disk
    pack = _write_pack(tmp_path / "g", [whole, bytes(torn), encode_commit(b"after", 4)])
    assert list(pack_commit_records(str(pack))) == [b"kept"]


def test_a_record_after_an_object_the_loss_took_is_not_read(tmp_path: Path) -> None:
    # Writeback carried the record's page to the disk, not the object's: the sync that would
    # have covered both never completed.
    torn = bytearray(_object("g/a", os.urandom(100)))
    torn[-50:] = bytes(50)
    pack = _write_pack(
        tmp_path / "g", [encode_commit(b"before", 2), bytes(torn), encode_commit(b"cut", 3)]
    )
    assert list(pack_commit_records(str(pack))) == [b"before"]


def test_a_retired_record_leaves_the_disk_and_recovery_passes_over_it(tmp_path: Path) -> None:
    first, second = os.urandom(300), os.urandom(70)
    pack = _write_pack(
        tmp_path / "g" / "l0",
        [
            _object("g/l0/a", first),
            encode_commit(b"record one names secret.subject", 2),
            _object("g/l0/b", second),
            encode_commit(b"record two", 3),
        ],
    )
    store = LocalObjects(str(tmp_path))
    try:
        assert store.retire_commit_records(lambda record: record.startswith(b"record one")) == 1
        assert b"secret.subject" not in pack.read_bytes()
        # The record after it still counts, and the objects around it still read back.
        assert list(commit_records(str(tmp_path))) == [b"record two"]
        assert store.read("g/l0/a")[0] == first
        assert store.read("g/l0/b")[0] == second
        # Nothing left to retire twice; the rest on request.
        assert store.retire_commit_records(lambda record: record.startswith(b"record one")) == 0
        assert store.retire_commit_records(lambda _: True) == 1
        assert list(commit_records(str(tmp_path))) == []
        assert [item.key for item in store.list_all()] == ["g/l0/a", "g/l0/b"]
    finally:
        store.close()


def test_a_record_punched_while_it_is_read_is_passed_over(tmp_path: Path) -> None:
    # Retiring marks the entry before it punches the data: a reader that read the head while
    # it was live finds the data gone and the mark set, and reads on.
    retired = encode_commit(b"retired meanwhile", 2)
    pack = _write_pack(tmp_path / "g", [retired, encode_commit(b"after", 3)])
    with pack.open("r+b") as f:
        f.seek(len(encode_pack_header(1)) + len(retired) - 5)
        f.write(bytes(5))
    assert list(pack_commit_records(str(pack))) == []
    with pack.open("r+b") as f:
        f.seek(len(encode_pack_header(1)) + STATE_OFFSET)
        f.write(bytes([STATE_DELETED]))
    assert list(pack_commit_records(str(pack))) == [b"after"]


def test_a_writer_retires_its_own_records_up_to_the_revision_settled(tmp_path: Path) -> None:
    store = LocalObjects(str(tmp_path))
    try:
        for revision in (4, 5, 6):
            staged = store.stage(f"g/l0/o{revision}", [b"object %d" % revision])
            assert staged is not None
            store.complete(staged, b"record of commit %d" % revision, revision)
        assert store.retire_own_records(5) == 2
        assert list(commit_records(str(tmp_path))) == [b"record of commit 6"]
        (pack,) = (tmp_path / "g" / "l0").glob(f"{PACK_PREFIX}*")
        assert b"record of commit 4" not in pack.read_bytes()
        assert store.retire_own_records(5) == 0
        assert store.retire_own_records(6) == 1
        assert list(commit_records(str(tmp_path))) == []
        assert [store.read(f"g/l0/o{r}")[0] for r in (4, 5, 6)] == [
            b"object 4",
            b"object 5",
            b"object 6",
        ]
    finally:
        store.close()
