"""Expiring old snapshots, and deleting the files that only they referenced.

pyiceberg removes expired snapshots from the table's metadata but leaves their files; here the
files every snapshot references are gathered before and after the expiry (manifest lists,
manifests, data files), and those referenced before but no longer are deleted. That is what
makes an erase reach the bytes: the data files a copy-on-write rewrite replaced stay readable
through older snapshots until those expire and the files go.

Orphans are files under the table's location that no snapshot and no metadata file references:
what a run killed between writing and committing left behind (a pending run in the table's
record names its data files, which are left alone: that run may still commit), and manifests
of a commit that never landed. They are deleted once older than a grace period, since a commit
in flight writes its manifests moments before it lands.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from infinistream.pipeline.tables.files import delete_files, list_files, prune_empty_dirs

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

DEFAULT_ORPHAN_GRACE = 3600.0


@dataclass
class Expired:
    snapshots: int = 0
    files_deleted: int = 0
    orphans_deleted: int = 0


def referenced_files(table: Table, snapshots: list[Snapshot]) -> set[str]:
    """Every manifest list, manifest and live data or delete file of these snapshots."""
    io = table.io
    out: set[str] = set()
    seen_manifests: set[str] = set()
    for snapshot in snapshots:
        out.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            out.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                out.add(entry.data_file.file_path)
    return out


def metadata_files(table: Table) -> set[str]:
    """The table's current metadata file and those its log still lists."""
    out = {table.metadata_location}
    out |= {entry.metadata_file for entry in table.metadata.metadata_log}
    return out


def expire(
    table: Table,
    *,
    older_than_ns: int | None = None,
    keep_only_current: bool = False,
    orphan_grace: float | None = DEFAULT_ORPHAN_GRACE,
    pending_run: str = "",
) -> Expired:
    """Expire the snapshots older than `older_than_ns` (or every one but the current), delete
    the files only they referenced, and the orphans older than `orphan_grace` seconds (None:
    no orphan sweep)."""
    out = Expired()
    table.refresh()
    protected = {ref.snapshot_id for ref in table.metadata.refs.values()}
    cutoff_ms = (older_than_ns or 0) // 1_000_000
    doomed = [
        s.snapshot_id
        for s in table.metadata.snapshots
        if s.snapshot_id not in protected
        and (keep_only_current or (older_than_ns is not None and s.timestamp_ms < cutoff_ms))
    ]
    if doomed:
        before = referenced_files(table, list(table.metadata.snapshots))
        table.maintenance.expire_snapshots().by_ids(doomed).commit()
        table.refresh()
        after = referenced_files(table, list(table.metadata.snapshots))
        out.snapshots = len(doomed)
        out.files_deleted = delete_files(table.io, sorted(before - after))
    if orphan_grace is not None:
        out.orphans_deleted = sweep_orphans(table, orphan_grace, pending_run)
    prune_empty_dirs(table.location())
    return out


def sweep_orphans(table: Table, grace: float, pending_run: str = "") -> int:
    """Delete the files under the table's location that nothing references, older than
    `grace` seconds; the data files of `pending_run` are left to it."""
    table.refresh()
    keep = referenced_files(table, list(table.metadata.snapshots)) | metadata_files(table)
    cutoff = time.time_ns() - int(grace * 1e9)
    doomed = [
        f.location
        for f in list_files(table.io, table.location())
        if f.location not in keep
        and f.modified_ns <= cutoff
        and not (pending_run and pending_run in f.location)
    ]
    return delete_files(table.io, doomed)
