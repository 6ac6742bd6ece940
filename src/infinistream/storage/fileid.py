"""Which file a path names, asked without reading the file's times.

Linux (6.13 on) stamps a file's change and modify times from a coarse clock until someone
reads them: a stat of a file marks its times as seen, and the next write then stamps a
fine-grained time, which always differs from the last and so dirties the inode. On ext4
without a journal an `fdatasync` then writes the inode's block after the data, a second
device write that waits for the first. A pack writer that asked with `os.stat` whether its
pack was still in place before each sync made nearly every sync pay that write (a sequential
publisher's: 3,019 of 3,040 syncs wrote the inode; asking as below, 986 of 3,041, when the
coarse clock ticked or a write reached a block of the reservation first; docs/benchmarks.md).

`statx` asked for the inode number alone reads no time (`fill_mg_cmtime` returns early when
neither time is requested). Where the C library has no `statx`, `os.stat` answers as before.
"""

from __future__ import annotations

import ctypes
import os
import struct
from typing import NamedTuple

from .libc import libc_function

__all__ = ["FileId", "file_id", "file_id_at"]

_AT_FDCWD = -100
_STATX_INO = 0x100
# struct statx: stx_mask at 0, stx_ino at 32, stx_dev_major and stx_dev_minor at 136 and 140;
# 256 bytes in all.
_STATX_SIZE = 256
_INO = struct.Struct("=Q")
_DEV = struct.Struct("=II")


class FileId(NamedTuple):
    """A file's identity: its device and inode number."""

    dev: int
    ino: int


def file_id(fd: int) -> FileId:
    """The identity of the open file `fd` (it never changes: ask once)."""
    st = os.fstat(fd)
    return FileId(st.st_dev, st.st_ino)


_statx = libc_function(
    "statx",
    [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p],
    ctypes.c_int,
)


def file_id_at(path: str) -> FileId:
    """The identity of the file `path` names (following links, as `os.stat`); raises the
    OSError `os.stat` would when there is none."""
    if _statx is None:
        st = os.stat(path)
        return FileId(st.st_dev, st.st_ino)
    buf = ctypes.create_string_buffer(_STATX_SIZE)
    if _statx(_AT_FDCWD, os.fsencode(path), 0, _STATX_INO, buf) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    major, minor = _DEV.unpack_from(buf, 136)
    return FileId(os.makedev(major, minor), _INO.unpack_from(buf, 32)[0])
