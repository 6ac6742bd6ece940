"""How far each table has got, in its own snapshots, and the table's record in metadata.

The table itself is the truth: every snapshot the pipeline commits carries, in its summary, the
last sequence committed for each of the table's streams and the stream's incarnation:

    infinistream.last-seq.ORDERS = 1042
    infinistream.uid.ORDERS      = 4q0b...
    infinistream.run             = <run id>      (the run that committed it)

A run appends the stream from the last sequence there + 1 and commits its files and the new
marks in one transaction, so a run killed before its commit left the table as it was and the
next one starts from the same place, and a run killed after it committed is not repeated. Every
commit of the pipeline (appends, erase rewrites, compaction) carries the marks forward; a
snapshot made by another writer is skipped over to its ancestors.

Metadata keeps a record per table (`{group}/pipeline/tables/{table}`, JSON), which is not the
truth but what others read cheaply: the marks as last committed (for the table's lag), the run
that may have written files and not committed them (so the next run removes them), and how far
erase requests have been applied to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import msgspec

from infinistream.metadata import Compare, MetadataStore, Put

if TYPE_CHECKING:
    from pyiceberg.table import Table

LAST_SEQ = "infinistream.last-seq."
UID = "infinistream.uid."
RUN = "infinistream.run"
UPDATE_ATTEMPTS = 8


class Mark(msgspec.Struct, frozen=True):
    last_seq: int
    uid: str


class TableRecord(msgspec.Struct, kw_only=True):
    table: str  # the identifier, dotted
    location: str
    created_ns: int
    marks: dict[str, Mark] = msgspec.field(default_factory=dict)
    # stream -> when the message at its mark was stored (for the table's lag in time)
    through_ns: dict[str, int] = msgspec.field(default_factory=dict)
    committed_ns: int = 0
    # A run that may have written files and not committed them: its id is in their names.
    pending_run: str = ""
    # Every erase request of the group made up to here has been applied to the table.
    erased_ns: int = 0


_encode = msgspec.json.encode
_decode = msgspec.json.Decoder(TableRecord).decode


def records_prefix(group: str) -> str:
    return f"{group}/pipeline/tables/"


def record_key(group: str, table: str) -> str:
    return f"{records_prefix(group)}{table}"


def marks_of(summary: dict[str, str]) -> dict[str, Mark] | None:
    """The marks a snapshot summary carries; None if it carries none (another writer's)."""
    marks = {
        key[len(LAST_SEQ) :]: Mark(int(value), summary.get(UID + key[len(LAST_SEQ) :], ""))
        for key, value in summary.items()
        if key.startswith(LAST_SEQ)
    }
    return marks or (None if RUN not in summary else {})


def summary_properties(marks: dict[str, Mark], run: str) -> dict[str, str]:
    props = {RUN: run}
    for stream, mark in sorted(marks.items()):
        props[LAST_SEQ + stream] = str(mark.last_seq)
        props[UID + stream] = mark.uid
    return props


class ProgressLost(Exception):
    """The table has snapshots, and none that the pipeline committed is left to say how far it
    got: appending again could duplicate messages."""


def committed_marks(table: Table) -> dict[str, Mark]:
    """The marks of the newest snapshot the pipeline committed, on the table's main branch."""
    metadata = table.metadata
    snapshot = table.current_snapshot()
    while snapshot is not None:
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        marks = marks_of(dict(summary))
        if marks is not None:
            return marks
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    if table.current_snapshot() is not None:
        raise ProgressLost(
            f"table {'.'.join(table.name())} has snapshots but none the pipeline committed "
            "(another writer's, with the pipeline's own expired): it cannot tell which "
            "messages the table holds; drop the table, or rename it, to have it made again"
        )
    return {}


def committed_run(table: Table, run: str) -> bool:
    """Whether some snapshot of the table was committed by `run`."""
    return any(
        s.summary is not None and s.summary.additional_properties.get(RUN) == run
        for s in table.metadata.snapshots
    )


async def read_record(meta: MetadataStore, group: str, table: str) -> tuple[TableRecord, int]:
    """The table's record and its revision (0 when there is none yet)."""
    item = await meta.get(record_key(group, table))
    if item is None:
        return TableRecord(table=table, location="", created_ns=time.time_ns()), 0
    return _decode(item.value), item.mod_revision


async def read_records(meta: MetadataStore, group: str) -> list[TableRecord]:
    return [_decode(item.value) for item in await meta.range(records_prefix(group))]


class RecordConflict(Exception):
    """The table's record changed under this run (another run of the job)."""


async def write_record(meta: MetadataStore, group: str, record: TableRecord, revision: int) -> int:
    """Compare-and-set the record; its new revision."""
    key = record_key(group, record.table)
    result = await meta.txn([Compare(key, revision)], [Put(key, _encode(record))])
    if not result.succeeded:
        raise RecordConflict(
            f"the record of table {record.table} changed meanwhile: another run of the tables "
            "job is working on it"
        )
    return result.revision


async def update_record(
    meta: MetadataStore, group: str, table: str, change: Callable[[TableRecord], bool]
) -> None:
    """Read, change and compare-and-set the record, again if someone else wrote it meanwhile;
    `change` returns False when there is nothing to write."""
    for _ in range(UPDATE_ATTEMPTS):
        record, revision = await read_record(meta, group, table)
        if not change(record):
            return
        try:
            await write_record(meta, group, record, revision)
            return
        except RecordConflict:
            continue
    raise RecordConflict(f"the record of table {table} kept changing; next run")


def streams_of(records: Iterable[TableRecord], stream: str, uid: str) -> list[TableRecord]:
    """The tables that hold messages of this stream incarnation."""
    return [r for r in records if r.marks.get(stream, Mark(0, "")).uid == uid]
