"""The object format: version 1, with optional compressed sections (flag 0x0001) and record
directories (flag 0x0002).

An object is written once by one flush (L0: one section per stream in the flush) or by one
compaction (L1 and up: one section). Sequence numbers are not stored here: they are assigned
afterwards by the metadata commit, which maps a stream's sequences to (object, section, record
index). A section is just an ordered list of records.

Layout (all integers little-endian)::

    header   MAGIC b"ISO1" | u16 version | u16 flags                        (8 bytes)
    section  record | record | ...                   \\  repeated, back to back, once
    index    u32 start of each record, relative to   /   per section
             the section's first byte (count entries)
    TOC      u16 version | u16 flags | u32 section_count
             then per section:
               u16 name_len | stream name (utf-8)
               u64 offset | u64 length | u32 count | u32 crc32(section bytes)
               u64 index_offset | u32 index_length | u32 crc32(index bytes)
               [u8 codec | u64 plain_length]          only with flag SECTION_CODECS
    footer   u32 toc_length | u32 crc32(TOC) | MAGIC                         (12 bytes)

    record   u16 subject_len | u32 headers_len | u32 data_len | u32 crc32(subject+headers+data)
             | subject (utf-8) | headers (raw NATS header block, may be empty) | data

A record is 14 + len(subject) + len(headers) + len(data) bytes. Because each record carries its
own checksum, a reader that knows where records start (the section index, or offsets kept by
the caller) fetches any contiguous run of records with one ranged GET and verifies each record
without the rest of the section. The index sits right after its section so that a section and
its index are one contiguous range as well.

A reader starts from the end: one ranged GET of the last 64 KiB holds the footer and, unless
the object has well over a thousand sections, the whole TOC (see :func:`read_remote_toc`).
The TOC repeats the version so that a tail read alone can reject a format it does not
understand.

Sealed sections (encryption at rest, `crypto`) have the codec bit ``CODEC_SEALED`` (0x80) in
their TOC entry: their stored bytes are an envelope (key id, wrapped data key, nonce) and the
AEAD ciphertext of the (possibly compressed) records, so, like a compressed section, a sealed
one is read whole and opened before its records are checked. The flag ``SECTION_CODECS`` is set
as for compression; an object written without encryption has no sealed section and is read as
ever, which is what keeps streams written before encryption was turned on readable.

Compressed sections (flag ``SECTION_CODECS``, 0x0001, in header and TOC). A stream that asks
for compression has its section stored under a codec (see `codec`): the section's bytes are
then the codec's encoding of the record bytes, ``length`` is the stored size and
``plain_length`` the size of the records. Everything else speaks of the plain bytes: the index's
record starts and the per-record layout are those of the decoded section. So a compressed
section cannot be read by record ranges: it is fetched whole (one GET of ``length`` bytes) and
decoded. The flag is set only on objects that hold a compressed section, so an object without
one is exactly what earlier builds wrote and read; an earlier reader refuses a flagged object
(unknown flag bits) rather than misreading it.

Record directories (flag ``SECTION_DIRECTORIES``, 0x0002, in header and TOC). Each section's
index region holds, instead of the u32 record starts, the section's record directory
(`directory`): per record its subject, length and headers' length (and sequence and timestamp
when the writer knew them), compressed, and sealed like the section when it is. It sits right
after the records, so a reader that wants one record of a section fetches records and directory
with one ranged GET; the TOC's index offset, length and checksum are the directory's. With
directories, metadata keeps one small entry per section instead of every record's subject and
length. An object has directories for all its sections or for none; an earlier reader refuses
one that has them (an unknown flag) rather than misreading it.

Checksums are CRC-32 with zlib's polynomial (``zlib.crc32``), computed by zlib-ng
(`storage.checksum`) at several GB/s, which keeps checksumming off the publish path's profile.
A future version can switch to CRC-32C behind a flag bit; readers reject flag bits they do not
know. For a compressed section the section checksum covers the *stored* (compressed) bytes and
each record's checksum its *plain* bytes, as ever: the first finds damage in storage before
anything is decoded (a reader of the TOC can check an object without decompressing it), the
second checks end to end, from the publish that encoded the record to the reader that decoded
it, so a fault in compression or decompression is caught too and the per-record checks of
every reader work unchanged. A decoded section must also be exactly ``plain_length`` bytes.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from itertools import accumulate
from operator import add
from typing import TYPE_CHECKING

import msgspec

from .checksum import crc32
from .codec import (
    CODEC_NONE,
    CODEC_SEALED,
    COMPRESSION,
    CodecError,
    compress,
    decompress,
    is_known,
)
from .crypto import Encryption, Sealer, SealError
from .directory import (
    DirectoryError,
    RecordDirectory,
    open_directory,
    split_stored_directory,
    store_directory,
)
from .keys import KeyRefusedError

if TYPE_CHECKING:
    from .objects import ObjectStore

MAGIC = b"ISO1"
FORMAT_VERSION = 1
SECTION_CODECS = 0x0001
"""Flag: TOC entries carry a codec and the plain length (some section is compressed)."""
SECTION_DIRECTORIES = 0x0002
"""Flag: each section's index region holds its record directory (see `directory`)."""
KNOWN_FLAGS = SECTION_CODECS | SECTION_DIRECTORIES

