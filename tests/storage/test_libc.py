"""Functions of the C library looked up by name."""

from __future__ import annotations

import ctypes
import errno
import os

from infinistream.storage.libc import libc_function


def test_a_function_is_called_with_its_types() -> None:
    getpid = libc_function("getpid", [], ctypes.c_int)
    assert getpid is not None
    assert getpid() == os.getpid()


def test_errno_is_kept_for_the_caller() -> None:
    close = libc_function("close", [ctypes.c_int], ctypes.c_int)
    assert close is not None
    assert close(-1) == -1
    assert ctypes.get_errno() == errno.EBADF


def test_a_function_the_library_lacks_is_none() -> None:
    assert libc_function("no_such_function_in_any_libc", [], ctypes.c_int) is None
