"""The host-wide barrier between commits made durable by a pack and syncs of the SQLite WAL.

A flush commit on the embedded default leaves its durability to the pack that holds its object
and its commit record (`commitrecord`): it commits without syncing the WAL, then the pack's one
`fdatasync` makes object and record durable. Anything that syncs the WAL meanwhile (a durable
commit of any connection, a checkpoint) would make that commit durable before its object, and a
power loss then would leave the database naming bytes that never reached the disk. So such a
commit holds this lock shared from before its COMMIT until its pack is synced, and every write
that syncs the WAL holds it exclusive: it waits for those syncs, a fraction of a millisecond.
An flock on a file beside the database, so that every agent process of the host takes part; the
holder of each side never waits on the other's SQLite lock (a shared holder has committed), so
the two locks cannot deadlock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

__all__ = ["SyncBarrier"]


class SyncBarrier:
    """One open file description of the barrier's lock file (flock conflicts between open
    file descriptions, so each connection of a process has its own)."""

    def __init__(self, database: str) -> None:
        self.path = database + "-sync"
        self._fd = -1

    def _open(self) -> int:
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        return self._fd

    def try_shared(self) -> bool:
        """Take the lock shared unless a WAL sync holds it; whether taken."""
        try:
            fcntl.flock(self._open(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    @contextlib.contextmanager
    def exclusive(self, *, wait: bool) -> Iterator[bool]:
        """Hold the lock exclusive for the block; without `wait`, the block gets False (and
        nothing held) when pack-durable commits are still syncing."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def release(self) -> None:
        if self._fd >= 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
