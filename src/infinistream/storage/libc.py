"""Functions of the C library that the standard library does not wrap (`statx` asked for some
fields only, `fallocate` with flags, `sync_file_range`), looked up once by whoever uses them."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable
from typing import Any

__all__ = ["libc_function"]


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, opened once: finding it runs `ldconfig -p` in a child process."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    except OSError:
        return None


def libc_function(name: str, argtypes: list[Any], restype: Any) -> Callable[..., int] | None:
    """The C library's `name`, typed, setting errno for `ctypes.get_errno`; None where the
    library or the function is missing (another C library, another system): callers then
    answer with what the standard library has."""
    libc = _libc()
    fn = getattr(libc, name, None) if libc is not None else None
    if fn is None:
        return None
    fn.argtypes = argtypes
    fn.restype = restype
    found: Callable[..., int] = fn
    return found
