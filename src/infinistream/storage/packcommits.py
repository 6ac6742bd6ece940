"""Reading the commit records that packs carry, for the metadata store's recovery.

A flush on the embedded default makes its metadata commit durable by the `fdatasync` of the pack
its object went to: the commit's record is an entry of that pack (`packformat`, kind COMMIT).
After a power loss the database may lack the last of those commits; the store's recovery asks
here for every record the packs hold and replays the ones it lacks. Records are opaque bytes at
this layer. An entry whose data does not match its checksum was cut short by the loss: its
flush was never acknowledged, and it ends what is read of that pack.
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
        end = size
        if size >= PACK_HEADER_SIZE + FOOTER_SIZE:
            seal_at = parse_footer(os.pread(fd, FOOTER_SIZE, size - FOOTER_SIZE))
            if seal_at is not None:
                end = seal_at
        yield from _scan(fd, end)
    finally:
        os.close(fd)


def _scan(fd: int, end: int) -> Iterator[bytes]:
    pos = PACK_HEADER_SIZE
    while pos < end:
        head = parse_entry_head(os.pread(fd, min(_HEAD_MAX, end - pos), pos))
        if head is None or head.kind == KIND_SEAL:
            return
        if head.kind == KIND_COMMIT:
            data = os.pread(fd, head.length, pos + head.data_start)
            if not data_checks(head, data):
                return
            yield data
        pos += head.size
