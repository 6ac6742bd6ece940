"""A section's record directory: what each record of a section is, without its bytes.

Per record: its subject, its length, the length of its headers, and, when the writer knew them
(compaction, or a writer that takes them from an origin), its sequence and timestamp. Written
once with its section, right after the section's records (so one ranged GET can fetch both),
and read by whoever needs to know which records a section holds without reading them: a
filtered consumer, the limits of a stream, the size of a message as nats-server counts it
(subject, headers and payload plus a fixed overhead: `record length - 14`, plus the headers'
length for the overhead's one part that depends on them).

The directory replaces the per-record detail that the metadata store held before (index entries
with every record's subject and length): metadata keeps one small entry per section, and an
agent reads a section's directory only when it needs it, caching it within a budget.

Stored form (`store`, the bytes the object holds in the section's index region)::

    b"RD" | u8 codec | u32 plain_length | body

The body is the plain encoding compressed with Zstandard (lengths and subject ids of small
messages compress to a few percent), and sealed like the section's records when they are
(`crypto`): the codec byte says which (`codec.CODEC_ZSTD`, with `CODEC_SEALED`). The plain
encoding is msgpack: ``[1, subjects, ids, lengths, header_lengths, seqs, stamps]`` where
`subjects` are the section's distinct subjects in order of first appearance, `ids` a u32 per
record indexing them, `lengths` and `header_lengths` a u32 per record (`header_lengths` empty
when no record has headers), and `seqs`, `stamps` a u64 per record or empty (then the metadata
entry of the section derives them). Integers little-endian.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence
from itertools import accumulate

import msgspec

from .codec import CODEC_SEALED, CODEC_ZSTD, COMPRESSION, CodecError, compress, decompress
from .crypto import Encryption, Sealer, SealError
from .keys import KeyRefusedError

__all__ = [
    "DIRECTORY_MAGIC",
    "DirectoryError",
    "RecordDirectory",
    "open_directory",
    "split_stored_directory",
    "store_directory",
]

DIRECTORY_MAGIC = b"RD"
_HEAD = struct.Struct("<2sBI")
_VERSION = 1
_LITTLE = sys.byteorder == "little"
# A directory decodes to at most this many bytes: a section holds at most 4 GiB of records of
# at least 14 bytes, each taking at most 24 bytes here, and damaged bytes must not make a reader
# allocate more than a section could need.
_MAX_PLAIN = 8 * 1024**3


class DirectoryError(Exception):
    """Stored bytes that are not a record directory, or one that does not fit its section."""


def _u32(values: Sequence[int] | bytes) -> array[int]:
    out = array("I")
    if isinstance(values, bytes):
        out.frombytes(values)
        if not _LITTLE:
            out.byteswap()
    else:
        out.extend(values)
    return out


def _u64(raw: bytes) -> array[int] | None:
    if not raw:
        return None
    out = array("Q")
    out.frombytes(raw)
    if not _LITTLE:
        out.byteswap()
    return out


def _bytes(values: array[int]) -> bytes:
    if _LITTLE:
        return values.tobytes()
    swapped = array(values.typecode, values)
    swapped.byteswap()
    return swapped.tobytes()


class RecordDirectory:
    """The directory of one section: per record, in the order stored, its subject, its length,
    its headers' length, and (if known when written) its sequence and timestamp."""

    __slots__ = ("header_lengths", "ids", "lengths", "seqs", "stamps", "subjects")

    def __init__(
        self,
        subjects: list[str],
        ids: array[int],
        lengths: array[int],
        header_lengths: array[int] | None = None,
        seqs: array[int] | None = None,
        stamps: array[int] | None = None,
    ) -> None:
        n = len(ids)
        if len(lengths) != n:
            raise DirectoryError(f"{n} subject ids but {len(lengths)} lengths")
        for name, column in (("header", header_lengths), ("sequence", seqs), ("stamp", stamps)):
            if column is not None and len(column) != n:
                raise DirectoryError(f"{n} records but {len(column)} {name} entries")
        if n and max(ids) >= len(subjects):
            raise DirectoryError("a subject id points past the subject list")
        self.subjects = subjects
        self.ids = ids
        self.lengths = lengths
        # Empty columns are absent ones: a directory of no records is the same either way.
        self.header_lengths = header_lengths or None
        self.seqs = seqs or None
        self.stamps = stamps or None

    @classmethod
    def of(
        cls,
        subjects: Sequence[str],
        lengths: Sequence[int],
        header_lengths: Sequence[int] | None = None,
        seqs: Sequence[int] | None = None,
        stamps: Sequence[int] | None = None,
    ) -> RecordDirectory:
        """The directory of records with these subjects and lengths (and the rest, if known)."""
        names = {name: i for i, name in enumerate(dict.fromkeys(subjects))}
        ids = array("I", map(names.__getitem__, subjects))
        hdrs = None
        if header_lengths is not None and any(header_lengths):
            hdrs = array("I", header_lengths)
        return cls(
            list(names),
            ids,
            array("I", lengths),
            hdrs,
            None if seqs is None else array("Q", seqs),
            None if stamps is None else array("Q", stamps),
        )

    def __len__(self) -> int:
        return len(self.ids)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RecordDirectory):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    def subject_at(self, i: int) -> str:
        return self.subjects[self.ids[i]]

    def offsets(self) -> array[int]:
        """Where each record starts in the section's plain bytes, and where the last ends
        (one more entry than records)."""
        return array("Q", accumulate(self.lengths, initial=0))

    def headers_at(self, i: int) -> int:
        return self.header_lengths[i] if self.header_lengths is not None else 0

    def encode(self) -> bytes:
        """The plain encoding (see the module docstring)."""
        empty = b""
        return msgspec.msgpack.encode(
            [
                _VERSION,
                self.subjects,
                _bytes(self.ids),
                _bytes(self.lengths),
                empty if self.header_lengths is None else _bytes(self.header_lengths),
                empty if self.seqs is None else _bytes(self.seqs),
                empty if self.stamps is None else _bytes(self.stamps),
            ]
        )

    @classmethod
    def decode(cls, plain: bytes) -> RecordDirectory:
        try:
            fields = _decoder.decode(plain)
        except msgspec.DecodeError as exc:
            raise DirectoryError(f"record directory does not decode: {exc}") from None
        version, subjects, ids, lengths, hdrs, seqs, stamps = fields
        if version != _VERSION:
            raise DirectoryError(f"record directory version {version} is unknown here")
        if len(ids) % 4 or len(lengths) % 4 or len(hdrs) % 4 or len(seqs) % 8 or len(stamps) % 8:
            raise DirectoryError("record directory columns are cut short")
        return cls(
            subjects,
            _u32(ids),
            _u32(lengths),
            _u32(hdrs) if hdrs else None,
            _u64(seqs),
            _u64(stamps),
        )


