"""The tables' columns, partitioning and properties, and the Arrow form executors write.

    stream   string       the stream (an account's table holds many)
    subject  string
    seq      long         the stream sequence
    time     timestamptz  when the agent stored the message (microseconds, UTC)
    headers  map<string, list<string>>   each header name with its values in order; null when
                                         the message has none
    payload  binary
    subject_prefix  string   the first N subject tokens, where the table is partitioned by them
    json     struct<...>     with the JSON projection: a payload's top-level fields, typed

Partitioned by day(time), and by subject_prefix where configured. A table's layout is fixed
when it is created and kept in its properties (`infinistream.*`), so later runs write what the
table was made for whatever their flags say.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from infinistream.pipeline.tables.config import TableConfig

if TYPE_CHECKING:
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema

# Table properties: what a table was created for.
PROP_SUBJECT_TOKENS = "infinistream.subject-tokens"
PROP_JSON = "infinistream.json"
PROP_LAYOUT = "infinistream.layout"

SUBJECT_PREFIX = "subject_prefix"
JSON_COLUMN = "json"
TARGET_FILE_BYTES = 128 * 1024 * 1024

# JSON value kinds and the Iceberg types they become. A nested object or array is kept as its
# JSON text.
JSON_TYPES = ("boolean", "long", "double", "string")


def table_properties(config: TableConfig) -> dict[str, str]:
    return {
        PROP_LAYOUT: config.layout,
        PROP_SUBJECT_TOKENS: str(config.subject_tokens),
        PROP_JSON: "true" if config.json else "false",
        # The job retries a conflicting commit itself, after checking that the table's
        # progress is still what its run started from: pyiceberg must not re-apply an append
        # blindly on top of someone else's.
        "commit.retry.num-retries": "0",
        "write.parquet.compression-codec": "zstd",
        "write.target-file-size-bytes": str(TARGET_FILE_BYTES),
        # Column bounds in manifests are copies of the data: none for payloads and headers.
        "write.metadata.metrics.default": "truncate(16)",
        "write.metadata.metrics.column.payload": "none",
        "write.metadata.metrics.column.headers": "none",
        # Old metadata files go as new ones are written, a few kept for readers in flight.
        "write.metadata.delete-after-commit.enabled": "true",
        "write.metadata.previous-versions-max": "8",
    }


def subject_tokens_of(properties: dict[str, str]) -> int:
    return int(properties.get(PROP_SUBJECT_TOKENS, "0") or 0)


def iceberg_schema(config: TableConfig) -> Schema:
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BinaryType,
        ListType,
        LongType,
        MapType,
        NestedField,
        StringType,
        TimestamptzType,
    )

    fields = [
        NestedField(1, "stream", StringType(), required=True),
        NestedField(2, "subject", StringType(), required=True),
        NestedField(3, "seq", LongType(), required=True),
        NestedField(4, "time", TimestamptzType(), required=True),
        NestedField(
            5,
            "headers",
            MapType(6, StringType(), 7, ListType(8, StringType(), element_required=False), False),
            required=False,
        ),
        NestedField(9, "payload", BinaryType(), required=False),
    ]
    if config.subject_tokens:
        fields.append(NestedField(10, SUBJECT_PREFIX, StringType(), required=False))
    return Schema(*fields)


def partition_spec(config: TableConfig, schema: Schema) -> PartitionSpec:
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import DayTransform, IdentityTransform

    fields = [
        PartitionField(
            source_id=schema.find_field("time").field_id,
            field_id=1000,
            transform=DayTransform(),
            name="day",
        )
    ]
    if config.subject_tokens:
        fields.append(
            PartitionField(
                source_id=schema.find_field(SUBJECT_PREFIX).field_id,
                field_id=1001,
                transform=IdentityTransform(),
                name=SUBJECT_PREFIX,
            )
        )
    return PartitionSpec(*fields)


def iceberg_type(kind: str) -> Any:
    from pyiceberg.types import BooleanType, DoubleType, LongType, StringType

    return {"boolean": BooleanType(), "long": LongType(), "double": DoubleType()}.get(
        kind, StringType()
    )


def kind_of_type(iceberg: Any) -> str:
    """The JSON kind an Iceberg column of the `json` struct holds."""
    kinds = {"boolean": "boolean", "long": "long", "int": "long", "double": "double"}
    return kinds.get(str(iceberg), "double" if str(iceberg) == "float" else "string")


def json_columns(schema: Schema) -> dict[str, str]:
    """The `json` struct's fields and their kinds, as the table has them."""
    from pyiceberg.types import StructType

    try:
        column = schema.find_field(JSON_COLUMN)
    except ValueError:
        return {}
    if not isinstance(column.field_type, StructType):
        return {}
    return {f.name: kind_of_type(f.field_type) for f in column.field_type.fields}