_HEADER = struct.Struct("<4sHH")
_FOOTER = struct.Struct("<II4s")
_TOC_HEAD = struct.Struct("<HHI")
_TOC_NAME = struct.Struct("<H")
_TOC_ENTRY = struct.Struct("<QQIIQII")
_TOC_CODEC = struct.Struct("<BQ")
_RECORD = struct.Struct("<HIII")

HEADER_SIZE = _HEADER.size
FOOTER_SIZE = _FOOTER.size
RECORD_HEADER_SIZE = _RECORD.size
TOC_TAIL_GUESS = 64 * 1024
"""Bytes fetched from the end of an object to read its TOC; ~1500 sections fit."""

BytesLike = bytes | bytearray | memoryview

_U32_MAX = 0xFFFFFFFF
_MAX_SUBJECT = 0xFFFF
_INDEX_ITEM = 4
_LITTLE = sys.byteorder == "little"
_HEADER_BYTES = _HEADER.pack(MAGIC, FORMAT_VERSION, 0)

_crc32 = crc32
_pack_record = _RECORD.pack
_unpack_record = _RECORD.unpack_from
# The lengths alone (a record's header without its trailing checksum): what splitting needs.
_unpack_lengths = struct.Struct(_RECORD.format[:-1]).unpack_from


class ObjectFormatError(Exception):
    """Base class: the bytes are not a readable object of this format."""


class CorruptObjectError(ObjectFormatError):
    """Checksums, lengths or magic do not match: the bytes are damaged or not ours."""

    def __init__(self, detail: str, *, key: str | None = None, offset: int | None = None):
        self.detail = detail
        self.key = key
        self.offset = offset
        where = f" {key!r}" if key is not None else ""
        at = f" at offset {offset}" if offset is not None else ""
        super().__init__(f"corrupt object{where}{at}: {detail}")


class UnsupportedFormatError(ObjectFormatError):
    """A well-formed object written by a newer (or unknown) format version or flags."""


class Record(msgspec.Struct, frozen=True, gc=False):
    """One message as stored: its sequence lives in metadata, not here."""

    subject: str
    headers: bytes
    data: bytes


class SectionRef(msgspec.Struct, frozen=True):
    """Where one stream's records sit in an object; offsets are absolute in the object.

    ``length`` and ``checksum`` are those of the bytes as stored; for a compressed section
    (``codec`` other than ``CODEC_NONE``) ``plain_length`` is the length of its records.
    """

    stream: str
    offset: int
    length: int
    count: int
    checksum: int
    index_offset: int = 0
    index_length: int = 0
    index_checksum: int = 0
    codec: int = CODEC_NONE
    plain_length: int = 0
    # The index region holds the section's record directory, not record starts.
    directory: bool = False

    @property
    def end(self) -> int:
        return self.offset + self.length

    @property
    def records_length(self) -> int:
        """Bytes of records in the section: what the index's offsets are offsets into."""
        return self.plain_length if self.codec != CODEC_NONE else self.length

    @property
    def index_end(self) -> int:
        return self.index_offset + self.index_length

    def span(self, bounds: Sequence[int], first: int, stop: int) -> tuple[int, int]:
        """Absolute byte range ``[start, end)`` of records ``first..stop-1`` of this section.

        ``bounds`` comes from :func:`decode_index` or :func:`record_bounds`. A compressed
        section has no such ranges: it is read whole.
        """
        if self.codec != CODEC_NONE:
            raise ValueError(f"section {self.stream!r} is compressed: it is read whole")
        if not 0 <= first <= stop <= self.count:
            raise IndexError(f"record range [{first}, {stop}) outside section of {self.count}")
        return self.offset + bounds[first], self.offset + bounds[stop]


# --- records -------------------------------------------------------------------------------


def encode_record(subject: str | bytes, headers: bytes, data: bytes) -> bytes:
    """Encode one record. Hot path: called once per published message."""
    s = subject.encode() if isinstance(subject, str) else subject
    # Most messages have no headers: one concatenation fewer for them.
    body = s + headers + data if headers else s + data
    try:
        return _pack_record(len(s), len(headers), len(data), _crc32(body)) + body
    except struct.error:
        # try/except costs nothing on the hot path in 3.11; the check only runs on failure.
        raise ValueError(
            f"record too large: subject {len(s)} bytes (max {_MAX_SUBJECT}), "
            f"headers {len(headers)} and data {len(data)} bytes (max {_U32_MAX} each)"
        ) from None


def encode_records(
    subject: bytes, payloads: Sequence[bytes | memoryview]
) -> list[bytes | memoryview]:
    """Encode a run of records of one subject without headers, as the parts whose
    concatenation they are: per record, its header and subject, then its data as given (it
    is copied once, when its section is joined). Hot path: a publisher's run of messages,
    the subject's checksum taken once for all of them."""
    slen = len(subject)
    if slen > _MAX_SUBJECT:
        raise ValueError(f"record too large: subject {slen} bytes (max {_MAX_SUBJECT})")
    base = _crc32(subject)
    pack = _pack_record
    crc32 = _crc32
    parts: list[bytes | memoryview] = []
    add = parts.extend
    try:
        for d in payloads:
            add((pack(slen, 0, len(d), crc32(d, base)) + subject, d))
    except struct.error:
        raise ValueError(f"record too large: data over {_U32_MAX} bytes") from None
    return parts


