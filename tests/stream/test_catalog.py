"""The catalog follows the chain of catalog markers: one change since it last looked costs a
read of that stream's record, not a listing of every stream."""

from __future__ import annotations

from pathlib import Path

from infinistream.jetstream.api import StreamConfig
from infinistream.metadata import Compare, Delete, Put, SqliteMetadataStore
from infinistream.stream import records
from infinistream.stream.catalog import Catalog, StreamEntry
from infinistream.stream.records import (
    StreamRecord,
    catalog_change,
    catalog_key,
    parse_catalog_change,
    streams_prefix,
)


class CountingStore(SqliteMetadataStore):
    """A real SQLite store that counts its range reads (the listings)."""

    ranges = 0

    async def range(self, prefix: str, **kwargs: object) -> list:  # type: ignore[override]
        self.ranges += 1
        return await super().range(prefix, **kwargs)  # type: ignore[arg-type]


async def change(meta: SqliteMetadataStore, name: str, *, delete: bool = False) -> None:
    """What StreamApi does to the catalog: the record and the marker, compared, in one txn."""
    marker = await meta.get(catalog_key("g"))
    previous = marker.mod_revision if marker else 0
    key = streams_prefix("g") + name
    record = StreamRecord(
        config=StreamConfig(name=name, subjects=[f"{name}.>"]), created_ns=1, uid=name
    )
    op = Delete(key) if delete else Put(key, records.encode(record))
    result = await meta.txn(
        [Compare(catalog_key("g"), previous)],
        [op, Put(catalog_key("g"), catalog_change(previous, name))],
    )
    assert result.succeeded


async def test_one_change_reads_one_record_and_a_gap_lists_them_all(tmp_path: Path) -> None:
    writer = SqliteMetadataStore(tmp_path / "meta.db")
    reader = CountingStore(tmp_path / "meta.db")
    catalog = Catalog(reader, "g")
    try:
        await change(writer, "A")
        await catalog.refresh()
        assert set(catalog.streams) == {"A"}
        listed = reader.ranges

        await change(writer, "B")  # one change: followed along the chain
        assert await catalog.refresh()
        assert set(catalog.streams) == {"A", "B"}
        assert catalog.stream_for_subject("B.x") == "B"
        await change(writer, "A", delete=True)
        assert await catalog.refresh()
        assert set(catalog.streams) == {"B"}
        assert catalog.stream_for_subject("A.x") is None
        assert reader.ranges == listed

        await change(writer, "C")  # two changes unseen: the chain is broken, list them all
        await change(writer, "D")
        assert await catalog.refresh()
        assert set(catalog.streams) == {"B", "C", "D"}
        assert reader.ranges == listed + 1
    finally:
        await writer.close()
        await reader.close()


def test_marker_values() -> None:
    assert parse_catalog_change(catalog_change(41, "ORDERS")) == (41, "ORDERS")
    # Markers written before the chain (random hex) read as unknown: a full listing.
    assert parse_catalog_change(b"9f86d081884c7d65") is None
    assert parse_catalog_change(b"") is None


async def test_a_selection_is_worked_out_again_only_when_the_catalog_changes(
    tmp_path: Path,
) -> None:
    meta = SqliteMetadataStore(tmp_path / "meta.db")
    catalog = Catalog(meta, "g")
    looked: list[str] = []

    def keep(entry: StreamEntry) -> bool:
        looked.append(entry.name)
        return entry.name.startswith("K")

    try:
        await change(meta, "K1")
        await change(meta, "X1")
        await catalog.refresh()
        assert [e.name for e in catalog.selected("k", keep)] == ["K1"]
        assert [e.name for e in catalog.selected("k", keep)] == ["K1"]
        assert sorted(looked) == ["K1", "X1"]  # once per stream, not once per call
        await change(meta, "K2")
        await catalog.refresh()
        assert sorted(e.name for e in catalog.selected("k", keep)) == ["K1", "K2"]
    finally:
        await meta.close()
