"""The helpers of the shared interface module that every backend uses."""

from __future__ import annotations

from infinistream.metadata import prefix_end


def test_prefix_end() -> None:
    assert prefix_end(b"a/b") == b"a/c"
    assert prefix_end("é".encode()) == b"\xc3\xaa"
    assert prefix_end("ÿ".encode()) == b"\xc3\xc0"  # C3 BF: the last byte carries nothing over
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"a\xff\xff") == b"b"
    assert prefix_end(b"\xff") is None
    assert prefix_end(b"") is None
    assert prefix_end(b"\x00") == b"\x01"