def record_length(subject_len: int, headers_len: int, data_len: int) -> int:
    return RECORD_HEADER_SIZE + subject_len + headers_len + data_len


def record_bounds(lengths: Sequence[int]) -> list[int]:
    """Record boundaries from record lengths: ``[0, l0, l0+l1, ..., total]`` (n+1 entries)."""
    return list(accumulate(lengths, initial=0))


def decode_records(
    buf: BytesLike,
    count: int | None = None,
    verify: bool = True,
    *,
    key: str | None = None,
    base_offset: int = 0,
) -> list[Record]:
    """Decode a run of whole records that fills ``buf`` exactly.

    ``count``, when given, is the number of records the caller expects ``buf`` to hold; any
    other number (or trailing bytes) means the caller's offsets or the bytes are wrong.
    ``key``/``base_offset`` (the absolute offset of ``buf`` in its object) only make error
    messages point at the damage.
    """
    mv = memoryview(buf)
    n = len(mv)
    pos = 0
    out: list[Record] = []
    append = out.append
    crc32 = _crc32
    while pos < n:
        if count is not None and len(out) == count:
            raise CorruptObjectError(
                f"{n - pos} bytes after the expected {count} records",
                key=key,
                offset=base_offset + pos,
            )
        if pos + RECORD_HEADER_SIZE > n:
            raise CorruptObjectError("truncated record header", key=key, offset=base_offset + pos)
        slen, hlen, dlen, crc = _unpack_record(mv, pos)
        start = pos + RECORD_HEADER_SIZE
        hstart = start + slen
        dstart = hstart + hlen
        end = dstart + dlen
        if end > n:
            raise CorruptObjectError(
                f"record of {end - pos} bytes overruns buffer", key=key, offset=base_offset + pos
            )
        if verify and crc32(mv[start:end]) != crc:
            raise CorruptObjectError("record checksum mismatch", key=key, offset=base_offset + pos)
        try:
            subject = str(mv[start:hstart], "utf-8")
        except UnicodeDecodeError:
            raise CorruptObjectError(
                "record subject is not utf-8", key=key, offset=base_offset + pos
            ) from None
        append(Record(subject, mv[hstart:dstart].tobytes(), mv[dstart:end].tobytes()))
        pos = end
    if count is not None and len(out) != count:
        raise CorruptObjectError(
            f"expected {count} records, buffer holds {len(out)}", key=key, offset=base_offset
        )
    return out


def verify_records(buf: BytesLike, *, key: str | None = None, base_offset: int = 0) -> int:
    """Check every record in a run that fills ``buf`` exactly; how many there are.

    For bytes that will be kept and decoded later without checking again.
    """
    return len(decode_records(buf, key=key, base_offset=base_offset))


def record_damage(buf: BytesLike, at: int, length: int) -> str | None:
    """Why the record said to be ``length`` bytes at ``at`` in ``buf`` is damaged; None if it
    is intact.

    Each record is checked on its own, at the place and length the caller's index (metadata)
    gives it, so damage anywhere in a record, its header included, never spills over to its
    neighbours the way a walk from one record header to the next would.
    """
    if at + length > len(buf):
        return "record cut short"
    if length < RECORD_HEADER_SIZE:
        return f"record of {length} bytes is shorter than its header"
    slen, hlen, dlen, crc = _unpack_record(buf, at)
    if RECORD_HEADER_SIZE + slen + hlen + dlen != length:
        return "record length does not match its index"
    mv = memoryview(buf)
    start = at + RECORD_HEADER_SIZE
    if _crc32(mv[start : at + length]) != crc:
        return "record checksum mismatch"
    try:
        str(mv[start : start + slen], "utf-8")
    except UnicodeDecodeError:
        return "record subject is not utf-8"
    return None


def intact_records(buf: BytesLike, count: int) -> list[tuple[str, int, int]]:
    """The records that start a section's plain bytes ``buf`` (at most ``count``), each as
    (subject, length, headers length), up to the first damaged one.

    For a section whose record directory is lost: each record's own header and checksum say
    what it is, so the records before the damage are known for certain; past a damaged record,
    where the next one starts is not."""
    found: list[tuple[str, int, int]] = []
    at = 0
    while len(found) < count and at + RECORD_HEADER_SIZE <= len(buf):
        slen, hlen, dlen, _ = _unpack_record(buf, at)
        length = RECORD_HEADER_SIZE + slen + hlen + dlen
        if record_damage(buf, at, length) is not None:
            break
        start = at + RECORD_HEADER_SIZE
        found.append((str(memoryview(buf)[start : start + slen], "utf-8"), length, hlen))
        at += length
    return found


def split_records(
    buf: bytes,
    starts: Sequence[int],
    lengths: Sequence[int],
    base: int = 0,
    *,
    key: str | None = None,
) -> list[tuple[bytes, bytes, bytes]]:
    """The (subject, headers, data) bytes of the records at ``starts`` of known ``lengths``.

    For bytes already checked by `verify_records`: checksums and subjects are not looked at
    again, only that each record is as long as its index says, so an index that does not
    match the bytes is an error and not garbage. ``base`` is the offset of ``buf`` within
    the section that ``starts`` are relative to.
    """
    # `split_numbered` is the one that reads messages; this form is its records alone.
    zeros = [0] * len(starts)
    numbered = split_numbered(buf, starts, lengths, zeros, zeros, base, key=key)
    return [(subject, headers, data) for _, _, subject, headers, data in numbered]


