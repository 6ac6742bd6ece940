"""`infinistream pipeline rewrap`: key rotation, so that an old key-encryption key can be retired.

Run with the new key as the key and the old one(s) as previous keys (`--key-file NEW
--prev-key-file OLD`, or `jetstream { key, prev_key }` in the config). Then:

1. Every object that some index entry references and that holds a section sealed under a
   previous key is copied to a new object (`layout.rewrapped_key`: same level, same time) in
   which each sealed section's data key is wrapped by the current key. The ciphertext is not
   touched (storage.crypto.Encryption.rewrap): no message is decrypted or re-encrypted. Objects
   are write-once (invariant 3), so this is a copy, never an overwrite.
2. The index entries of each stream that point into such an object are swapped to the copy in
   one transaction per stream and object, comparing every entry's revision and the stream's
   state, and bumping the state's `layout` (as compaction's swap does) so agents reload where
   the messages live. A stream whose entries changed meanwhile (compaction, a purge) is left
   for the next run and reported; the copy it did not take is the janitor's.
3. Index entries and stream states sealed in metadata under a previous key
   (stream.sealed_index), or written in clear before encryption was turned on, are sealed
   again under the current key. (Duplicate-window keys hold a keyed hash of each message id:
   those made under an old key are found while it is held and expire with the window; after
   the old key is retired, a duplicate of a message published before the rotation and still
   within the window is no longer recognised.)
4. The report says what still needs each previous key: referenced objects and metadata values.
   When it says nothing, the old key can be retired; the originals of the copied objects are
   unreferenced and the janitor deletes them after its grace period (they need the old key
   only to be read, and nothing reads them).

Objects written before encryption was turned on hold sections in clear: a rewrap does not seal
them (an uncompressed compacted section is shared by several index entries, which a sealed one
cannot be); compaction seals what it rewrites, and the report counts what is still in clear.

The job runs on the driver alone: it moves bytes between the store and itself and does no
per-record work, so Spark would only add its start-up time.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field

import msgspec

from infinistream.metadata import open_metadata
from infinistream.metadata.kv import Compare, Get, MetadataStore, Op, Put, Scan
from infinistream.pipeline.arguments import (
    EXIT_FAILED,
    EXIT_FENCE_LOST,
    EXIT_OK,
    EXIT_USAGE,
    stopped,
)
from infinistream.pipeline.compaction.swap import SWAP_ATTEMPTS, swap_entries
from infinistream.pipeline.lease import FenceLost, add_fence_arguments, fence_from_args, fenced
from infinistream.pipeline.options import StoreError, StoreOptions
from infinistream.pipeline.snapshot import run, stream_names
from infinistream.storage import (
    CODEC_SEALED,
    Encryption,
    KeyRefusedError,
    ObjectNotFoundError,
    ObjectStore,
    ObjectStoreError,
)
from infinistream.storage.crypto import section_key_id, value_key_id
from infinistream.storage.layout import rewrapped_key
from infinistream.storage.segment import ObjectFormatError, SectionRef, rewrite_sections
from infinistream.stream import records
from infinistream.stream.records import (
    Entry,
    SectionEntry,
    StreamKeys,
    decode_entry,
    decode_state,
)
from infinistream.stream.sealed_index import SealedIndex

# The exit code of a run after which a previous key is still needed (a stream was skipped): run
# again before retiring it.
EXIT_KEYS_LEFT = 4
# Objects copied at once: each is held whole in memory (compacted ones are tens of MiB).
CONCURRENCY = 4
# Bytes read from a sealed section's start to learn its key id: the envelope's head.
ENVELOPE_HEAD = 512


class RewrapError(Exception):
    """The job cannot run: no keys, or a store that cannot be reached."""


@dataclass
class _Ref:
    stream: str
    key: str
    revision: int
    entry: Entry
    value_key: str | None  # the key id the metadata value is sealed under; None in clear


@dataclass
class KeyReport:
    """What still needs which key: referenced objects and sealed metadata values."""

    current: str = ""
    # key id -> referenced objects holding a section sealed under it
    objects: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    # key id -> metadata values (index entries, stream states) sealed under it
    values: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    objects_in_clear: set[str] = field(default_factory=set)
    values_in_clear: int = 0

    def old_keys(self) -> list[str]:
        """Key ids other than the current one that something still needs."""
        keys = {k for k, objs in self.objects.items() if objs} | {
            k for k, n in self.values.items() if n
        }
        return sorted(keys - {self.current})

    def lines(self) -> list[str]:
        out = [f"rewrap: current key {self.current}"]
        for kid in sorted(set(self.objects) | set(self.values)):
            tag = "current" if kid == self.current else "previous"
            objs = sorted(self.objects.get(kid, ()))
            out.append(
                f"rewrap: key {kid} ({tag}): {len(objs)} referenced objects, "
                f"{self.values.get(kid, 0)} metadata values"
            )
            if kid != self.current:
                out += [f"rewrap:   needs {kid}: {o}" for o in objs[:20]]
                if len(objs) > 20:
                    out.append(f"rewrap:   ... and {len(objs) - 20} more")
        out.append(
            f"rewrap: in clear (written before encryption): {len(self.objects_in_clear)} "
            f"referenced objects, {self.values_in_clear} metadata values"
        )
        old = self.old_keys()
        out.append(
            "rewrap: previous keys still needed: " + ", ".join(old)
            if old
            else "rewrap: no previous key is needed any more: it can be retired"
        )
        return out


@dataclass
class RewrapSummary:
    objects_copied: int = 0
    sections_rewrapped: int = 0
    entries_moved: int = 0
    values_resealed: int = 0
    skipped: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    report: KeyReport = field(default_factory=KeyReport)

    @property
    def ok(self) -> bool:
        return not self.failures

    def line(self) -> str:
        return (
            f"rewrap: {self.objects_copied} objects copied ({self.sections_rewrapped} sections "
            f"rewrapped), {self.entries_moved} index entries moved, {self.values_resealed} "
            f"metadata values resealed, {len(self.skipped)} skipped, {len(self.failures)} failed"
        )


@dataclass
class _State:
    key: str
    revision: int
    value_key: str | None


async def _read_states(raw: MetadataStore, group: str) -> list[_State]:
    names = await stream_names(raw, group)
    found = await raw.get_many([StreamKeys(group, n).state for n in names])
    return [_State(i.key, i.mod_revision, value_key_id(i.value)) for i in found.values()]


async def _read_refs(raw: MetadataStore, enc: Encryption, group: str) -> list[_Ref]:
    refs: list[_Ref] = []
    for name in await stream_names(raw, group):
        for item in await raw.range(StreamKeys(group, name).index_prefix):
            plain = enc.open_value(item.key, item.value)
            refs.append(
                _Ref(
                    name, item.key, item.mod_revision, decode_entry(plain), value_key_id(item.value)
                )
            )
    return refs


async def key_report(options: StoreOptions) -> KeyReport:
    """What still needs which key, from the index and one small GET per sealed section."""
    enc = _encryption(options)
    raw = open_metadata(options.metadata)
    try:
        refs = await _read_refs(raw, enc, options.group)
        states = await _read_states(raw, options.group)
    finally:
        await raw.close()
    with options.open_objects() as objects:
        return await _report(objects, enc, refs, states)


async def _report(
    objects: ObjectStore, enc: Encryption, refs: list[_Ref], states: list[_State]
) -> KeyReport:
    report = KeyReport(current=enc.current_id)
    sections: set[tuple[str, int, int]] = set()
    for value_key in [r.value_key for r in refs] + [s.value_key for s in states]:
        if value_key is None:
            report.values_in_clear += 1
        else:
            report.values[value_key] += 1
    for ref in refs:
        e = ref.entry
        if e.codec & CODEC_SEALED:
            sections.add((e.obj, e.offset, e.length))
        else:
            report.objects_in_clear.add(e.obj)
    limit = asyncio.Semaphore(CONCURRENCY * 2)

    async def look(obj: str, offset: int, length: int) -> None:
        async with limit:
            try:
                head = await objects.get_range(obj, offset, offset + min(length, ENVELOPE_HEAD))
            except ObjectNotFoundError:
                return  # gone: the scan job's business, and needs no key
        report.objects[section_key_id(head)].add(obj)

    await asyncio.gather(*(look(*s) for s in sections))
    return report


def _encryption(options: StoreOptions) -> Encryption:
    enc = options.encryption()
    if enc is None:
        raise RewrapError(
            "rewrap needs the keys: the new key (--key-file, jetstream { key } or "
            "$INFINISTREAM_KEY) and the old ones (--prev-key-file, prev_key)"
        )
    return enc


async def rewrap(
    options: StoreOptions, *, dry_run: bool = False, fence_args: argparse.Namespace | None = None
) -> RewrapSummary:
    enc = _encryption(options)
    fence = fence_from_args(fence_args) if fence_args is not None else None
    await options.check_exist()
    raw = open_metadata(options.metadata)
    meta = fenced(SealedIndex(raw, enc), fence)
    objects = options.open_objects()
    summary = RewrapSummary()
    try:
        refs = await _read_refs(raw, enc, options.group)
        if not dry_run:
            moved = await _move_objects(options.group, objects, meta, enc, refs, summary)
            await _reseal_values(meta, enc, refs, moved, summary)
            await _reseal_states(raw, meta, enc, options.group, summary)
            await _reseal_subjects(raw, meta, enc, options.group, summary)
            refs = await _read_refs(raw, enc, options.group)
        summary.report = await _report(objects, enc, refs, await _read_states(raw, options.group))
    except ObjectStoreError as exc:
        raise RewrapError(f"object store {objects.url}: {exc}") from exc
    finally:
        await raw.close()
        objects.close()
    return summary


async def _move_objects(
    group: str,
    objects: ObjectStore,
    meta: MetadataStore,
    enc: Encryption,
    refs: list[_Ref],
    summary: RewrapSummary,
) -> set[str]:
    """Copy each object with sections under a previous key and swap its entries; returns the
    metadata keys of the entries moved."""
    by_obj: dict[str, list[_Ref]] = defaultdict(list)
    for ref in refs:
        if ref.entry.codec & CODEC_SEALED:
            by_obj[ref.entry.obj].append(ref)
    moved: set[str] = set()
    limit = asyncio.Semaphore(CONCURRENCY)

    async def one(obj: str, obj_refs: list[_Ref]) -> None:
        async with limit:
            try:
                await _move_object(group, objects, meta, enc, obj, obj_refs, summary, moved)
            except (KeyRefusedError, ObjectFormatError, ObjectNotFoundError) as exc:
                summary.failures.append(f"object {obj}: {exc}")

    await asyncio.gather(*(one(obj, r) for obj, r in by_obj.items()))
    return moved


async def _move_object(
    group: str,
    objects: ObjectStore,
    meta: MetadataStore,
    enc: Encryption,
    obj: str,
    refs: list[_Ref],
    summary: RewrapSummary,
    moved: set[str],
) -> None:
    data = await objects.get(obj)
    rewrapped = 0

    def transform(ref: SectionRef, stored: bytes) -> bytes:
        nonlocal rewrapped
        if not ref.codec & CODEC_SEALED or section_key_id(stored) == enc.current_id:
            return stored
        rewrapped += 1
        return enc.rewrap(stored)

    new_data, pairs = rewrite_sections(data, transform, key=obj)
    if not rewrapped:
        return
    new_obj = rewrapped_key(obj, time.time_ns(), secrets.token_hex(6))
    await objects.put(new_obj, new_data)
    summary.objects_copied += 1
    summary.sections_rewrapped += rewrapped
    by_stream: dict[str, list[_Ref]] = defaultdict(list)
    for ref in refs:
        by_stream[ref.stream].append(ref)
    for stream, stream_refs in by_stream.items():
        entries = [(r, _moved_entry(r.entry, new_obj, pairs)) for r in stream_refs]
        if await _swap(meta, group, stream, entries):
            summary.entries_moved += len(entries)
            moved.update(r.key for r in stream_refs)
        else:
            summary.skipped.append(f"stream {stream}: entries in {obj} changed meanwhile")


def _moved_entry(entry: Entry, new_obj: str, pairs: list[tuple[SectionRef, SectionRef]]) -> Entry:
    for old, new in pairs:
        if old.offset <= entry.offset < old.end:
            if isinstance(entry, SectionEntry):
                # The whole section, with its record directory after it.
                return msgspec.structs.replace(
                    entry,
                    obj=new_obj,
                    offset=new.offset,
                    length=new.length,
                    dir_length=new.index_length,
                    dir_crc=new.index_checksum,
                )
            if entry.codec & CODEC_SEALED:
                # A sealed section is read whole: its entry spans all its stored bytes.
                return msgspec.structs.replace(
                    entry, obj=new_obj, offset=new.offset, length=new.length
                )
            return msgspec.structs.replace(
                entry, obj=new_obj, offset=new.offset + entry.offset - old.offset
            )
    raise ObjectFormatError(f"index entry at {entry.offset} of {entry.obj} is in no section")


async def _swap(
    meta: MetadataStore, group: str, stream: str, entries: list[tuple[_Ref, Entry]]
) -> bool:
    keys = StreamKeys(group, stream)
    compares = [Compare(r.key, r.revision) for r, _ in entries]
    ops: list[Op] = [Put(r.key, records.encode(e)) for r, e in entries]
    for _ in range(SWAP_ATTEMPTS):
        state_item = await meta.get(keys.state)
        if state_item is None:
            return False
        state = decode_state(state_item.value)
        if await swap_entries(meta, keys, state, state_item.mod_revision, compares, ops):
            return True
        current = await meta.get_many([r.key for r, _ in entries])
        if any(
            (item := current.get(r.key)) is None or item.mod_revision != r.revision
            for r, _ in entries
        ):
            return False
    return False


async def _reseal_values(
    meta: MetadataStore, enc: Encryption, refs: list[_Ref], moved: set[str], summary: RewrapSummary
) -> None:
    """Seal under the current key the index entries that are not (moved ones already are)."""
    for ref in refs:
        if ref.key in moved or ref.value_key == enc.current_id:
            continue
        txn = await meta.txn(
            [Compare(ref.key, ref.revision)], [Put(ref.key, records.encode(ref.entry))]
        )
        if txn.succeeded:
            summary.values_resealed += 1
        else:
            summary.skipped.append(f"index entry {ref.key} changed meanwhile")


async def _reseal_states(
    raw: MetadataStore, meta: MetadataStore, enc: Encryption, group: str, summary: RewrapSummary
) -> None:
    """Seal every stream state under the current key (agents' commits, which write it with
    their current key, may get there first: then there is nothing to do)."""
    for state in await _read_states(raw, group):
        for _ in range(SWAP_ATTEMPTS):
            item = await raw.get(state.key)
            if item is None or value_key_id(item.value) == enc.current_id:
                break
            plain = enc.open_value(item.key, item.value)
            txn = await meta.txn([Compare(item.key, item.mod_revision)], [Put(item.key, plain)])
            if txn.succeeded:
                summary.values_resealed += 1
                break


async def _reseal_subjects(
    raw: MetadataStore, meta: MetadataStore, enc: Encryption, group: str, summary: RewrapSummary
) -> None:
    """Seal every stream's subject records under the current key (and under the current key's
    token of each subject), compared against the stream's state: a commit that changed them
    meanwhile wins, and the records are left for the next run."""
    for name in await stream_names(raw, group):
        keys = StreamKeys(group, name)
        stored = await raw.range(keys.subject_prefix)
        if all(value_key_id(i.value) in (None, enc.current_id) for i in stored):
            continue
        snap = await meta.snapshot([Get(keys.state), Scan(keys.subject_prefix)])
        state = snap.item(0)
        if state is None:
            continue
        ops: list[Op] = [Put(i.key, i.value) for i in snap.items(1)]
        txn = await meta.txn([Compare(keys.state, state.mod_revision)], ops)
        if txn.succeeded:
            summary.values_resealed += len(ops)
        else:
            summary.skipped.append(f"stream {name}: subject records changed meanwhile")


# -- the command line ---------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dry-run",
        dest="dry_run",
        action="store_true",
        help="Change nothing: only report what still needs which key",
    )
    add_fence_arguments(parser)


def main(args: argparse.Namespace, options: StoreOptions) -> int:
    """`infinistream pipeline rewrap`: 0 when no previous key is needed any more, 4 when some
    still is (a skipped stream: run again), 1 on failure, 2 on bad input, 3 on a lost lease."""
    try:
        fence_from_args(args)
        summary = run(rewrap(options, dry_run=args.dry_run, fence_args=args))
    except ValueError as exc:
        return stopped(f"infinistream pipeline rewrap: {exc}", EXIT_USAGE)
    except FenceLost as exc:
        return stopped(f"infinistream pipeline rewrap: lease lost: {exc}", EXIT_FENCE_LOST)
    except (RewrapError, StoreError, KeyRefusedError) as exc:
        return stopped(f"infinistream pipeline rewrap: {exc}", EXIT_FAILED)
    print(summary.line())
    for line in summary.report.lines():
        print(line)
    for problem in summary.skipped + summary.failures:
        print(f"rewrap: {problem}", file=sys.stderr)
    if not summary.ok:
        return EXIT_FAILED
    return EXIT_KEYS_LEFT if summary.report.old_keys() else EXIT_OK
