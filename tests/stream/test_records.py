"""Metadata records: both forms of index entries, subject records, keys."""

from __future__ import annotations

from array import array

import msgspec

from infinistream.stream import records
from infinistream.stream.records import (
    IndexEntry,
    SectionEntry,
    StreamKeys,
    StreamState,
    SubjectRecord,
    decode_entry,
    decode_state,
    decode_subject,
)


def legacy(obj: str) -> IndexEntry:
    return IndexEntry(
        obj=obj,
        offset=8,
        length=40,
        first_seq=1,
        ts=5,
        subjects=["a"],
        subject_ids=array("I", [0, 0]).tobytes(),
        lengths=array("I", [20, 20]).tobytes(),
    )


def section(**kw: object) -> SectionEntry:
    fields: dict[str, object] = {
        "obj": "g/objects/l0/x.iso",
        "offset": 8,
        "length": 40,
        "plain_length": 40,
        "dir_length": 30,
        "records": 2,
        "first_seq": 1,
        "last_seq": 2,
        "count": 2,
        "size": 40,
        "ts": 5,
        "last_ts": 6,
        "names": ("a",),
        "counts": (2,),
    }
    fields.update(kw)
    return SectionEntry(**fields)  # type: ignore[arg-type]


def test_both_forms_of_index_entries_decode() -> None:
    for obj in ("o", "g/objects/" + "x" * 40, "y" * 300, "z" * 70_000):
        old = legacy(obj)
        assert decode_entry(records.encode(old)) == old
    for entry in (
        section(),
        section(obj="y" * 300, skipped=(3,), explicit=True, names=(), bloom=b"\x01" * 8),
        section(first_seq=2**62, last_seq=2**62 + 9, ts=2**62),
    ):
        assert decode_entry(records.encode(entry)) == entry
    assert section().dir_offset == 48


def test_a_state_written_without_subject_records_says_so() -> None:
    # What an agent of an earlier version writes: the same fields but this one.
    class EarlierState(msgspec.Struct, kw_only=True):
        uid: str
        first_seq: int
        last_seq: int

    state = decode_state(records.encode(EarlierState(uid="u", first_seq=1, last_seq=0)))
    assert state.subject_records == 0
    state.subject_records = 1
    assert decode_state(records.encode(state)) == state
    assert StreamState(uid="u", first_seq=1, last_seq=0).subject_records == 0


def test_subject_records_and_their_keys() -> None:
    keys = StreamKeys("g", "S")
    assert keys.subject("orders.eu.1") == "g/sd/S/p/orders.eu.1"
    assert keys.subject("x").startswith(keys.subject_prefix)
    record = SubjectRecord(first=3, last=90, count=12)
    assert decode_subject(records.encode(record)) == record
