"""A power failure, simulated from what a process wrote and synced.

The process runs under strace (`STRACE_ARGS`), which records each positional write to a file
(offset and length), each fsync or fdatasync, and each change of a file's size, in the order the
kernel completed them. A write reached the disk for sure only if a sync of its file that
started after the write had completed then succeeded; any other may have been lost with the
page cache when the power went. `lose_unsynced` puts the files back that way: each such write
reads as zeros (what a pack or a reused WAL had there: space allocated ahead, or frames of an
earlier generation that nothing reads any more), except a seeded few kept whole, as writeback
may have carried them to the disk before the power went.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Syscalls that change a file's bytes or make them durable.
TRACED = "pwrite64,pwritev,pwritev2,write,writev,fsync,fdatasync,ftruncate,fallocate"
STRACE_ARGS = ["strace", "-f", "-qq", "-y", "-s", "0", "--seccomp-bpf", "-e", f"trace={TRACED}"]

_CALL = re.compile(r"^(\d+) +(\w+)\((\d+)<([^>]*)>(.*)$")
_RESUMED = re.compile(r"^(\d+) +<\.\.\. (\w+) resumed>(.*)$")
_RESULT = re.compile(r"\)\s+=\s+(-?\d+)")


@dataclass
class FileHistory:
    """The writes and syncs of one file, in the order they completed."""

    path: str
    # (completed at, offset, length)
    writes: list[tuple[int, int, int]] = field(default_factory=list)
    # When the last sync that succeeded started (every write completed before then is on disk).
    synced_before: int = -1
    # Writes at the file's current position: not modelled (nothing durable may depend on them).
    unmodelled: int = 0

    def unsynced(self) -> list[tuple[int, int]]:
        return [(off, n) for at, off, n in self.writes if at >= self.synced_before]


@dataclass
class _Pending:
    call: str
    fd_path: str
    args: str
    started: int


def parse(lines: Iterator[str], wanted: Callable[[str], bool]) -> dict[str, FileHistory]:
    """The histories of the files whose paths `wanted` picks, from strace's output."""
    files: dict[str, FileHistory] = {}
    pending: dict[tuple[str, str], _Pending] = {}
    for index, line in enumerate(lines):
        m = _CALL.match(line)
        if m is not None:
            pid, call, _, path, rest = m.groups()
            if not wanted(path):
                continue
            if rest.endswith("<unfinished ...>"):
                pending[(pid, call)] = _Pending(call, path, rest, index)
                continue
            _complete(files, call, path, rest, index, index)
            continue
        m = _RESUMED.match(line)
        if m is not None:
            pid, call, rest = m.groups()
            started = pending.pop((pid, call), None)
            if started is not None:
                args = started.args.removesuffix("<unfinished ...>").rstrip() + rest
                _complete(files, call, started.fd_path, args, started.started, index)
    return files


def _complete(
    files: dict[str, FileHistory], call: str, path: str, args: str, started: int, done: int
) -> None:
    result = _RESULT.search(args)
    if result is None or int(result.group(1)) < 0:
        return  # failed: changed nothing (or nothing to count on)
    history = files.setdefault(path, FileHistory(path))
    if call in ("fsync", "fdatasync"):
        history.synced_before = max(history.synced_before, started)
    elif call in ("pwrite64", "pwritev", "pwritev2"):
        numbers = re.findall(r",\s*(-?\d+)", args.rsplit(") =", 1)[0])
        # pwritev2's last argument is its flags; the offset comes just before them.
        offset = int(numbers[-2] if call == "pwritev2" else numbers[-1])
        history.writes.append((done, offset, int(result.group(1))))
    elif call in ("write", "writev"):
        history.unmodelled += 1


def lose_unsynced(files: dict[str, FileHistory], seed: int, keep: float = 0.1) -> int:
    """Zero every write no sync covered, but for a `keep` share of them; how many were lost."""
    rng = random.Random(seed)
    lost = 0
    for history in files.values():
        path = Path(history.path)
        if not path.is_file():
            continue  # gone since, or a directory (synced, never written)
        with path.open("r+b") as f:
            size = path.stat().st_size
            for offset, length in history.unsynced():
                if rng.random() < keep or offset >= size:
                    continue
                f.seek(offset)
                f.write(bytes(min(length, size - offset)))
                lost += 1
    return lost
