"""The checksum of everything stored: CRC-32 with zlib's polynomial, computed by zlib-ng.

Records, sections, directories, object TOCs and pack entries each carry one, so a publish pays
it several times over its bytes (its record, its section, its pack entry). zlib-ng's `crc32`
is the standard library's `zlib.crc32` (the same function, the same values: everything written
before reads the same, and code that still calls `zlib.crc32` agrees with it), computed with
the CPU's carry-less multiply: 1.0 us for 4 KiB where the standard library's zlib 1.2 took 4.7,
and 0.24 us for 128 B where it took 0.61.
"""

from __future__ import annotations

from zlib_ng.zlib_ng import crc32

__all__ = ["crc32"]