def split_numbered(
    buf: bytes,
    starts: Sequence[int],
    lengths: Sequence[int],
    seqs: Iterable[int],
    stamps: Iterable[int],
    base: int = 0,
    *,
    key: str | None = None,
) -> list[tuple[int, int, bytes, bytes, bytes]]:
    """`split_records`, each record with its sequence and timestamp in front:
    (seq, ts, subject, headers, data), as a reader hands messages out. One pass: a pull
    batch reads hundreds."""
    uniform = _split_uniform(buf, starts, lengths, seqs, stamps, base)
    if uniform is not None:
        return uniform
    out: list[tuple[int, int, bytes, bytes, bytes]] = []
    append = out.append
    unpack = _unpack_lengths
    head = RECORD_HEADER_SIZE
    for start, length, seq, ts in zip(starts, lengths, seqs, stamps, strict=True):
        at = start - base
        slen, hlen, dlen = unpack(buf, at)
        s = at + head
        h = s + slen
        d = h + hlen
        e = d + dlen
        # The record's end, already needed for the data's slice, checks its length.
        if e - at != length:
            raise CorruptObjectError(
                f"record at section offset {start} does not match its index length", key=key
            )
        append((seq, ts, buf[s:h], buf[h:d], buf[d:e]))
    return out


# Below this many records the loop of `split_numbered` is as quick as compiling a struct.
_UNIFORM_MIN = 8
# A record header's bytes before its checksum: the three lengths.
_LENGTHS_SIZE = struct.calcsize(_RECORD.format[:-1])


def _split_uniform(
    buf: bytes,
    starts: Sequence[int],
    lengths: Sequence[int],
    seqs: Iterable[int],
    stamps: Iterable[int],
    base: int,
) -> list[tuple[int, int, bytes, bytes, bytes]] | None:
    """`split_numbered` of a run of back-to-back records whose headers all give the same
    three lengths (one subject, one payload size: what a pull batch usually reads), taken
    apart by one struct over the whole run instead of a step in Python per record; None
    when the run is not such, for the general loop to split (or refuse)."""
    n = len(starts)
    if n < _UNIFORM_MIN:
        return None
    length = lengths[0]
    if lengths.count(length) != n:
        return None
    at = starts[0] - base
    if at < 0 or at + n * length > len(buf) or length < RECORD_HEADER_SIZE:
        return None
    expected = range(starts[0], starts[0] + n * length, length)
    if isinstance(starts, array):
        if starts != array(starts.typecode, expected):
            return None
    elif list(starts) != list(expected):
        return None
    slen, hlen, dlen = _unpack_lengths(buf, at)
    if RECORD_HEADER_SIZE + slen + hlen + dlen != length:
        return None
    run = buf[at : at + n * length]
    # Every record's own lengths must be the first one's, or the struct would cut it wrongly:
    # each byte of the lengths, taken from every record by one strided slice, is the first's.
    for i in range(_LENGTHS_SIZE):
        if run[i::length].count(run[i]) != n:
            return None
    rows = _uniform_struct(slen, hlen, dlen).iter_unpack(run)
    # (seq, ts) + (subject, headers, data), record by record in C.
    return list(map(add, zip(seqs, stamps, strict=True), rows))


@lru_cache(maxsize=64)
def _uniform_struct(slen: int, hlen: int, dlen: int) -> struct.Struct:
    """One record as (subject, headers, data), its header skipped."""
    return struct.Struct(f"<{RECORD_HEADER_SIZE}x{slen}s{hlen}s{dlen}s")


# --- writing objects -----------------------------------------------------------------------


