"""Executor side of an append: a stream's messages, read from object storage, as Iceberg data
files in the table's location.

A `WriteTask` carries one `ReadTask` (the data source's: pieces of object sections, read with
ranged GETs), the table's metadata as the run planned it (schema, partition spec, properties,
location) and the FileIO properties that reach the location. The executor reads the messages,
shapes them as the table's columns and writes them with pyiceberg's own writer, which splits
them by partition, names the files after the run (`00000-{n}-{run}.parquet`) and computes the
column statistics; the `DataFile`s come back to the driver, which commits them all in one
transaction. Nothing here touches the catalog or the metadata store.

With the JSON projection a first pass (`discover_task`) only looks at the payloads, so that the
driver can add the new fields to the schema before anything is written.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from infinistream.pipeline.reading import Problem, ReadTask, read_task
from infinistream.pipeline.tables.schema import (
    JSON_COLUMN,
    SUBJECT_PREFIX,
    json_columns,
    subject_tokens_of,
)

if TYPE_CHECKING:
    from pyiceberg.table.metadata import TableMetadata

# Files of one task are numbered from task index * this, so a run's names never collide.
FILES_PER_TASK = 100_000


@dataclass(frozen=True)
class WriteTask:
    read: ReadTask
    metadata: TableMetadata
    io: tuple[tuple[str, str], ...]
    run: str  # the run's id, a UUID: every file it writes carries it in its name
    index: int


@dataclass
class TypeConflict:
    """Messages whose JSON field has another kind than the table's column: stored as null."""

    stream: str
    name: str
    column_kind: str
    found_kind: str
    first_seq: int
    count: int = 1

    def __str__(self) -> str:
        more = f" (and {self.count - 1} more)" if self.count > 1 else ""
        return (
            f"JSON field {self.name!r} of stream {self.stream!r} is {self.column_kind} in the "
            f"table, but seq {self.first_seq}{more} has a {self.found_kind}: stored as null "
            "(change the column or the producer)"
        )


@dataclass
class WriteResult:
    index: int
    files: list[Any] = field(default_factory=list)  # pyiceberg DataFiles
    rows: int = 0
    bytes_written: int = 0
    problems: list[str] = field(default_factory=list)
    conflicts: list[TypeConflict] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0


class TaskOutcome(Protocol):
    """What a Spark task of the table jobs reports besides its work: its error and time."""

    error: str
    seconds: float


_Task = TypeVar("_Task")
_Outcome = TypeVar("_Outcome", bound=TaskOutcome)


def never_raising(
    work: Callable[[_Task, _Outcome], None], task: _Task, result: _Outcome
) -> _Outcome:
    """Run a Spark task's `work` into `result` without raising: a failure is its `error`, so
    the driver reports every failed task, not the first."""
    started = time.monotonic()
    try:
        work(task, result)
    except Exception as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    result.seconds = time.monotonic() - started
    return result


def write_task(task: WriteTask) -> WriteResult:
    """The Spark task that writes a table's data files: never raises."""
    return never_raising(_write, task, WriteResult(task.index))


