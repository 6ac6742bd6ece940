"""Listing and deleting a table's files through its FileIO (a local directory or S3): what
removing a killed run's files, expiring snapshots and sweeping orphans need."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyiceberg.io import FileIO


@dataclass(frozen=True)
class StoredFile:
    location: str
    size: int
    modified_ns: int


def _fs(io: FileIO, location: str) -> tuple[Any, str, str]:
    """(pyarrow filesystem, scheme, path) of a location, as pyiceberg's PyArrowFileIO has it."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    if not isinstance(io, PyArrowFileIO):
        raise TypeError(f"the tables need pyiceberg's PyArrowFileIO, not {type(io).__name__}")
    scheme, netloc, path = io.parse_location(location, io.properties)
    return io.fs_by_scheme(scheme, netloc), scheme, path


def list_files(io: FileIO, location: str) -> list[StoredFile]:
    """Every file under `location` (a directory URL), recursively."""
    from pyarrow.fs import FileSelector, FileType  # type: ignore[import-untyped]

    fs, scheme, path = _fs(io, location.rstrip("/"))
    infos = fs.get_file_info(FileSelector(path, recursive=True, allow_not_found=True))
    out = []
    for info in infos:
        if info.type != FileType.File:
            continue
        modified = info.mtime_ns if info.mtime_ns is not None else 0
        url = f"file://{info.path}" if scheme == "file" else f"{scheme}://{info.path}"
        out.append(StoredFile(url, info.size or 0, modified))
    return out


def delete_files(io: FileIO, locations: list[str]) -> int:
    """Delete these files (those already gone count as deleted); how many there were."""
    for location in locations:
        try:
            io.delete(location)
        except FileNotFoundError:
            continue
    return len(locations)


def prune_empty_dirs(location: str) -> None:
    """Remove directories left empty under a local location (partition directories are named
    after partition values, which may be what an erase removed); object stores have none."""
    if not location.startswith("file:"):
        return
    root = location.removeprefix("file://")
    for current, _, _ in os.walk(root, topdown=False):
        # Listed again: the walk's own lists predate the removal of empty children.
        if current != root and not os.listdir(current):
            try:
                os.rmdir(current)
            except OSError:
                continue