_decoder = msgspec.msgpack.Decoder(tuple[int, list[str], bytes, bytes, bytes, bytes, bytes])


def store_directory(directory: RecordDirectory, sealer: Sealer | None = None) -> bytes:
    """The bytes an object holds for `directory`: compressed, and sealed with `sealer`."""
    plain = directory.encode()
    codec = CODEC_ZSTD
    body = compress(CODEC_ZSTD, plain)
    if sealer is not None:
        body = sealer.seal(body)
        codec |= CODEC_SEALED
    return _HEAD.pack(DIRECTORY_MAGIC, codec, len(plain)) + body


def open_directory(
    stored: bytes | bytearray | memoryview,
    *,
    keys: Encryption | None = None,
    key: str | None = None,
) -> RecordDirectory:
    """The directory in `stored` (what `store_directory` made). Raises `DirectoryError` for
    bytes that are not one, and `KeyRefusedError` for a sealed one whose key is not held."""
    mv = memoryview(stored)
    where = f" in {key!r}" if key is not None else ""
    if len(mv) < _HEAD.size:
        raise DirectoryError(f"record directory{where} shorter than its header")
    magic, codec, plain_length = _HEAD.unpack_from(mv, 0)
    if magic != DIRECTORY_MAGIC:
        raise DirectoryError(f"no record directory{where} (bad magic)")
    if codec & COMPRESSION != CODEC_ZSTD or codec & ~(COMPRESSION | CODEC_SEALED):
        raise DirectoryError(f"record directory{where} has unknown codec {codec}")
    if plain_length > _MAX_PLAIN:
        raise DirectoryError(f"record directory{where} claims {plain_length} bytes")
    body: bytes | memoryview = mv[_HEAD.size :]
    if codec & CODEC_SEALED:
        if keys is None:
            raise KeyRefusedError(
                f"record directory{where} is encrypted and this server has no encryption key"
            )
        try:
            body = keys.open(body)
        except SealError as exc:
            raise DirectoryError(f"record directory{where}: {exc}") from None
    try:
        plain = decompress(CODEC_ZSTD, body, plain_length)
    except CodecError as exc:
        raise DirectoryError(f"record directory{where}: {exc}") from None
    return RecordDirectory.decode(plain)


def split_stored_directory(stored: bytes) -> tuple[bytes, bytes]:
    """(header, body) of a stored directory: for key rotation, which rewraps a sealed body's
    data key and keeps the header (the plain length does not change)."""
    if len(stored) < _HEAD.size or stored[:2] != DIRECTORY_MAGIC:
        raise DirectoryError("no record directory (bad magic)")
    return stored[: _HEAD.size], stored[_HEAD.size :]