def data_files(metadata: TableMetadata, table: Any, io: Any, run: str, index: int) -> list[Any]:
    """The arrow `table` written as data files of the table (pyiceberg DataFiles), named for
    the run and numbered in task `index`'s own range."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    return list(
        _dataframe_to_data_files(
            metadata,
            table,
            io,
            write_uuid=uuid.UUID(run),
            counter=itertools.count(index * FILES_PER_TASK),
        )
    )


def _write(task: WriteTask, result: WriteResult) -> None:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyiceberg.io import load_file_io

    metadata = task.metadata
    problems: list[Problem] = []
    batches = list(read_task(task.read, on_problem=problems.append))
    result.problems = [str(p) for p in problems]
    if not batches:
        return
    shaped = Shaper(metadata)
    table = pa.Table.from_batches([shaped.batch(b) for b in batches])
    result.conflicts = shaped.conflicts()
    io = load_file_io(dict(task.io), metadata.location)
    files = data_files(metadata, table, io, task.run, task.index)
    result.files = files
    result.rows = table.num_rows
    result.bytes_written = sum(f.file_size_in_bytes for f in files)


class Shaper:
    """Record batches of the data source's columns as the table's columns."""

    def __init__(self, metadata: TableMetadata) -> None:
        schema = metadata.schema()
        self.tokens = subject_tokens_of(metadata.properties)
        self.with_prefix = SUBJECT_PREFIX in schema.column_names
        self.json_kinds = json_columns(schema)
        self._conflicts: dict[tuple[str, str, str], TypeConflict] = {}

    def batch(self, batch: Any) -> Any:
        import pyarrow as pa

        columns = {
            "stream": batch.column("stream"),
            "subject": batch.column("subject"),
            "seq": batch.column("seq"),
            "time": batch.column("time"),
            "headers": batch.column("headers"),
            "payload": batch.column("data"),
        }
        if self.with_prefix:
            columns[SUBJECT_PREFIX] = pa.array(
                [subject_prefix(s, self.tokens) for s in batch.column("subject").to_pylist()],
                type=pa.string(),
            )
        if self.json_kinds:
            columns[JSON_COLUMN] = self._json(batch)
        return pa.RecordBatch.from_pydict(columns)

    def _json(self, batch: Any) -> Any:
        import pyarrow as pa

        kinds = self.json_kinds
        values: dict[str, list[Any]] = {name: [] for name in kinds}
        valid: list[bool] = []
        streams = batch.column("stream").to_pylist()
        seqs = batch.column("seq").to_pylist()
        for stream, seq, payload in zip(
            streams, seqs, batch.column("data").to_pylist(), strict=True
        ):
            fields = json_object(payload)
            valid.append(fields is not None)
            for name, kind in kinds.items():
                value = (fields or {}).get(name)
                found = kind_of(value)
                if value is None or found is None:
                    values[name].append(None)
                elif fits(found, kind):
                    values[name].append(column_value(value, kind))
                else:
                    values[name].append(None)
                    self._conflict(stream, name, kind, found, seq)
        arrays = [pa.array(values[name], type=arrow_type(kind)) for name, kind in kinds.items()]
        mask = pa.array([not v for v in valid], type=pa.bool_())
        return pa.StructArray.from_arrays(arrays, names=list(kinds), mask=mask)

    def _conflict(self, stream: str, name: str, kind: str, found: str, seq: int) -> None:
        key = (stream, name, found)
        known = self._conflicts.get(key)
        if known is None:
            self._conflicts[key] = TypeConflict(stream, name, kind, found, seq)
        else:
            known.count += 1
            known.first_seq = min(known.first_seq, seq)

    def conflicts(self) -> list[TypeConflict]:
        return list(self._conflicts.values())


def subject_prefix(subject: str, tokens: int) -> str:
    return ".".join(subject.split(".")[:tokens])


# -- the JSON projection ----------------------------------------------------------------------


def arrow_type(kind: str) -> Any:
    import pyarrow as pa

    return {"boolean": pa.bool_(), "long": pa.int64(), "double": pa.float64()}.get(
        kind, pa.string()
    )


_INT64 = (-(2**63), 2**63 - 1)


def json_object(payload: bytes | None) -> dict[str, Any] | None:
    """The payload's fields if it is a JSON object, else None."""
    if not payload or payload.lstrip()[:1] != b"{":
        return None
    try:
        value = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def kind_of(value: Any) -> str | None:
    """A JSON value's column kind; None for null (which says nothing about the type)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long" if _INT64[0] <= value <= _INT64[1] else "double"
    if isinstance(value, float):
        return "double"
    return "string"  # strings, and nested objects and arrays as their JSON text


def fits(found: str, column: str) -> bool:
    """Whether a value of kind `found` is stored in a column of kind `column` as it is: the
    same kind, or a whole number in a double column."""
    return found == column or (found == "long" and column == "double")


def column_value(value: Any, kind: str) -> Any:
    if kind == "double":
        return float(value)
    if kind == "string" and not isinstance(value, str):
        return json.dumps(value, separators=(",", ":"))
    return value


def merge_kinds(kinds: set[str]) -> str:
    """The column kind for a new field seen with these kinds in one run."""
    if len(kinds) == 1:
        return next(iter(kinds))
    return "double" if kinds <= {"long", "double"} else "string"


@dataclass(frozen=True)
class DiscoverTask:
    read: ReadTask
    index: int


@dataclass
class Discovered:
    """Top-level JSON fields seen by a task, with the kinds of their non-null values, and the
    first sequence each (field, kind) was seen at."""

    index: int
    kinds: dict[str, dict[str, int]] = field(default_factory=dict)
    error: str = ""


def discover_task(task: DiscoverTask) -> Discovered:
    out = Discovered(task.index)
    try:
        for batch in read_task(task.read, on_problem=lambda _: None):
            for seq, payload in zip(
                batch.column("seq").to_pylist(), batch.column("data").to_pylist(), strict=True
            ):
                for name, value in (json_object(payload) or {}).items():
                    kind = kind_of(value)
                    if kind is not None:
                        seen = out.kinds.setdefault(name, {})
                        seen[kind] = min(seen.get(kind, seq), seq)
    except Exception as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    return out


def merge_discovered(results: list[Discovered]) -> dict[str, dict[str, int]]:
    merged: dict[str, dict[str, int]] = {}
    for result in results:
        for name, kinds in result.kinds.items():
            seen = merged.setdefault(name, {})
            for kind, seq in kinds.items():
                seen[kind] = min(seen.get(kind, seq), seq)
    return merged


def iter_write_tasks(
    reads: list[ReadTask], metadata: TableMetadata, io: tuple[tuple[str, str], ...], run: str
) -> Iterator[WriteTask]:
    for i, read in enumerate(reads):
        yield WriteTask(read, metadata, io, run, i)
