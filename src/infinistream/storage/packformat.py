"""The format of pack files: objects of a local store appended one after another to one file.

A pack lives in the directory its objects' keys name (``root/<key's directory>/#pack-...``): the
``#`` keeps its name out of every key, since keys may not hold one. Integers are little-endian::

    pack header  b"ISPK" | u16 version | u16 flags | u64 created_ns                    (16 bytes)
    entry        b"ISPE" | u8 state | u8 kind | u16 key_len | u64 length | u64 written_ns
                 | u32 crc32(data) | u32 crc32(the head but its state, then the key)  (32 bytes)
                 | key (utf-8) | data (length bytes)
    ...          entries back to back, from offset 16; after the last, zeros (the space the
                 pack was allocated with) or, once the pack is full, its seal:
    commit       an entry of kind COMMIT, no key, whose data is a metadata commit record
                 (opaque here: the metadata store encodes and replays it); not an object, so
                 readers and the seal's index pass over it (`packcommits` reads and retires)
    seal         an entry of kind SEAL, no key, whose data is the pack's index: per object
                 u64 entry offset | u64 length | u64 written_ns | u16 key_len | key
    footer       u64 offset of the seal entry | b"ISPKSEAL"                            (16 bytes)

An entry is written whole by one write and made durable by the fdatasync that follows it; a pack
has one writer at a time. The state byte is the one thing ever written again: LIVE when the
entry is written, DELETED when its object is deleted or its commit record retired (its data is
then punched out of the file). It is left out of the head's checksum for that reason. Zeros
where an entry should start mean the end of what was written; so does an entry whose head or
data does not match its checksum (a write that power loss cut short, or one another process is
still making): a reader of a pack without a seal stops there and looks again later.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

import msgspec

from .checksum import crc32

__all__ = [
    "ENTRY_HEAD_SIZE",
    "FOOTER_SIZE",
    "KIND_COMMIT",
    "KIND_OBJECT",
    "KIND_SEAL",
    "PACK_HEADER_SIZE",
    "PACK_PREFIX",
    "STATE_DELETED",
    "STATE_LIVE",
    "STATE_OFFSET",
    "EntryHead",
    "IndexItem",
    "data_checks",
    "decode_seal",
    "encode_commit",
    "encode_entry_head",
    "encode_pack_header",
    "encode_seal",
    "is_pack_name",
    "parse_entry_head",
    "parse_footer",
    "parse_pack_header",
    "seal_candidates",
    "seal_count",
]

PACK_PREFIX = "#pack-"
VERSION = 1
_PACK_MAGIC = b"ISPK"
_ENTRY_MAGIC = b"ISPE"
_FOOTER_MAGIC = b"ISPKSEAL"

STATE_LIVE = 1
STATE_DELETED = 2
KIND_OBJECT = 1
KIND_SEAL = 2
KIND_COMMIT = 3
_KINDS = frozenset({KIND_OBJECT, KIND_SEAL, KIND_COMMIT})

_PACK_HEADER = struct.Struct("<4sHHQ")
_HEAD = struct.Struct("<4sBBHQQII")
_FOOTER = struct.Struct("<Q8s")
_INDEX_ITEM = struct.Struct("<QQQH")

PACK_HEADER_SIZE = _PACK_HEADER.size
ENTRY_HEAD_SIZE = _HEAD.size
FOOTER_SIZE = _FOOTER.size
STATE_OFFSET = 4  # of the state byte within an entry
# The head's checksum covers its bytes after the state byte, up to the checksum itself.
_CRC_FROM = STATE_OFFSET + 1
_CRC_TO = ENTRY_HEAD_SIZE - 4

_crc32 = crc32


class EntryHead(msgspec.Struct, frozen=True, gc=False):
    """An entry's head as read: where its key and data are, relative to the entry's start."""

    state: int
    kind: int
    key: str
    length: int
    written_ns: int
    data_crc: int

    @property
    def data_start(self) -> int:
        return ENTRY_HEAD_SIZE + len(self.key.encode())

    @property
    def size(self) -> int:
        """Bytes of the whole entry: head, key and data."""
        return self.data_start + self.length


class IndexItem(msgspec.Struct, frozen=True, gc=False):
    """One object of a sealed pack, as its seal lists it."""

    offset: int  # of the entry in the pack
    key: str
    length: int
    written_ns: int

    @property
    def data_offset(self) -> int:
        return self.offset + ENTRY_HEAD_SIZE + len(self.key.encode())


def is_pack_name(name: str) -> bool:
    return name.startswith(PACK_PREFIX)


def encode_pack_header(created_ns: int) -> bytes:
    return _PACK_HEADER.pack(_PACK_MAGIC, VERSION, 0, created_ns)


def parse_pack_header(buf: bytes) -> int | None:
    """The pack's creation time, or None if `buf` does not start a pack this build reads."""
    if len(buf) < PACK_HEADER_SIZE:
        return None
    magic, version, flags, created_ns = _PACK_HEADER.unpack_from(buf)
    if magic != _PACK_MAGIC or version != VERSION or flags:
        return None
    return int(created_ns)