class ObjectBuilder:
    """Assemble one object from already-encoded records, section by section.

    Work per section is a few C-level passes (join, crc32, lengths, index), never a Python
    loop over records, so a 4 MiB flush of small messages stays in the low milliseconds.
    """

    def __init__(self, sealer: Sealer | None = None) -> None:
        # Seals the sections added with CODEC_SEALED, under one data key for the object.
        self._sealer = sealer
        self._parts: list[bytes] = [_HEADER_BYTES]
        self._size = HEADER_SIZE
        self._refs: list[SectionRef] = []
        self._plain: list[bytes] = []
        self._finished = False
        # Whether sections have record directories: all of them or none (the object's flag).
        self._directories: bool | None = None

    @property
    def size(self) -> int:
        """Bytes so far, before the TOC and footer."""
        return self._size

    @property
    def sections(self) -> list[SectionRef]:
        return list(self._refs)

    def plain(self, i: int) -> bytes:
        """The record bytes of the i-th section added, as readers see them once decoded."""
        return self._plain[i]

    def add_section(
        self,
        stream: str,
        records: Sequence[bytes],
        codec: int = CODEC_NONE,
        directory: RecordDirectory | None = None,
    ) -> SectionRef:
        """Add a section holding `records`, stored under `codec` (compressed, or as they are),
        with its record `directory` if given (every section of an object has one, or none)."""
        return self.add_section_parts(stream, records, list(map(len, records)), codec, directory)

    def add_section_parts(
        self,
        stream: str,
        parts: Sequence[bytes | memoryview],
        sizes: Sequence[int],
        codec: int = CODEC_NONE,
        directory: RecordDirectory | None = None,
    ) -> SectionRef:
        """Add a section whose records are the concatenation of `parts`, the records being
        `sizes` bytes each (parts need not be whole records: see `encode_records`), with its
        record `directory` if given (every section of an object has one, or none)."""
        if self._finished:
            raise RuntimeError("ObjectBuilder.finish() was already called")
        if self._directories is not None and self._directories != (directory is not None):
            raise ValueError("every section of an object has a record directory, or none does")
        self._directories = directory is not None
        blob = b"".join(parts)
        if len(blob) != sum(sizes):
            raise ValueError(f"section for {stream!r}: {len(blob)} bytes, records of {sum(sizes)}")
        if len(blob) > _U32_MAX:
            # Index entries are u32 offsets within the section.
            raise ValueError(f"section for {stream!r} is {len(blob)} bytes; the limit is 4 GiB")
        if codec & CODEC_SEALED and self._sealer is None:
            raise ValueError(f"section for {stream!r} is to be sealed: give a sealer")
        sealer = self._sealer if codec & CODEC_SEALED else None
        if directory is not None:
            if len(directory) != len(sizes) or list(directory.lengths) != list(sizes):
                raise ValueError(f"section for {stream!r}: its directory is of other records")
            index = store_directory(directory, sealer)
        else:
            starts = array("I", accumulate(sizes[:-1], initial=0) if sizes else ())
            if not _LITTLE:
                starts.byteswap()
            index = starts.tobytes()
        stored = blob if codec & COMPRESSION == CODEC_NONE else compress(codec & COMPRESSION, blob)
        if sealer is not None:
            stored = sealer.seal(stored)
        offset = self._size
        ref = SectionRef(
            stream=stream,
            offset=offset,
            length=len(stored),
            count=len(sizes),
            checksum=_crc32(stored),
            index_offset=offset + len(stored),
            index_length=len(index),
            index_checksum=_crc32(index),
            codec=codec,
            plain_length=0 if codec == CODEC_NONE else len(blob),
            directory=directory is not None,
        )
        self._parts.append(stored)
        self._parts.append(index)
        self._size += len(stored) + len(index)
        self._refs.append(ref)
        self._plain.append(blob)
        return ref

    def finish(self) -> bytes:
        return b"".join(self.finish_parts())

    def finish_parts(self) -> list[bytes]:
        """The object as the parts whose concatenation it is (a store that can write them
        as they are spares a copy of the whole object)."""
        if self._finished:
            raise RuntimeError("ObjectBuilder.finish() was already called")
        self._finished = True
        flags = _flags(self._refs)
        if flags:
            self._parts[0] = _HEADER.pack(MAGIC, FORMAT_VERSION, flags)
        toc = _encode_toc(self._refs)
        self._parts.append(toc)
        self._parts.append(_FOOTER.pack(len(toc), _crc32(toc), MAGIC))
        parts, self._parts = self._parts, []
        return parts


def _flags(refs: Sequence[SectionRef]) -> int:
    """The flags of an object with these sections: what its header and TOC say."""
    flags = SECTION_CODECS if any(r.codec != CODEC_NONE for r in refs) else 0
    if any(r.directory for r in refs):
        flags |= SECTION_DIRECTORIES
    return flags


def _encode_toc(refs: Sequence[SectionRef]) -> bytes:
    flags = _flags(refs)
    parts = [_TOC_HEAD.pack(FORMAT_VERSION, flags, len(refs))]
    for r in refs:
        name = r.stream.encode()
        parts.append(_TOC_NAME.pack(len(name)))
        parts.append(name)
        parts.append(
            _TOC_ENTRY.pack(
                r.offset,
                r.length,
                r.count,
                r.checksum,
                r.index_offset,
                r.index_length,
                r.index_checksum,
            )
        )
        if flags & SECTION_CODECS:
            parts.append(_TOC_CODEC.pack(r.codec, r.records_length))
    return b"".join(parts)


# --- reading objects -----------------------------------------------------------------------


def _check_version(version: int, flags: int, key: str | None) -> None:
    if version != FORMAT_VERSION:
        where = f" {key!r}" if key is not None else ""
        raise UnsupportedFormatError(
            f"object{where} has format version {version}; this reader understands version "
            f"{FORMAT_VERSION} only (written by a newer InfiniStream?)"
        )
    if flags & ~KNOWN_FLAGS:
        where = f" {key!r}" if key is not None else ""
        raise UnsupportedFormatError(f"object{where} uses unknown format flags {flags:#06x}")


def toc_length_from_footer(tail: BytesLike, *, key: str | None = None) -> int:
    """Bytes of TOC + footer at the end of the object, read from its last 12+ bytes."""
    if len(tail) < FOOTER_SIZE:
        raise CorruptObjectError(f"object shorter than its {FOOTER_SIZE}-byte footer", key=key)
    toc_len, _crc, magic = _FOOTER.unpack_from(tail, len(tail) - FOOTER_SIZE)
    if magic != MAGIC:
        raise CorruptObjectError("bad magic in footer (not an InfiniStream object?)", key=key)
    total: int = toc_len + FOOTER_SIZE
    return total


