"""Look inside an agent's store from the outside, as the tests of invariants 1, 4 and 6 must.

Everything here reads the store directly (the object files, the SQLite metadata file), never
through an agent, and synchronously, so a check made the moment an ack arrives sees the store
as it is at that moment.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from infinistream.storage import Encryption
from infinistream.storage.directory import open_directory
from infinistream.storage.localstore import LocalObjects
from infinistream.stream.records import IndexEntry, StreamKeys, decode_entry, decode_state
from infinistream.stream.records import StreamState as MetaStreamState
from infinistream.stream.sections import Segment


def stored_objects(objects_dir: Path) -> dict[str, bytes]:
    """Every object of a local store by key, with its bytes: those appended to pack files and
    those in files of their own (large ones, and every one a store wrote before packs)."""
    if not objects_dir.exists():
        return {}
    store = LocalObjects(str(objects_dir))
    try:
        return {item.key: store.read(item.key)[0] for item in store.list_all()}
    finally:
        store.close()


def object_keys(objects_dir: Path) -> set[str]:
    """The keys of every object of a local store."""
    if not objects_dir.exists():
        return set()
    store = LocalObjects(str(objects_dir))
    try:
        return {item.key for item in store.list_all()}
    finally:
        store.close()


def object_bytes(objects_dir: Path, key: str) -> bytes:
    store = LocalObjects(str(objects_dir))
    try:
        return store.read(key)[0]
    finally:
        store.close()


def _locate(objects_dir: Path, key: str) -> tuple[Path, int, int]:
    store = LocalObjects(str(objects_dir))
    try:
        path, offset, length = store.where(key)
    finally:
        store.close()
    return Path(path), offset, length


def damage_object(objects_dir: Path, key: str, at: int, xor: int) -> None:
    """Flip bits of byte `at` of an object where it is on disk, as a disk might."""
    path, offset, length = _locate(objects_dir, key)
    assert at < length
    with path.open("r+b") as f:
        f.seek(offset + at)
        byte = f.read(1)[0]
        f.seek(offset + at)
        f.write(bytes([byte ^ xor]))


def cut_object(objects_dir: Path, key: str, at: int) -> None:
    """Lose an object's bytes from `at` on: a file of its own is truncated there; a packed one
    (other objects follow it in its pack) reads as zeros from there, as a lost write leaves it."""
    path, offset, length = _locate(objects_dir, key)
    if offset == 0 and path.stat().st_size == length and "#" not in path.name:
        with path.open("r+b") as f:
            f.truncate(at)
        return
    with path.open("r+b") as f:
        f.seek(offset + at)
        f.write(bytes(length - at))


def remove_object(objects_dir: Path, key: str) -> None:
    """Delete an object as an operator or a failing disk might, agents stopped."""
    store = LocalObjects(str(objects_dir))
    try:
        store.delete(key)
    finally:
        store.close()


def _kv(meta_db: Path, key: str) -> bytes | None:
    con = sqlite3.connect(f"file:{meta_db}?mode=ro", uri=True, timeout=10)
    try:
        row = con.execute("SELECT value FROM kv WHERE key = ?", (key.encode(),)).fetchone()
    finally:
        con.close()
    return None if row is None else bytes(row[0])


def _kv_range(meta_db: Path, prefix: str) -> list[tuple[str, bytes]]:
    con = sqlite3.connect(f"file:{meta_db}?mode=ro", uri=True, timeout=10)
    try:
        rows = con.execute(
            "SELECT key, value FROM kv WHERE substr(key, 1, ?) = ? ORDER BY key",
            (len(prefix.encode()), prefix.encode()),
        ).fetchall()
    finally:
        con.close()
    return [(bytes(k).decode(), bytes(v)) for k, v in rows]


def committed_state(meta_db: Path, stream: str, group: str = "default") -> MetaStreamState | None:
    """The stream's state as last committed to metadata."""
    value = _kv(meta_db, StreamKeys(group, stream).state)
    return None if value is None else decode_state(value)


def object_holding(meta_db: Path, stream: str, seq: int, group: str = "default") -> tuple[str, int]:
    """(object key, end offset of its section) of the committed index entry covering `seq`."""
    keys = StreamKeys(group, stream)
    best = None
    for _, value in _kv_range(meta_db, keys.index_prefix):
        entry = decode_entry(value)
        if entry.first_seq <= seq:
            best = entry
    assert best is not None, f"no index entry covers {stream} seq {seq}"
    return best.obj, best.offset + best.length


def index_forms(meta_db: Path, stream: str, group: str = "default") -> list[str]:
    """The form of each committed index entry of the stream, in order: "entry" (per-record
    arrays, as written before record directories) or "section" (with a record directory)."""
    keys = StreamKeys(group, stream)
    return [
        "entry" if isinstance(decode_entry(value), IndexEntry) else "section"
        for _, value in _kv_range(meta_db, keys.index_prefix)
    ]


def objects_of(meta_db: Path, stream: str, group: str = "default") -> set[str]:
    """The keys of the objects that hold the stream's committed sections."""
    keys = StreamKeys(group, stream)
    return {decode_entry(value).obj for _, value in _kv_range(meta_db, keys.index_prefix)}


def record_of(
    meta_db: Path,
    stream: str,
    seq: int,
    group: str = "default",
    *,
    objects_dir: Path | None = None,
    keys: Encryption | None = None,
) -> tuple[str, int, int]:
    """(object key, offset in the object, length) of the stored record of message `seq`.

    A section's record directory is read from its object file (under `objects_dir`, by default
    the `objects` directory beside the metadata file), opened with `keys` when sealed."""
    objects = objects_dir if objects_dir is not None else meta_db.parent / "objects"
    for key, value in _kv_range(meta_db, StreamKeys(group, stream).index_prefix):
        entry = decode_entry(value)
        if isinstance(entry, IndexEntry):
            seg = Segment.from_entry(key, entry)
        else:
            if not entry.first_seq <= seq <= entry.last_seq:
                continue
            data = object_bytes(objects, entry.obj)
            stored = data[entry.dir_offset : entry.dir_offset + entry.dir_length]
            seg = Segment.from_directory(key, entry, open_directory(stored, keys=keys))
        i = seg.index_of(seq)
        if i is not None:
            return seg.obj, seg.offset + seg.offsets[i], seg.lengths[i]
    raise AssertionError(f"no index entry holds {stream} seq {seq}")


async def stream_info_json(nc: Client, stream: str) -> dict[str, Any]:
    """STREAM.INFO as the server sends it, without the response's own timestamp."""
    reply = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=10)
    info: dict[str, Any] = json.loads(reply.data)
    assert "error" not in info, info
    info.pop("ts", None)
    info.pop("cluster", None)  # names the agent that answered
    return info
