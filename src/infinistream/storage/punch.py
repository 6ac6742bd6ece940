"""Making a range of a file read as zeros: a hole where the file system can punch one.

Deleting an object of a pack and retiring a commit record both take the bytes off the disk
this way (then sync the pack), which is what erase needs of them.
"""

from __future__ import annotations

import ctypes
import errno
import os

from .libc import libc_function

__all__ = ["punch"]

_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_ZEROS = 1024 * 1024


_fallocate = libc_function(
    "fallocate", [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64], ctypes.c_int
)


def punch(fd: int, offset: int, length: int) -> None:
    """Make bytes [offset, offset + length) of the file read as zeros, freeing its blocks where
    the file system can (a hole), writing zeros where it cannot."""
    if length <= 0:
        return
    if _fallocate is not None:
        flags = _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE
        if _fallocate(fd, flags, offset, length) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err))
    zeros = bytes(min(length, _ZEROS))
    done = 0
    while done < length:
        done += os.pwrite(fd, zeros[: length - done], offset + done)
