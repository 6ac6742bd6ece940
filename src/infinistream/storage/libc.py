"""Functions of the C library that the standard library does not wrap (`statx` asked for some
fields only, `fallocate` with flags), looked up once by whoever uses them."""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from typing import Any

__all__ = ["libc_function"]


def libc_function(name: str, argtypes: list[Any], restype: Any) -> Callable[..., int] | None:
    """The C library's `name`, typed, setting errno for `ctypes.get_errno`; None where the
    library or the function is missing (another C library, another system): callers then
    answer with what the standard library has."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        fn = getattr(libc, name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = restype
    found: Callable[..., int] = fn
    return found
