"""The commit records that packs carry: read back for the metadata store's recovery, and
retired once the store no longer needs them.

A flush on the embedded default makes its metadata commit durable by the `fdatasync` of the pack
its object went to: the commit's record is an entry of that pack (`packformat`, kind COMMIT).
After a power loss the database may lack the last of those commits; the store's recovery asks
here for every record the packs hold and replays the ones it lacks. Records are opaque bytes at
this layer. An entry whose data does not match its checksum was cut short by the loss: its
flush was never acknowledged, and it ends what is read of that pack; so does an object before
a record whose data is not whole (see `_live_commits`).

A record is needed only until the database is durably past its commit. It holds copies of
metadata (subject names, message ids, index entries), which erase must be able to remove like
any other copy, so a record no longer needed is retired the way an object is deleted: its state
byte marked DELETED and synced first, then its data punched out and the pack synced
(`retire_commit_records`, `retire_commits_at`).
Recovery passes over retired records.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import NamedTuple

from .packformat import (
    ENTRY_HEAD_SIZE,
    FOOTER_SIZE,
    KIND_COMMIT,
    KIND_SEAL,
    PACK_HEADER_SIZE,
    STATE_DELETED,
    STATE_LIVE,
    STATE_OFFSET,
    data_checks,
    is_pack_name,
    parse_entry_head,
    parse_footer,
    parse_pack_header,
)
from .punch import punch

__all__ = [
    "commit_records",
    "pack_commit_records",
    "retire_commit_records",
    "retire_commits_at",
]

# The most an entry's head and key take.
_HEAD_MAX = ENTRY_HEAD_SIZE + 0xFFFF
_DELETED = bytes([STATE_DELETED])


class _Commit(NamedTuple):
    """A live commit entry of a pack."""

    offset: int  # of the entry
    data_offset: int
    record: bytes


def commit_records(root: str) -> Iterator[bytes]:
    """The live commit records of every pack under `root`, pack by pack (in no set order)."""
    for path in _packs(root):
        yield from pack_commit_records(path)


def pack_commit_records(path: str) -> Iterator[bytes]:
    """The live commit records of one pack, in the order they were written."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        for commit in _live_commits(fd):
            yield commit.record
    finally:
        os.close(fd)


def retire_commit_records(root: str, needless: Callable[[bytes], bool]) -> int:
    """Retire every live commit record under `root` that `needless` says the metadata store
    needs no more (its commit is durable in the database); how many were retired. Each pack
    with one retired is synced before the next is read: on return the bytes are gone from the
    disk."""
    retired = 0
    for path in _packs(root):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            retired += _retire(fd, [c for c in _live_commits(fd) if needless(c.record)])
        finally:
            os.close(fd)
    return retired


def retire_commits_at(path: str, offsets: list[int]) -> int:
    """Retire the commit records whose entries start at `offsets` in the pack at `path` (this
    store wrote them there), if the pack is still there and they are still live; how many."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    try:
        commits = []
        for at in offsets:
            head = parse_entry_head(os.pread(fd, ENTRY_HEAD_SIZE, at))
            if head is not None and head.kind == KIND_COMMIT and head.state == STATE_LIVE:
                commits.append(_Commit(at, at + head.data_start, bytes(head.length)))
        return _retire(fd, commits)
    finally:
        os.close(fd)


def _retire(fd: int, commits: list[_Commit]) -> int:
    # The marks are made durable before any data is punched: a record whose data a power loss
    # left punched and whose mark it took would read as cut short, and end what recovery reads
    # of its pack, records written after it included.
    if not commits:
        return 0
    for commit in commits:
        os.pwrite(fd, _DELETED, commit.offset + STATE_OFFSET)
    os.fdatasync(fd)
    for commit in commits:
        punch(fd, commit.data_offset, len(commit.record))
    os.fsync(fd)
    return len(commits)


def _packs(root: str) -> Iterator[str]:
    for directory, _dirs, names in os.walk(root):
        for name in sorted(names):
            if is_pack_name(name):
                yield os.path.join(directory, name)


def _live_commits(fd: int) -> Iterator[_Commit]:
    size = os.fstat(fd).st_size
    if parse_pack_header(os.pread(fd, PACK_HEADER_SIZE, 0)) is None:
        return
    seal_at = None
    if size >= PACK_HEADER_SIZE + FOOTER_SIZE:
        seal_at = parse_footer(os.pread(fd, FOOTER_SIZE, size - FOOTER_SIZE))
    yield from _scan(fd, size if seal_at is None else seal_at, sealed=seal_at is not None)


def _scan(fd: int, end: int, *, sealed: bool) -> Iterator[_Commit]:
    # A record counts only if the objects written before it in its pack are whole too: its
    # commit may name them, and one sync covered them all. Writeback may have carried the
    # record's page to the disk and not theirs; then that sync never completed, its flush was
    # never acknowledged, and nothing after it in the pack was either. (A sealed pack was
    # synced whole before its seal.) Deleted objects and retired records are passed over: each
    # was marked only after a durable commit of the database.
    pos = PACK_HEADER_SIZE
    while pos < end:
        head = parse_entry_head(os.pread(fd, min(_HEAD_MAX, end - pos), pos))
        if head is None or head.kind == KIND_SEAL:
            return
        if head.state == STATE_LIVE and (head.kind == KIND_COMMIT or not sealed):
            data = os.pread(fd, head.length, pos + head.data_start)
            if not data_checks(head, data):
                if os.pread(fd, 1, pos + STATE_OFFSET) != _DELETED:
                    return
                # Deleted or retired while being read: marked before it was punched.
            elif head.kind == KIND_COMMIT:
                yield _Commit(pos, pos + head.data_start, data)
        pos += head.size
