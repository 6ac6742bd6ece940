"""The stored checksum is zlib's CRC-32 exactly: what was written before it reads the same."""

from __future__ import annotations

import zlib

from hypothesis import given
from hypothesis import strategies as st

from infinistream.storage.checksum import crc32


@given(st.binary(max_size=9000), st.integers(min_value=0, max_value=2**32 - 1))
def test_crc32_is_zlibs(data: bytes, seed: int) -> None:
    assert crc32(data) == zlib.crc32(data)
    assert crc32(data, seed) == zlib.crc32(data, seed)


def test_crc32_of_parts_and_views() -> None:
    data = bytes(range(256)) * 40
    view = memoryview(data)[3:4099]
    assert crc32(view) == zlib.crc32(bytes(view))
    running = 0
    for at in range(0, len(data), 1000):
        running = crc32(data[at : at + 1000], running)
    assert running == zlib.crc32(data)
