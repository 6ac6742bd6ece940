"""The catalog, opened from a `TableConfig`, and the tables in it, made when first needed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infinistream.pipeline.tables.config import CATALOG_NAME, TableConfig, redact
from infinistream.pipeline.tables.schema import iceberg_schema, partition_spec, table_properties

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table


class CatalogError(Exception):
    """The catalog cannot be reached or refused; the message names it."""


def open_catalog(config: TableConfig) -> Catalog:
    try:
        from pyiceberg.catalog import load_catalog
    except ImportError as exc:
        raise CatalogError(
            "pyiceberg is not installed: pip install 'infinistream[pipeline]'"
        ) from exc
    try:
        return load_catalog(CATALOG_NAME, **config.catalog_properties())
    except Exception as exc:
        raise CatalogError(f"cannot open catalog {redact(config.catalog)}: {exc}") from exc


def table_name(identifier: tuple[str, ...]) -> str:
    return ".".join(identifier)


def load_table(catalog: Catalog, identifier: tuple[str, ...]) -> Table | None:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        return None


def ensure_table(catalog: Catalog, config: TableConfig, identifier: tuple[str, ...]) -> Table:
    """The table, made (and its namespace) if it does not exist yet."""
    from pyiceberg.exceptions import TableAlreadyExistsError

    table = load_table(catalog, identifier)
    if table is not None:
        return table
    catalog.create_namespace_if_not_exists(identifier[:-1])
    schema = iceberg_schema(config)
    try:
        return catalog.create_table(
            identifier,
            schema=schema,
            location=config.table_location(identifier),
            partition_spec=partition_spec(config, schema),
            properties=table_properties(config),
        )
    except TableAlreadyExistsError:
        # Made by someone else in between.
        return catalog.load_table(identifier)
