"""Section codecs: round trips, and damaged or mislabelled bytes refused, never misread."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infinistream.storage.codec import (
    CODEC_NONE,
    CODEC_ZSTD,
    CodecError,
    codec_name,
    compress,
    decompress,
)


@given(st.binary(max_size=4096), st.sampled_from([CODEC_NONE, CODEC_ZSTD]))
def test_round_trip(plain: bytes, codec: int) -> None:
    stored = compress(codec, plain)
    assert decompress(codec, stored, len(plain)) == plain


def test_zstd_makes_compressible_bytes_smaller_and_keeps_random_ones_whole() -> None:
    text = b'{"order": 1, "status": "new", "customer": "cust-17"}\n' * 1000
    stored = compress(CODEC_ZSTD, text)
    assert len(stored) * 20 < len(text)
    noise = os.urandom(64 * 1024)
    assert decompress(CODEC_ZSTD, compress(CODEC_ZSTD, noise), len(noise)) == noise
    assert compress(CODEC_NONE, text) == text


def test_wrong_length_is_refused_before_decoding() -> None:
    stored = compress(CODEC_ZSTD, b"abc" * 1000)
    with pytest.raises(CodecError, match="holds 3000 bytes, expected 2999"):
        decompress(CODEC_ZSTD, stored, 2999)
    with pytest.raises(CodecError, match="expected 3001"):
        decompress(CODEC_NONE, b"abc" * 1000, 3001)


def test_damaged_frames_are_refused() -> None:
    plain = bytes(range(256)) * 64
    stored = compress(CODEC_ZSTD, plain)
    for damaged in (
        stored[:-3],  # truncated
        b"\x00\x00" + stored[2:],  # not a frame
        b"",
        stored[:6] + bytes(len(stored) - 6),  # header kept, blocks zeroed
    ):
        with pytest.raises(CodecError):
            decompress(CODEC_ZSTD, damaged, len(plain))


def test_unknown_codec() -> None:
    with pytest.raises(ValueError, match="unknown section codec 7"):
        compress(7, b"x")
    with pytest.raises(CodecError, match="unknown section codec 7"):
        decompress(7, b"x", 1)
    assert codec_name(CODEC_ZSTD) == "zstd"
    assert codec_name(CODEC_NONE) == "none"
