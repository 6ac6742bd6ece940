"""`forget_deleted`: values deleted or overwritten leave the store's files and history (what a
GDPR erase asks of the metadata store), while every current value stays as it was."""

from __future__ import annotations

import base64
import urllib.error
from pathlib import Path

import pytest

from infinistream.metadata import Delete, MetadataStore, Put, open_metadata
from support.etcdserver import EtcdServer

MARKER = b"ForgetMe9c2e"


async def _write_and_remove(store: MetadataStore) -> int:
    """A value overwritten and one deleted, both holding the marker; the revision between."""
    await store.txn([], [Put("g/kept", b"v1 " + MARKER), Put("g/gone", b"x " + MARKER)])
    for i in range(50):  # enough churn that the old pages are not simply reused
        await store.txn([], [Put(f"g/other/{i:03d}", b"filler %d" % i * 20)])
    before = await store.revision()
    await store.txn([], [Put("g/kept", b"v2"), Delete("g/gone")])
    return before


async def _current(store: MetadataStore) -> dict[str, bytes]:
    return {item.key: item.value for item in await store.range("g/")}


def _files_with_marker(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and MARKER in p.read_bytes()]


async def test_sqlite_files_hold_no_deleted_value(tmp_path: Path) -> None:

    store = open_metadata(f"sqlite://{tmp_path / 'meta.db'}")
    other = open_metadata(f"sqlite://{tmp_path / 'meta.db'}")  # another agent, reading
    try:
        await _write_and_remove(store)
        await other.get("g/kept")
        expected = await _current(store)
        assert _files_with_marker(tmp_path), "the scan sees what SQLite keeps of old values"
        await store.forget_deleted()
        assert _files_with_marker(tmp_path) == []
        assert await _current(store) == await _current(other) == expected
        assert expected["g/kept"] == b"v2" and "g/gone" not in expected
        # And it goes on working, for both handles.
        await other.txn([], [Put("g/after", b"1")])
        assert (await store.get("g/after")) is not None
    finally:
        await store.close()
        await other.close()


async def test_in_memory_sqlite_has_nothing_to_forget() -> None:

    store = open_metadata("sqlite://:memory:")
    try:
        await _write_and_remove(store)
        await store.forget_deleted()
        assert (await store.get("g/kept")) is not None
    finally:
        await store.close()


@pytest.fixture
def etcd(tmp_path: Path) -> EtcdServer:
    server = EtcdServer(tmp_path / "etcd")
    server.start()
    return server


async def test_etcd_history_and_backend_file_hold_no_deleted_value(etcd: EtcdServer) -> None:

    store = open_metadata(etcd.url)
    try:
        old = await _write_and_remove(store)
        expected = await _current(store)
        key = base64.b64encode(b"g/gone").decode()
        # Before: the history still serves the deleted value.
        was = etcd.call("/v3/kv/range", {"key": key, "revision": old})
        assert MARKER in base64.b64decode(was["kvs"][0]["value"])
        await store.forget_deleted()
        with pytest.raises(urllib.error.HTTPError):  # "required revision has been compacted"
            etcd.call("/v3/kv/range", {"key": key, "revision": old})
        assert await _current(store) == expected
        # The backend file, defragmented, holds only current values. (etcd's raft WAL keeps
        # its entries until a snapshot: see docs/security.md, "Erase (GDPR)".)
        (db,) = etcd.directory.rglob("snap/db")
        assert MARKER not in db.read_bytes()
        await store.forget_deleted()  # again: nothing left to compact is not an error
    finally:
        await store.close()
        etcd.close()
