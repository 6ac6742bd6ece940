"""The record of one metadata commit, as a flush's pack carries it for recovery.

A flush on the embedded default commits its metadata transaction without syncing the WAL and
writes this record into the pack that holds its object, before the pack's one `fdatasync`: the
record makes the commit durable. It holds what recovery needs to make the commit again without
its compares (they held once, under the write lock): the revision the commit took and its ops in
order. Encoded with msgspec's msgpack, a tagged union per op kind.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from infinistream.metadata.kv import Delete, DeletePrefix, DeleteRange, Op, Put

__all__ = ["CommitRecord", "decode_record", "encode_record", "needless_at"]


class _Put(msgspec.Struct, array_like=True, tag=0):
    key: str
    value: bytes


class _Delete(msgspec.Struct, array_like=True, tag=1):
    key: str


class _DeletePrefix(msgspec.Struct, array_like=True, tag=2):
    prefix: str


class _DeleteRange(msgspec.Struct, array_like=True, tag=3):
    start: str
    end: str


_AnyOp = _Put | _Delete | _DeletePrefix | _DeleteRange


class CommitRecord(msgspec.Struct, array_like=True, frozen=True):
    """A commit: the revision it took and its ops."""

    revision: int
    ops: list[_AnyOp]

    def as_ops(self) -> list[Op]:
        out: list[Op] = []
        for op in self.ops:
            if isinstance(op, _Put):
                out.append(Put(op.key, op.value))
            elif isinstance(op, _Delete):
                out.append(Delete(op.key))
            elif isinstance(op, _DeletePrefix):
                out.append(DeletePrefix(op.prefix))
            else:
                out.append(DeleteRange(op.start, op.end))
        return out


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(CommitRecord)


def encode_record(revision: int, ops: list[Op]) -> bytes:
    wire: list[_AnyOp] = []
    for op in ops:
        if isinstance(op, Put):
            wire.append(_Put(op.key, bytes(op.value)))
        elif isinstance(op, Delete):
            wire.append(_Delete(op.key))
        elif isinstance(op, DeletePrefix):
            wire.append(_DeletePrefix(op.prefix))
        elif isinstance(op, DeleteRange):
            wire.append(_DeleteRange(op.start, op.end))
        else:
            raise TypeError(f"not a metadata op: {type(op).__name__}")
    return _encoder.encode(CommitRecord(revision, wire))


def decode_record(data: bytes) -> CommitRecord | None:
    """The record `data` holds; None if it is not one this build reads."""
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError:
        return None


class _Revision(msgspec.Struct, array_like=True, frozen=True):
    revision: int
    ops: msgspec.Raw


_revision_decoder = msgspec.msgpack.Decoder(_Revision)


def needless_at(settled: int) -> Callable[[bytes], bool]:
    """Whether a record is needed no more once the store is durably at revision `settled`
    (`MetadataStore.settle`): its commit is at or below it, or it is not a record this build
    reads (recovery passes over those; retiring them keeps erase's promise)."""

    def needless(data: bytes) -> bool:
        try:
            return _revision_decoder.decode(data).revision <= settled
        except msgspec.DecodeError:
            return True

    return needless