def encode_entry_head(
    key: bytes, length: int, written_ns: int, data_crc: int, kind: int = KIND_OBJECT
) -> bytes:
    """An entry's head and key; its data follows them."""
    head = _HEAD.pack(_ENTRY_MAGIC, STATE_LIVE, kind, len(key), length, written_ns, data_crc, 0)
    crc = _crc32(key, _crc32(head[_CRC_FROM:_CRC_TO]))
    return head[:_CRC_TO] + crc.to_bytes(4, "little") + key


def parse_entry_head(buf: bytes | memoryview, at: int = 0) -> EntryHead | None:
    """The entry whose head starts at `at` in `buf`; None if there is none (zeros, damage, or
    a head that `buf` holds only part of: the caller reads more and asks again)."""
    if len(buf) - at < ENTRY_HEAD_SIZE:
        return None
    magic, state, kind, key_len, length, written_ns, data_crc, crc = _HEAD.unpack_from(buf, at)
    if magic != _ENTRY_MAGIC or kind not in _KINDS:
        return None
    key_end = at + ENTRY_HEAD_SIZE + key_len
    if key_end > len(buf):
        return None
    key = bytes(buf[at + ENTRY_HEAD_SIZE : key_end])
    if _crc32(key, _crc32(buf[at + _CRC_FROM : at + _CRC_TO])) != crc:
        return None
    try:
        text = key.decode()
    except UnicodeDecodeError:
        return None
    return EntryHead(state, kind, text, length, written_ns, data_crc)


def data_checks(head: EntryHead, data: bytes | memoryview) -> bool:
    """Whether `data` is the whole data the entry's head describes."""
    return len(data) == head.length and _crc32(data) == head.data_crc


def encode_commit(record: bytes, written_ns: int) -> bytes:
    """A commit entry carrying `record`: head and data, written whole like an object's."""
    head = encode_entry_head(b"", len(record), written_ns, _crc32(record), kind=KIND_COMMIT)
    return head + record


def encode_seal(items: Iterable[IndexItem], at: int, written_ns: int) -> bytes:
    """The seal entry of a pack whose entries end at `at`, and the footer after it."""
    parts = []
    for item in items:
        key = item.key.encode()
        parts.append(_INDEX_ITEM.pack(item.offset, item.length, item.written_ns, len(key)) + key)
    data = b"".join(parts)
    head = encode_entry_head(b"", len(data), written_ns, _crc32(data), kind=KIND_SEAL)
    return head + data + _FOOTER.pack(at, _FOOTER_MAGIC)


def parse_footer(tail: bytes) -> int | None:
    """The offset of the seal a pack's last FOOTER_SIZE bytes point to; None if unsealed."""
    if len(tail) != FOOTER_SIZE:
        return None
    at, magic = _FOOTER.unpack(tail)
    return int(at) if magic == _FOOTER_MAGIC else None


def decode_seal(data: bytes) -> list[IndexItem] | None:
    """The index a seal's data holds; None if it does not parse."""
    items: list[IndexItem] = []
    pos, n = 0, len(data)
    unpack = _INDEX_ITEM.unpack_from
    step = _INDEX_ITEM.size
    while pos < n:
        if pos + step > n:
            return None
        offset, length, written_ns, key_len = unpack(data, pos)
        pos += step
        if pos + key_len > n:
            return None
        try:
            key = data[pos : pos + key_len].decode()
        except UnicodeDecodeError:
            return None
        pos += key_len
        items.append(IndexItem(offset, key, length, written_ns))
    return items


def seal_candidates(data: bytes, key: str) -> Iterator[IndexItem]:
    """The items of a seal's data that may list `key`, the last written first, found by the
    key's bytes without decoding the others: one may be a chance match inside other bytes, so
    the caller checks each against the entry's own head."""
    wanted = key.encode()
    step = _INDEX_ITEM.size
    end = len(data)
    while (at := data.rfind(wanted, step, end)) >= 0:
        offset, length, written_ns, key_len = _INDEX_ITEM.unpack_from(data, at - step)
        if key_len == len(wanted):
            yield IndexItem(offset, key, length, written_ns)
        end = at + len(wanted) - 1


def seal_count(data: bytes, from_offset: int = 0) -> int:
    """How many objects a seal's (checked) data lists at `from_offset` or after in its pack."""
    count, pos, n = 0, 0, len(data)
    unpack = _INDEX_ITEM.unpack_from
    step = _INDEX_ITEM.size
    while pos + step <= n:
        offset, _, _, key_len = unpack(data, pos)
        count += offset >= from_offset
        pos += step + key_len
    return count
