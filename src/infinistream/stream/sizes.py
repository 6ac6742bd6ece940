"""How many bytes a message counts for in a stream: nats-server's measure, not ours.

A stream's `bytes`, the account's storage, `max_bytes` and the discard decisions all count a
message as nats-server's store would hold it, so that limits cut at the same message on both:
its file store's record (server/filestore.go fileStoreMsgSize: 4 bytes of length, 8 of
sequence, 8 of time, 2 of subject length, 8 of hash, and 4 of header length when there are
headers) or, for a stream with memory storage, its memory store's (memStoreMsgSize: 16 bytes
of sequence and time). The bytes InfiniStream writes are its own records (`storage.segment`,
14 bytes of framing); the index keeps both, the record length to find a record and this size
to count it.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from typing import Final, Protocol

from infinistream.storage.segment import RECORD_HEADER_SIZE

__all__ = ["message_size", "record_size", "record_sizes", "section_size", "stored_sizes"]

_FILE_RECORD: Final = 4 + 8 + 8 + 2 + 8
_FILE_HEADERS: Final = 4
_MEMORY_RECORD: Final = 8 + 8


def message_size(storage: str, subject_len: int, headers_len: int, data_len: int) -> int:
    """The bytes one message counts for in a stream of `storage` ("file" or "memory")."""
    if storage == "memory":
        return _MEMORY_RECORD + subject_len + headers_len + data_len
    if headers_len:
        return _FILE_RECORD + _FILE_HEADERS + subject_len + headers_len + data_len
    return _FILE_RECORD + subject_len + data_len


def record_size(storage: str, length: int, headers: bool) -> int:
    """`message_size` of a message from its record's length (subject, headers and data plus the
    record's framing) and whether it has headers."""
    if storage == "memory":
        return length + _MEMORY_RECORD - RECORD_HEADER_SIZE
    return length + _FILE_RECORD - RECORD_HEADER_SIZE + (_FILE_HEADERS if headers else 0)


def section_size(storage: str, size: int, count: int, hdrs: int) -> int:
    """What `count` messages of `size` record bytes, `hdrs` of them with headers, count for in
    all (the sum of their `record_size`s, from what a section entry keeps)."""
    if storage == "memory":
        return size + count * (_MEMORY_RECORD - RECORD_HEADER_SIZE)
    return size + count * (_FILE_RECORD - RECORD_HEADER_SIZE) + hdrs * _FILE_HEADERS


class _Sized(Protocol):
    """A message on its way into a stream: its record's length and its headers."""

    @property
    def size(self) -> int: ...
    @property
    def headers(self) -> bytes | None: ...


def stored_sizes(storage: str, messages: Iterable[_Sized]) -> list[int]:
    """`message_size` of each message, from its record length (subject, headers and data plus
    the record's framing) and whether it has headers: one pass, for the publish path."""
    if storage == "memory":
        extra = _MEMORY_RECORD - RECORD_HEADER_SIZE
        return [m.size + extra for m in messages]
    plain = _FILE_RECORD - RECORD_HEADER_SIZE
    headed = plain + _FILE_HEADERS
    return [m.size + (headed if m.headers else plain) for m in messages]


def record_sizes(sizes: bytes, lengths: Sequence[int]) -> array[int]:
    """The sizes an index entry keeps (u32s), or, for an entry written before it kept them,
    each record's length plus nats-server's file framing (as if it had no headers)."""
    if sizes:
        out = array("I")
        out.frombytes(sizes)
        return out
    plain = _FILE_RECORD - RECORD_HEADER_SIZE
    return array("I", (length + plain for length in lengths))
