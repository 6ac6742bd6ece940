"""Schema evolution for the JSON projection: fields seen for the first time become columns of the
`json` struct before a run writes anything. A field whose values change kind later keeps its
column; the writers store those values as null and report them (`writing.TypeConflict`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infinistream.pipeline.tables.schema import JSON_COLUMN, iceberg_type, json_columns
from infinistream.pipeline.tables.writing import merge_kinds

if TYPE_CHECKING:
    from pyiceberg.table import Table


def new_json_fields(table: Table, seen: dict[str, dict[str, int]]) -> dict[str, str]:
    """The fields seen that the table has no column for, with the kind each column gets."""
    known = json_columns(table.schema())
    return {
        name: merge_kinds(set(kinds)) for name, kinds in sorted(seen.items()) if name not in known
    }


def evolve_json(table: Table, seen: dict[str, dict[str, int]]) -> list[str]:
    """Add a column for every new field (one schema update); their names, as `json.name kind`."""
    from pyiceberg.types import NestedField, StructType

    fresh = new_json_fields(table, seen)
    if not fresh:
        return []
    with table.update_schema() as update:
        if JSON_COLUMN not in table.schema().column_names:
            # Ids are placeholders: the update gives the struct and its fields fresh ones.
            fields = [
                NestedField(i + 1, name, iceberg_type(kind), required=False)
                for i, (name, kind) in enumerate(fresh.items())
            ]
            update.add_column(JSON_COLUMN, StructType(*fields))
        else:
            for name, kind in fresh.items():
                update.add_column((JSON_COLUMN, name), iceberg_type(kind))
    return [f"{JSON_COLUMN}.{name} {kind}" for name, kind in fresh.items()]
