"""How jobs reach the stores: `StoreOptions.open()` and the check that the stores exist."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from infinistream.metadata import MetadataError, Put
from infinistream.pipeline.options import StoreError, StoreOptions, add_store_arguments
from infinistream.settings import add_serve_arguments, settings_from_args
from support.storeinspect import object_bytes


def sqlite_url(path: Path) -> str:
    return "sqlite:///" + str(path).lstrip("/")


async def test_missing_local_stores_are_named_and_not_created(tmp_path: Path) -> None:
    nowhere = tmp_path / "nowhere"
    options = StoreOptions(objects=(nowhere / "objects").as_uri(), metadata="sqlite://:memory:")
    with pytest.raises(StoreError) as info:
        await options.check_exist()
    assert str(info.value) == (
        f"object store {nowhere.as_uri()}/objects does not exist "
        f"(directory {nowhere / 'objects'} does not exist)"
    )
    # A bare path is a local store too.
    with pytest.raises(StoreError, match=f"directory {nowhere} does not exist"):
        await StoreOptions(objects=str(nowhere), metadata="sqlite://:memory:").check_exist()

    options = StoreOptions(objects=tmp_path.as_uri(), metadata=sqlite_url(nowhere / "meta.db"))
    with pytest.raises(StoreError) as info:
        await options.check_exist()
    assert str(info.value) == (
        f"metadata store {options.metadata} does not exist "
        f"(file {nowhere / 'meta.db'} does not exist)"
    )
    assert not nowhere.exists()


async def test_stores_that_exist_or_live_elsewhere_pass(tmp_path: Path) -> None:
    db = tmp_path / "meta.db"
    async with StoreOptions(objects=tmp_path.as_uri(), metadata=sqlite_url(db)).open() as stores:
        await stores.meta.txn([], [Put("k", b"v")])
    await StoreOptions(objects=tmp_path.as_uri(), metadata=sqlite_url(db)).check_exist()
    # Not local: looked for on first use, not here.
    await StoreOptions(objects="s3://bucket/p", metadata="etcd://127.0.0.1:1").check_exist()
    await StoreOptions(objects="memory://", metadata="sqlite://:memory:").check_exist()


async def test_stores_open_when_first_used_and_close_after(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    options = StoreOptions(objects=objects.as_uri(), metadata=sqlite_url(tmp_path / "meta.db"))
    async with options.open() as stores:
        assert await stores.meta.get("k") is None
    assert not objects.exists(), "a driver that reads only metadata makes no object directory"
    with pytest.raises(MetadataError, match="closed"):
        await stores.meta.get("k")
    async with options.open() as stores:
        await stores.objects.put("a/b", b"x")
        assert stores.objects is stores.objects
    assert object_bytes(objects, "a/b") == b"x"


async def test_stores_that_cannot_be_opened_are_named() -> None:
    async with StoreOptions(objects="memory://", metadata="nosuch://x").open() as stores:
        with pytest.raises(StoreError, match="cannot open metadata store nosuch://x: "):
            await stores.meta.get("k")
    async with StoreOptions(objects="ftp://x/y", metadata="sqlite://:memory:").open() as stores:
        with pytest.raises(StoreError, match="cannot open object store ftp://x/y: "):
            await stores.objects.get("k")
    with pytest.raises(StoreError, match="cannot open object store file://host/x: "):
        await StoreOptions(objects="file://host/x", metadata="sqlite://:memory:").check_exist()


def test_the_metadata_store_is_reached_only_within_async_with() -> None:
    # Entering replays what a power loss took from the database (tests/e2e/test_power_loss.py):
    # nothing may read or commit before.
    stores = StoreOptions(objects="memory://", metadata="sqlite://:memory:").open()
    with pytest.raises(RuntimeError, match="async with"):
        stores.meta  # noqa: B018 - the property refuses


def test_jobs_take_the_store_flags_of_serve(tmp_path: Path) -> None:
    serve, job = argparse.ArgumentParser(), argparse.ArgumentParser()
    add_serve_arguments(serve)
    add_store_arguments(job)

    def flags(parser: argparse.ArgumentParser) -> dict[tuple[str, ...], tuple[str, str | None]]:
        return {tuple(a.option_strings): (a.dest, a.help) for a in parser._actions}

    own = {("-h", "--help"), ("--account",), ("--master",)}
    store = {k: v for k, v in flags(job).items() if k not in own}
    assert store and store.items() <= flags(serve).items()
    (tmp_path / "key").write_text("k" * 32)
    argv = ["-sd", str(tmp_path), "--group", "g", "--objects", "memory://"]
    argv += ["--cipher", "aes", "--key-file", str(tmp_path / "key")]
    from_serve = StoreOptions.from_settings(settings_from_args(serve.parse_args(argv)))
    assert StoreOptions.from_args(job.parse_args(argv)) == from_serve
