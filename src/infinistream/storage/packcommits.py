"""Reading the commit records that packs carry, for the metadata store's recovery.

A flush on the embedded default makes its metadata commit durable by the `fdatasync` of the pack
its object went to: the commit's record is an entry of that pack (`packformat`, kind COMMIT).
After a power loss the database may lack the last of those commits; the store's recovery asks
here for every record the packs hold and replays the ones it lacks. Records are opaque bytes at
this layer. An entry whose data does not match its checksum was cut short by the loss: its
flush was never acknowledged, and it ends what is read of that pack; so does an object before
a record whose data is not whole (see `_scan`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from .packformat import (
    ENTRY_HEAD_SIZE,
    FOOTER_SIZE,
    KIND_COMMIT,
    KIND_SEAL,
    PACK_HEADER_SIZE,
    STATE_LIVE,
    data_checks,
    is_pack_name,
    parse_entry_head,
    parse_footer,
    parse_pack_header,
)

__all__ = ["commit_records", "pack_commit_records"]

# The most an entry's head and key take.
_HEAD_MAX = ENTRY_HEAD_SIZE + 0xFFFF


def commit_records(root: str) -> Iterator[bytes]:
    """The commit records of every pack under `root`, pack by pack (in no set order)."""
    for directory, _dirs, names in os.walk(root):
        for name in sorted(names):
            if is_pack_name(name):
                yield from pack_commit_records(os.path.join(directory, name))


def pack_commit_records(path: str) -> Iterator[bytes]:
    """The commit records of one pack, in the order they were written."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        size = os.fstat(fd).st_size
        if parse_pack_header(os.pread(fd, PACK_HEADER_SIZE, 0)) is None:
            return
        seal_at = None
        if size >= PACK_HEADER_SIZE + FOOTER_SIZE:
            seal_at = parse_footer(os.pread(fd, FOOTER_SIZE, size - FOOTER_SIZE))
        yield from _scan(fd, size if seal_at is None else seal_at, sealed=seal_at is not None)
    finally:
        os.close(fd)


def _scan(fd: int, end: int, *, sealed: bool) -> Iterator[bytes]:
    # A record counts only if the objects written before it in its pack are whole too: its
    # commit may name them, and one sync covered them all. Writeback may have carried the
    # record's page to the disk and not theirs; then that sync never completed, its flush was
    # never acknowledged, and nothing after it in the pack was either. (A sealed pack was
    # synced whole before its seal.)
    pos = PACK_HEADER_SIZE
    while pos < end:
        head = parse_entry_head(os.pread(fd, min(_HEAD_MAX, end - pos), pos))
        if head is None or head.kind == KIND_SEAL:
            return
        if head.kind == KIND_COMMIT or (not sealed and head.state == STATE_LIVE):
            data = os.pread(fd, head.length, pos + head.data_start)
            if not data_checks(head, data):
                return
            if head.kind == KIND_COMMIT:
                yield data
        pos += head.size
