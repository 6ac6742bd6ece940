"""An agent's commit records: retired in the background as they pile up, and at start after
the replay, once the database is durably past them."""

from __future__ import annotations

from pathlib import Path

from infinistream.metadata import SqliteMetadataStore
from infinistream.metadata.kv import Put
from infinistream.storage import ObjectStore
from infinistream.storage.packcommits import commit_records
from infinistream.stream.recorded import Retirer, recover


async def _flush(meta: SqliteMetadataStore, objects: ObjectStore, n: int, retirer: Retirer) -> int:
    """A flush as the write buffer makes it: object staged, commit recorded, one sync."""
    key = f"g/l0/o{n}"
    staged = objects.stage_parts(key, [b"object %d" % n])
    assert staged is not None
    made = await meta.txn_recorded([], [Put(f"g/k{n}", b"subject.%d" % n)])
    assert made.result is not None and made.record is not None
    objects.complete(key, staged, made.record, made.result.revision)
    meta.recorded_done(durable=True)
    retirer.written()
    return made.result.revision


async def test_records_are_retired_in_the_background_every_so_many(tmp_path: Path) -> None:
    meta = SqliteMetadataStore(tmp_path / "meta.db")
    objects = ObjectStore.from_url((tmp_path / "objects").as_uri())
    retirer = Retirer(meta, objects, every=3)
    try:
        await meta.txn([], [Put("g/start", b"")])  # the store's own last commit
        for n in range(2):
            await _flush(meta, objects, n, retirer)
        await retirer.close()
        assert len(list(commit_records(str(tmp_path / "objects")))) == 2
        last = await _flush(meta, objects, 2, retirer)  # the third: a retirement starts
        await retirer.close()
        assert list(commit_records(str(tmp_path / "objects"))) == []
        assert await meta.revision() == last
        for n in range(3):
            assert await objects.get(f"g/l0/o{n}") == b"object %d" % n
    finally:
        await retirer.close()
        objects.close()
        await meta.close()


async def test_recovery_replays_then_retires_every_record(tmp_path: Path) -> None:
    meta = SqliteMetadataStore(tmp_path / "meta.db")
    objects = ObjectStore.from_url((tmp_path / "objects").as_uri())
    retirer = Retirer(meta, objects, every=100)
    try:
        await meta.txn([], [Put("g/start", b"")])
        revisions = [await _flush(meta, objects, n, retirer) for n in range(4)]
        assert await recover(meta, objects) == 4
        assert list(commit_records(str(tmp_path / "objects"))) == []
        assert await meta.revision() == revisions[-1]
        assert await recover(meta, objects) == 0
    finally:
        objects.close()
        await meta.close()