def read_toc(
    tail: BytesLike,
    *,
    object_size: int | None = None,
    key: str | None = None,
) -> list[SectionRef]:
    """Parse the TOC from the last bytes of an object (at least TOC + footer).

    With ``object_size``, section and index ranges are also checked to lie inside the body.
    """
    mv = memoryview(tail)
    need = toc_length_from_footer(mv, key=key)
    if len(mv) < need:
        raise CorruptObjectError(
            f"tail of {len(mv)} bytes is shorter than TOC + footer ({need} bytes)", key=key
        )
    toc_len, toc_crc, _ = _FOOTER.unpack_from(mv, len(mv) - FOOTER_SIZE)
    toc = mv[len(mv) - need : len(mv) - FOOTER_SIZE]
    toc_start = None if object_size is None else object_size - need
    if toc_start is not None and toc_start < HEADER_SIZE:
        raise CorruptObjectError(f"TOC length {toc_len} exceeds the object", key=key)
    if _crc32(toc) != toc_crc:
        raise CorruptObjectError("TOC checksum mismatch", key=key, offset=toc_start)
    try:
        return _decode_toc(toc, toc_start, key)
    except struct.error as e:
        raise CorruptObjectError(f"TOC is truncated: {e}", key=key, offset=toc_start) from None


def _decode_toc(toc: memoryview, toc_start: int | None, key: str | None) -> list[SectionRef]:
    version, flags, n = _TOC_HEAD.unpack_from(toc, 0)
    _check_version(version, flags, key)
    pos = _TOC_HEAD.size
    refs: list[SectionRef] = []
    for _ in range(n):
        (name_len,) = _TOC_NAME.unpack_from(toc, pos)
        pos += _TOC_NAME.size
        if pos + name_len > len(toc):
            raise CorruptObjectError("TOC entry name overruns TOC", key=key, offset=toc_start)
        try:
            stream = str(toc[pos : pos + name_len], "utf-8")
        except UnicodeDecodeError:
            raise CorruptObjectError("TOC stream name is not utf-8", key=key) from None
        pos += name_len
        off, length, count, crc, ioff, ilen, icrc = _TOC_ENTRY.unpack_from(toc, pos)
        pos += _TOC_ENTRY.size
        codec, plain_length = CODEC_NONE, 0
        if flags & SECTION_CODECS:
            codec, plain_length = _TOC_CODEC.unpack_from(toc, pos)
            pos += _TOC_CODEC.size
            if not is_known(codec):
                raise UnsupportedFormatError(
                    f"object {key!r}: section {stream!r} uses unknown codec {codec}"
                )
            if codec == CODEC_NONE:
                if plain_length != length:
                    raise CorruptObjectError(
                        f"section {stream!r} plain length {plain_length} != length {length}",
                        key=key,
                    )
                plain_length = 0
        ref = SectionRef(
            stream,
            off,
            length,
            count,
            crc,
            ioff,
            ilen,
            icrc,
            codec,
            plain_length,
            bool(flags & SECTION_DIRECTORIES),
        )
        _check_ref(ref, toc_start, key)
        refs.append(ref)
    if pos != len(toc):
        raise CorruptObjectError(f"{len(toc) - pos} stray bytes after TOC entries", key=key)
    return refs


def _check_ref(ref: SectionRef, toc_start: int | None, key: str | None) -> None:
    limit = toc_start if toc_start is not None else 1 << 63
    if ref.offset < HEADER_SIZE or ref.end > limit:
        raise CorruptObjectError(f"section {ref.stream!r} lies outside the object body", key=key)
    if not ref.directory and ref.index_length != _INDEX_ITEM * ref.count:
        raise CorruptObjectError(f"section {ref.stream!r} index length mismatch", key=key)
    if ref.index_offset < ref.end or ref.index_offset + ref.index_length > limit:
        raise CorruptObjectError(f"section {ref.stream!r} index lies outside the body", key=key)
    if ref.count > ref.records_length // RECORD_HEADER_SIZE:
        raise CorruptObjectError(f"section {ref.stream!r} claims too many records", key=key)
    if ref.records_length > _U32_MAX:
        raise CorruptObjectError(f"section {ref.stream!r} claims over 4 GiB of records", key=key)


def parse_object(
    data: BytesLike,
    *,
    verify: bool = True,
    key: str | None = None,
    keys: Encryption | None = None,
) -> list[SectionRef]:
    """Check header, footer and TOC of a whole object and return its sections.

    With ``verify``, every section and index checksum is checked as well, and compressed
    sections are decoded to check that they hold what the TOC says.
    """
    mv = memoryview(data)
    if len(mv) < HEADER_SIZE + FOOTER_SIZE:
        raise CorruptObjectError(f"object of {len(mv)} bytes is too short", key=key)
    magic, version, flags = _HEADER.unpack_from(mv, 0)
    if magic != MAGIC:
        raise CorruptObjectError("bad magic in header (not an InfiniStream object?)", key=key)
    _check_version(version, flags, key)
    refs = read_toc(mv, object_size=len(mv), key=key)
    # The header's flags say what the TOC's do (which its checksum protects): the writer sets
    # SECTION_CODECS in both exactly when a section is compressed, SECTION_DIRECTORIES when
    # sections have record directories.
    if flags != _flags(refs) and refs:
        raise CorruptObjectError(f"header flags {flags:#06x} disagree with the TOC", key=key)
    if verify:
        for ref in refs:
            plain = decode_section(mv[ref.offset : ref.end], ref, key=key, keys=keys)
            index = mv[ref.index_offset : ref.index_end]
            if ref.directory:
                verify_directory(index, ref, plain, key=key, keys=keys)
            else:
                decode_index(index, ref, key=key)
    return refs


