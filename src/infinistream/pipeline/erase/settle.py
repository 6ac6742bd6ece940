"""Where each erase request stands, written back to it: which objects held its bytes, when the
index stopped pointing at them (`rewritten_ns`), when the last of them left object storage and
no Iceberg table held its messages any more (`completed_ns`), and which exports hold them.

The erase job settles after its swaps; the janitor settles after its deletes (that is when
requests complete). Each update is a compare-and-set on the request, so a request changed
meanwhile is left for the next run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import msgspec

from infinistream.metadata.kv import Compare, Delete, MetadataStore, Op, Put
from infinistream.pipeline.erase.plan import Pending, explicit_details
from infinistream.pipeline.export import ExportBookmark, bookmarks_prefix
from infinistream.pipeline.snapshot import stream_names
from infinistream.pipeline.tables.erasing import table_holds
from infinistream.pipeline.tables.progress import read_records
from infinistream.storage import Encryption, ObjectNotFoundError, ObjectStore
from infinistream.stream import records
from infinistream.stream.erase import (
    EraseRequest,
    SeqRanges,
    encode_request,
    entry_holds,
    erase_requests,
)
from infinistream.stream.loader import StreamSnapshot, read_stream
from infinistream.stream.records import StreamKeys, decode_dedupe, decode_state
from infinistream.stream.sections import Segment

_decode_bookmark = msgspec.json.Decoder(ExportBookmark).decode
# Compare-and-set attempts on a stream's state before leaving it for the next run.
SETTLE_ATTEMPTS = 16


@dataclass(frozen=True)
class ExportHolding:
    """An export that holds messages of an erase request (it ran past their sequences)."""

    destination: str
    through_seq: int

    def rewrite_command(self, stream: str) -> str:
        return f"infinistream pipeline export --stream {stream} --to {self.destination} --rewrite"


@dataclass
class Standing:
    key: str
    request: EraseRequest
    existing_holders: int = 0  # holders still in object storage, when last looked
    exports: list[ExportHolding] = field(default_factory=list)
    # Iceberg tables that may still hold its messages (the erase job rewrites them).
    tables: list[str] = field(default_factory=list)


async def current_snapshots(meta: MetadataStore, group: str) -> list[StreamSnapshot]:
    out: list[StreamSnapshot] = []
    for name in await stream_names(meta, group):
        snap = await read_stream(meta, group, name)
        if snap is not None:
            out.append(snap)
    return out


def still_indexed(
    request: EraseRequest,
    snapshots: Sequence[StreamSnapshot],
    details: Mapping[str, Segment] | None = None,
) -> bool:
    """Whether some index entry points at a holder, or describes an erased record (`details`:
    see `erase.entry_holds`)."""
    holders = set(request.holders)
    ranges = SeqRanges(request.ranges)
    for snap in snapshots:
        mine = snap.name == request.stream and snap.state.uid == request.uid
        for ref in snap.entries:
            if ref.entry.obj in holders or (
                mine and entry_holds(ref.key, ref.entry, ranges, details)
            ):
                return True
    return False


async def record_rewrites(
    meta: MetadataStore,
    group: str,
    pending: Sequence[Pending],
    found: dict[str, set[str]],
    objects: ObjectStore,
    keys: Encryption | None,
) -> int:
    """After the job's swaps: add the holders found to each request, and stamp
    `rewritten_ns` on those the index no longer points into. Returns how many were stamped."""
    snapshots = await current_snapshots(meta, group)
    details = await explicit_details(snapshots, pending, objects, keys)
    now = time.time_ns()
    stamped = 0
    for p in pending:
        holders = sorted(set(p.request.holders) | found.get(p.key, set()))
        updated = msgspec.structs.replace(p.request, holders=holders)
        if not still_indexed(updated, snapshots, details):
            updated.rewritten_ns = now
        if updated == p.request:
            continue
        # Changed meanwhile (another run): left for the next one.
        txn = await meta.txn([Compare(p.key, p.revision)], [Put(p.key, encode_request(updated))])
        if txn.succeeded and updated.rewritten_ns:
            stamped += 1
    return stamped


async def forget_msg_ids(meta: MetadataStore, group: str, pending: Sequence[Pending]) -> int:
    """Delete the duplicate-window entries (`Nats-Msg-Id`) of erased messages, and the stream
    state's last id if it was one of theirs: ids are application data too. Returns how many
    ids went; a stream that keeps changing under the compare-and-set is left for the next run."""
    forgotten = 0
    for p in pending:
        request = p.request
        keys = StreamKeys(group, request.stream)
        erased = SeqRanges(request.ranges)
        for _ in range(SETTLE_ATTEMPTS):
            state_item = await meta.get(keys.state)
            if state_item is None:
                break
            state = decode_state(state_item.value)
            if state.uid != request.uid:
                break
            ids = [
                item
                for item in await meta.range(keys.dedupe_prefix)
                if decode_dedupe(item.value).seq in erased
            ]
            names = {item.key[len(keys.dedupe_prefix) :] for item in ids}
            if not ids and state.last_msg_id not in names:
                break
            ops: list[Op] = [Delete(item.key) for item in ids]
            if state.last_msg_id and state.last_msg_id in names:
                cleared = msgspec.structs.replace(state, last_msg_id="")
                ops.append(Put(keys.state, records.encode(cleared)))
            compares = [Compare(item.key, item.mod_revision) for item in ids]
            compares.append(Compare(keys.state, state_item.mod_revision))
            if (await meta.txn(compares, ops)).succeeded:
                forgotten += len(ids)
                break
    return forgotten


async def record_completions(
    meta: MetadataStore, objects: ObjectStore, group: str, *, full: bool = True
) -> list[Standing]:
    """Look up the holders of every rewritten request not yet complete; stamp `completed_ns`
    on those with none left, in object storage and in the tables. Returns every request of
    the group with where it stands: with `full` (a report), also how many holders pending
    requests have left and the exports that hold their messages; without (the janitor), only
    what completing them needs."""
    out: list[Standing] = []
    now = time.time_ns()
    tables = await read_records(meta, group)
    for item, request in await erase_requests(meta, group):
        standing = Standing(item.key, request)
        out.append(standing)
        if request.completed_ns or not (full or request.rewritten_ns):
            continue
        standing.existing_holders = await _existing(objects, request.holders)
        standing.tables = [t.table for t in tables if table_holds(t, request)]
        if request.rewritten_ns and not standing.existing_holders and not standing.tables:
            request.completed_ns = now
            txn = await meta.txn(
                [Compare(item.key, item.mod_revision)], [Put(item.key, encode_request(request))]
            )
            if not txn.succeeded:
                request.completed_ns = 0
    if full:
        for standing in out:
            standing.exports = await exports_holding(meta, group, standing.request)
    return out


async def _existing(objects: ObjectStore, keys: Iterable[str]) -> int:
    count = 0
    for key in keys:
        try:
            await objects.head(key)
        except ObjectNotFoundError:
            continue
        count += 1
    return count


async def exports_holding(
    meta: MetadataStore, group: str, request: EraseRequest
) -> list[ExportHolding]:
    """The exports of the request's stream incarnation that ran past its first sequence."""
    if not request.ranges:
        return []
    first = request.ranges[0][0]
    out: list[ExportHolding] = []
    for item in await meta.range(bookmarks_prefix(group, request.stream)):
        bookmark = _decode_bookmark(item.value)
        through = max(bookmark.last_seq, bookmark.pending_through)
        if bookmark.uid == request.uid and through >= first and _started_before(bookmark, request):
            out.append(ExportHolding(bookmark.destination, through))
    return out


def _started_before(bookmark: ExportBookmark, request: EraseRequest) -> bool:
    """Whether the export was started (or rewritten) before the request: one started later
    exported only what was live then, and the erased messages were not."""
    return bookmark.started_ns < request.requested_ns
