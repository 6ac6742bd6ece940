"""How a pipeline job, or a Spark executor, reaches the stores: plain, picklable URLs.

A job's driver reaches them through `StoreOptions.open()` (the stores, opened when first used
and closed after), having made sure with `check_exist()` that they are there if it must not
create them; an executor needs only the object store (`open_objects()`), and closes it when its
task is done (`with`): a local store holds a file open for each pack it read, and an executor's
worker process runs task after task.

On the embedded default a power loss may take from the SQLite database the last flush commits,
whose records the packs hold (`stream/recorded.py`). Entering the stores makes those commits
again before the job reads or writes anything, as an agent does when it starts: a job that
committed first would take their revisions, and the replay after it would pass over them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from infinistream.jetstream.accounts import account_group
from infinistream.metadata import MetadataStore, open_metadata
from infinistream.settings import Settings, settings_from_args
from infinistream.settings import add_store_arguments as add_settings_store_arguments
from infinistream.storage import Encryption, ObjectStore, ObjectStoreError
from infinistream.storage.keys import KEY_ENV
from infinistream.storage.objects import local_root
from infinistream.storage.packindex import DEFAULT_BUDGET as DEFAULT_PACK_INDEX
from infinistream.stream.recorded import recover
from infinistream.stream.sealed_index import SealedIndex

# The local stores (database file, object directory) this process has brought up to date with
# their packs' commit records. Once a process suffices: only a power loss loses commits from the
# database again, and it ends this process too.
_recovered: set[tuple[Path, Path]] = set()


class StoreError(Exception):
    """A store that the options name does not exist or cannot be opened (the message says
    which)."""


@dataclass(frozen=True)
class StoreOptions:
    objects: str
    metadata: str
    group: str = "default"
    s3_endpoint: str | None = None
    s3_region: str | None = None
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None
    # Encryption at rest, as the agent's settings have it (keys resolved from file or
    # environment on the driver, and so handed to executors with the job's tasks).
    cipher: str = ""
    key: str | None = field(default=None, repr=False)
    prev_keys: tuple[str, ...] = field(default=(), repr=False)
    key_provider: str = ""

    @classmethod
    def from_settings(cls, settings: Settings) -> StoreOptions:
        return cls(
            objects=settings.objects_url,
            metadata=settings.metadata_url,
            group=settings.group,
            s3_endpoint=settings.s3_endpoint,
            s3_region=settings.s3_region,
            s3_access_key_id=settings.s3_access_key_id,
            s3_secret_access_key=settings.s3_secret_access_key,
            cipher=settings.cipher,
            key=settings.key,
            prev_keys=tuple(settings.prev_keys),
            key_provider=settings.key_provider,
        )

    def encryption(self) -> Encryption | None:
        """What seals the objects a job writes and opens those it reads; None when off."""
        settings = Settings(
            cipher=self.cipher,
            key=self.key,
            prev_keys=list(self.prev_keys),
            key_provider=self.key_provider,
        )
        return settings.encryption()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> StoreOptions:
        settings = settings_from_args(args)
        account = getattr(args, "account", None)
        if account:
            # The account's own group, as the agent maps it: the job reads only its keys and
            # objects.
            settings.group = account_group(settings.group, account)
        return cls.from_settings(settings)

    @classmethod
    def from_mapping(cls, options: dict[str, str]) -> StoreOptions:
        """From Spark data source options: `objects` and `metadata` URLs, or `store_dir`."""
        settings = Settings()
        if "store_dir" in options:
            settings.store_dir = options["store_dir"]
        settings.objects = options.get("objects")
        settings.metadata = options.get("metadata")
        settings.group = options.get("group", "default")
        if options.get("account"):
            settings.group = account_group(settings.group, options["account"])
        # Taken from the driver's environment when not given: executors on other machines
        # have an environment of their own, and get the store only as these options say.
        env = os.environ.get
        settings.s3_endpoint = options.get("s3_endpoint") or env("AWS_ENDPOINT_URL")
        settings.s3_region = options.get("s3_region") or env("AWS_REGION")
        settings.s3_access_key_id = options.get("s3_access_key_id") or env("AWS_ACCESS_KEY_ID")
        settings.s3_secret_access_key = options.get("s3_secret_access_key") or env(
            "AWS_SECRET_ACCESS_KEY"
        )
        settings.cipher = options.get("cipher", "")
        settings.key_provider = options.get("key_provider", "")
        if "key_file" in options:
            with open(options["key_file"]) as f:
                settings.key = f.read()
        elif not settings.key_provider and os.environ.get(KEY_ENV):
            settings.key = os.environ[KEY_ENV]
        if not settings.objects and not settings.metadata and "store_dir" not in options:
            raise ValueError(
                "say where the stream lives: option 'store_dir', or 'objects' and 'metadata'"
            )
        return cls.from_settings(settings)

    def open(self) -> Stores:
        """The stores, for a driver: `async with options.open() as stores: ...`."""
        return Stores(self)

    def open_objects(
        self,
        *,
        timeout: float | None = None,
        retries: int | None = None,
        pack_index: int = DEFAULT_PACK_INDEX,
        packed: bool = True,
    ) -> ObjectStore:
        """The object store alone (an executor's); opening a local one makes its directory.
        `timeout` and `retries` bound one S3 request, `pack_index` what a local one keeps of
        where its objects are, `packed` whether it packs small objects (ObjectStore.from_url)."""
        return ObjectStore.from_url(
            self.objects,
            endpoint=self.s3_endpoint,
            region=self.s3_region,
            access_key_id=self.s3_access_key_id,
            secret_access_key=self.s3_secret_access_key,
            timeout=timeout,
            retries=retries,
            pack_index=pack_index,
            packed=packed,
        )

    def open_metadata(self) -> MetadataStore:
        """The metadata store alone (opening it does no I/O); the caller closes it. With
        encryption on, its index entries are sealed (stream.sealed_index)."""
        return SealedIndex(open_metadata(self.metadata), self.encryption())

    async def check_exist(self) -> None:
        """Refuse stores that are not there rather than create them empty: opening a local
        object store makes its directory, and a metadata store kept in a local file makes the
        file on first use. (An empty metadata store next to a full bucket would make every
        object look unreferenced.) Stores elsewhere are not looked for here: one that does not
        answer fails, named, on first use."""
        try:
            directory = local_root(self.objects)
        except ValueError as exc:
            raise _cannot_open("object store", self.objects, exc) from exc
        if directory is not None and not directory.is_dir():
            raise _missing("object store", self.objects, "directory", directory)
        async with self.open() as stores:
            file = _local_file(stores.meta)
        if file is not None and not file.is_file():
            raise _missing("metadata store", self.metadata, "file", file)


class Stores:
    """The stores that `StoreOptions` name, for a job's driver, each opened when first used (so
    a driver that only reads metadata makes no local object directory). A store that cannot be
    opened raises StoreError. Closing closes the metadata store if it was opened."""

    def __init__(self, options: StoreOptions) -> None:
        self.options = options
        self._meta: MetadataStore | None = None
        self._objects: ObjectStore | None = None
        self._entered = False

    @property
    def meta(self) -> MetadataStore:
        """The metadata store: only within `async with`, whose entry has made again the
        commits a power loss took from it (see the module docstring)."""
        if not self._entered:
            raise RuntimeError("use the stores within `async with options.open() as stores`")
        return self._open_meta()

    def _open_meta(self) -> MetadataStore:
        if self._meta is None:
            try:
                self._meta = self.options.open_metadata()
            except ValueError as exc:
                raise _cannot_open("metadata store", self.options.metadata, exc) from exc
        return self._meta

    @property
    def objects(self) -> ObjectStore:
        if self._objects is None:
            try:
                self._objects = self.options.open_objects()
            except (ObjectStoreError, OSError, ValueError) as exc:
                raise _cannot_open("object store", self.options.objects, exc) from exc
        return self._objects

    async def close(self) -> None:
        if self._meta is not None:
            await self._meta.close()
        if self._objects is not None:
            # A local store seals the pack it was writing (it would at exit otherwise).
            await asyncio.to_thread(self._objects.close)

    async def __aenter__(self) -> Stores:
        await self._recover()
        self._entered = True
        return self

    async def _recover(self) -> None:
        """Make again the commits a power loss took from a local SQLite database, from its
        packs' commit records, and retire those records (`stream.recorded.recover`, as an agent
        does when it starts, under the same locks: the database's write lock and its sync
        barrier). Nothing to do for stores elsewhere, or not there yet (a record is written
        only beside a database that exists)."""
        try:
            root = local_root(self.options.objects)
            file = _local_file(self._open_meta())
        except (ValueError, StoreError):
            return  # said when the store is first used
        if file is None or root is None or (file, root) in _recovered:
            return
        if not file.is_file() or not root.is_dir():
            return
        try:
            await recover(self._open_meta(), self.objects)
        except BaseException:
            await self.close()
            raise
        _recovered.add((file, root))

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _local_file(meta: MetadataStore) -> Path | None:
    """The file a metadata store keeps its data in, if it is one on this machine (its `path`,
    absolute: an in-memory store has none)."""
    path = getattr(meta, "path", None)
    return Path(path) if isinstance(path, str) and os.path.isabs(path) else None


def _missing(what: str, url: str, kind: str, path: Path) -> StoreError:
    return StoreError(f"{what} {url} does not exist ({kind} {path} does not exist)")


def _cannot_open(what: str, url: str, exc: Exception) -> StoreError:
    return StoreError(f"cannot open {what} {url}: {exc}")


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """The store flags of `infinistream serve`, and which account's streams a job reads and
    where Spark runs, for pipeline commands."""
    add_settings_store_arguments(parser)
    add = parser.add_argument
    add(
        "--account",
        dest="account",
        help="Account (tenant) of the config whose streams the job reads: its virtual group",
    )
    add("--master", dest="master", default="local[*]", help="Spark master (default: local[*])")