def verify_directory(
    stored: BytesLike,
    ref: SectionRef,
    plain: BytesLike | None = None,
    *,
    key: str | None = None,
    keys: Encryption | None = None,
) -> RecordDirectory:
    """The section's record directory, checked against the TOC (its checksum, its records'
    count and total length) and, given the section's `plain` record bytes, against each
    record's header (its length)."""
    if len(stored) != ref.index_length or _crc32(stored) != ref.index_checksum:
        raise CorruptObjectError(
            f"section {ref.stream!r} directory checksum mismatch", key=key, offset=ref.index_offset
        )
    directory = open_section_directory(stored, key=key, offset=ref.index_offset, keys=keys)
    if len(directory) != ref.count or sum(directory.lengths) != ref.records_length:
        raise CorruptObjectError(f"section {ref.stream!r} directory is of other records", key=key)
    if plain is not None:
        for at, length in zip(directory.offsets(), directory.lengths, strict=False):
            slen, hlen, dlen, _ = _unpack_record(plain, at)
            if RECORD_HEADER_SIZE + slen + hlen + dlen != length:
                raise CorruptObjectError(
                    f"section {ref.stream!r}: a record disagrees with its directory", key=key
                )
    return directory


def verify_section(buf: BytesLike, ref: SectionRef, *, key: str | None = None) -> None:
    """Raise :class:`CorruptObjectError` unless ``buf`` is exactly the section's bytes."""
    if len(buf) != ref.length:
        raise CorruptObjectError(
            f"section {ref.stream!r} is {len(buf)} bytes, TOC says {ref.length}",
            key=key,
            offset=ref.offset,
        )
    if _crc32(buf) != ref.checksum:
        raise CorruptObjectError(
            f"section {ref.stream!r} checksum mismatch", key=key, offset=ref.offset
        )


def decode_section(
    buf: BytesLike,
    ref: SectionRef,
    *,
    key: str | None = None,
    verify: bool = True,
    keys: Encryption | None = None,
) -> bytes:
    """The record bytes of a section from its stored bytes: checked (with ``verify``) against
    the section checksum, then decoded if it is compressed."""
    if verify:
        verify_section(buf, ref, key=key)
    if ref.codec == CODEC_NONE:
        return bytes(buf)
    return decode_stored(buf, ref.codec, ref.plain_length, key=key, offset=ref.offset, keys=keys)


def decode_stored(
    buf: BytesLike,
    codec: int,
    plain_length: int,
    *,
    key: str | None = None,
    offset: int | None = None,
    keys: Encryption | None = None,
) -> bytes:
    """The record bytes of a section stored under `codec`, for readers that know the codec
    and plain length from elsewhere (an index entry) rather than from the TOC. The result's
    records are not checked: that is the caller's `verify_records` or `decode_records`.

    A sealed section is opened with `keys` first: without them, or without the key it was
    sealed with, this raises `KeyRefusedError` (never damage: the bytes may be fine)."""
    if codec & CODEC_SEALED:
        if keys is None:
            where = f" {key!r}" if key is not None else ""
            raise KeyRefusedError(
                f"object{where} is encrypted and this server has no encryption key "
                "(jetstream { cipher, key }, --key-file or $INFINISTREAM_KEY)"
            )
        try:
            buf = keys.open(buf)
        except SealError as exc:
            raise CorruptObjectError(str(exc), key=key, offset=offset) from None
        except KeyRefusedError as exc:
            where = f"object {key!r}: " if key is not None else ""
            raise KeyRefusedError(f"{where}{exc}") from None
    try:
        return decompress(codec & COMPRESSION, buf, plain_length)
    except CodecError as exc:
        raise CorruptObjectError(str(exc), key=key, offset=offset) from None


def decode_index(buf: BytesLike, ref: SectionRef, *, key: str | None = None) -> list[int]:
    """Verify a section's index block and return record bounds (``count + 1`` entries)."""
    if len(buf) != ref.index_length or _crc32(buf) != ref.index_checksum:
        raise CorruptObjectError(
            f"section {ref.stream!r} index checksum mismatch", key=key, offset=ref.index_offset
        )
    starts = array("I")
    starts.frombytes(buf)
    if not _LITTLE:
        starts.byteswap()
    bounds = starts.tolist()
    bounds.append(ref.records_length)
    if bounds[0] != 0 or (ref.count and bounds[-2] >= ref.records_length):
        raise CorruptObjectError(f"section {ref.stream!r} index is inconsistent", key=key)
    return bounds


