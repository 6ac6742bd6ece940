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
from infinistream.stream.records import IndexEntry, StreamKeys, decode_entry, decode_state
from infinistream.stream.records import StreamState as MetaStreamState
from infinistream.stream.sections import Segment


def object_files(objects_dir: Path) -> list[Path]:
    """Every finished object file (obstore's `key#N` staging files left out)."""
    if not objects_dir.exists():
        return []
    return sorted(p for p in objects_dir.rglob("*") if p.is_file() and "#" not in p.name)


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
            with open(objects / entry.obj, "rb") as f:
                f.seek(entry.dir_offset)
                stored = f.read(entry.dir_length)
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