def rewrite_sections(
    data: BytesLike, transform: Callable[[SectionRef, bytes], bytes], *, key: str | None = None
) -> tuple[bytes, list[tuple[SectionRef, SectionRef]]]:
    """A new object holding `data`'s sections, each stored as `transform` returns it (same
    records, same codec: for key rotation, the same sealed bytes with the data key wrapped
    anew), with its index as it was (a sealed record directory's envelope through `transform`
    too); returns it and each (old, new) section.

    Headers, indexes and TOC are rebuilt, so sections may change size."""
    mv = memoryview(data)
    refs = parse_object(mv, verify=False, key=key)
    parts = [bytes(mv[:HEADER_SIZE])]
    size = HEADER_SIZE
    pairs: list[tuple[SectionRef, SectionRef]] = []
    for ref in sorted(refs, key=lambda r: r.offset):
        verify_section(mv[ref.offset : ref.end], ref, key=key)
        stored = transform(ref, bytes(mv[ref.offset : ref.end]))
        index = bytes(mv[ref.index_offset : ref.index_end])
        if ref.directory and ref.codec & CODEC_SEALED:
            head, envelope = split_stored_directory(index)
            index = head + transform(ref, envelope)
        new = msgspec.structs.replace(
            ref,
            offset=size,
            length=len(stored),
            checksum=_crc32(stored),
            index_offset=size + len(stored),
            index_length=len(index),
            index_checksum=_crc32(index),
        )
        parts += [stored, index]
        size += len(stored) + len(index)
        pairs.append((ref, new))
    toc = _encode_toc([new for _, new in pairs])
    parts += [toc, _FOOTER.pack(len(toc), _crc32(toc), MAGIC)]
    return b"".join(parts), pairs


# --- reading remote objects ----------------------------------------------------------------


async def read_remote_toc(
    store: ObjectStore,
    key: str,
    *,
    size: int | None = None,
    guess: int = TOC_TAIL_GUESS,
) -> list[SectionRef]:
    """Read an object's TOC with at most two ranged GETs.

    The first GET fetches the last ``guess`` bytes (a suffix range when ``size`` is unknown,
    which also tells us the size); only a TOC longer than that costs a second GET.
    """
    if size is None:
        tail, size = await store.get_suffix(key, guess)
    else:
        tail = await store.get_range(key, max(0, size - guess), size)
    need = toc_length_from_footer(tail, key=key)
    if need > size - HEADER_SIZE:
        raise CorruptObjectError(f"TOC + footer of {need} bytes exceeds the object", key=key)
    if need > len(tail):
        tail = await store.get_range(key, size - need, size - len(tail)) + tail
    if len(tail) == size:
        # The whole object came back: checking the header is free.
        return parse_object(tail, verify=False, key=key)
    return read_toc(tail, object_size=size, key=key)


async def read_section(
    store: ObjectStore,
    key: str,
    ref: SectionRef,
    *,
    verify: bool = True,
    keys: Encryption | None = None,
) -> bytes:
    """Fetch one section's record bytes with one ranged GET (decoded if it is compressed or
    sealed)."""
    buf = await store.get_range(key, ref.offset, ref.end)
    return decode_section(buf, ref, key=key, verify=verify, keys=keys)


async def read_section_index(store: ObjectStore, key: str, ref: SectionRef) -> list[int]:
    """Fetch and verify a section's index with one ranged GET; returns record bounds."""
    if ref.count == 0:
        return [0]
    buf = await store.get_range(key, ref.index_offset, ref.index_offset + ref.index_length)
    return decode_index(buf, ref, key=key)


async def read_directory(
    store: ObjectStore,
    key: str,
    offset: int,
    length: int,
    *,
    keys: Encryption | None = None,
) -> RecordDirectory:
    """Fetch a section's record directory (`length` stored bytes at `offset`) with one ranged
    GET and open it; raises `CorruptObjectError` for bytes that are not a directory."""
    stored = await store.get_range(key, offset, offset + length)
    if len(stored) != length:
        raise CorruptObjectError("record directory cut short", key=key, offset=offset)
    return open_section_directory(stored, key=key, offset=offset, keys=keys)


def open_section_directory(
    stored: BytesLike, *, key: str | None, offset: int, keys: Encryption | None = None
) -> RecordDirectory:
    """The record directory stored at `offset` of object `key`; raises `CorruptObjectError`
    for bytes that are not one: a directory that does not open is a damaged object, not a
    failing store."""
    try:
        return open_directory(stored, keys=keys, key=key)
    except DirectoryError as exc:
        raise CorruptObjectError(str(exc), key=key, offset=offset) from None


async def read_records(
    store: ObjectStore,
    key: str,
    ref: SectionRef,
    bounds: Sequence[int],
    first: int,
    stop: int,
    *,
    verify: bool = True,
    keys: Encryption | None = None,
) -> list[Record]:
    """Fetch records ``first..stop-1`` of a section with one ranged GET.

    A compressed section is fetched and decoded whole: its records have no byte ranges of
    their own in the object.
    """
    if ref.codec != CODEC_NONE:
        if not 0 <= first <= stop <= ref.count:
            raise IndexError(f"record range [{first}, {stop}) outside section of {ref.count}")
        if first == stop:
            return []
        plain = await read_section(store, key, ref, keys=keys)
        return decode_records(plain[bounds[first] : bounds[stop]], stop - first, verify, key=key)
    start, end = ref.span(bounds, first, stop)
    if start == end:
        return []
    buf = await store.get_range(key, start, end)
    return decode_records(buf, stop - first, verify, key=key, base_offset=start)
