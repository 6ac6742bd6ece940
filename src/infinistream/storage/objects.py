"""One small async API over object storage: local directories, S3-compatible services, memory.

Built on obstore, which does the HTTP, signing, retries and local file I/O in Rust. This module
adds what the rest of InfiniStream relies on:

* write-once puts (invariant 3): every put is a conditional create, so an existing object is
  never overwritten; a collision raises :class:`ObjectExistsError`;
* durability on local disks: a local directory is served by `localstore` (pack files, one
  ``fdatasync`` per put, shared by the puts in flight), not by obstore's LocalStore, which never
  fsyncs; ``put`` returns once the object is durable, and the caller commits metadata only
  after that;
* one error vocabulary (:class:`ObjectNotFoundError`, :class:`ObjectExistsError`,
  :class:`ObjectStoreError`) whose messages name the store URL and the key;
* request and byte counters (:class:`StoreStats`) for the cost model.

Keys are ``/``-separated relative paths (``group/stream/...``; invariant 6 is the caller's
job). Listing works on whole path segments: prefix ``a/b`` matches ``a/b/c`` but not ``a/bc``.
"""

from __future__ import annotations

import asyncio
import os
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import obstore
from obstore.exceptions import AlreadyExistsError, BaseError, PreconditionError
from obstore.store import MemoryStore, S3Store

from .localstore import INLINE_BYTES, ExistsError, Listed, LocalObjects
from .packindex import DEFAULT_BUDGET as DEFAULT_PACK_INDEX
from .packwriter import DEFAULT_MAX_PACKED, Staged

if TYPE_CHECKING:
    from obstore import GetOptions, ObjectMeta

__all__ = [
    "DEFAULT_COALESCE",
    "ObjectExistsError",
    "ObjectInfo",
    "ObjectNotFoundError",
    "ObjectStore",
    "ObjectStoreError",
    "StoreStats",
    "check_key",
    "join_key",
    "local_root",
]

DEFAULT_COALESCE = 64 * 1024
"""``get_ranges`` merges ranges closer than this into one GET: a request costs more than a
few KiB of extra transfer."""

_LIST_PAGE = 1000  # S3 ListObjectsV2 page size: one LIST request per page
# A local read up to this many bytes runs on the caller's thread (a pread from the page cache
# costs microseconds); a larger one on a worker thread.
_DIRECT_READ = 512 * 1024
_BAD_KEY_CHARS = frozenset("\\#") | frozenset(chr(c) for c in range(32)) | {"\x7f"}


class ObjectStoreError(Exception):
    """A request to the object store failed."""

    def __init__(self, message: str, *, url: str = "", key: str | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.key = key


class ObjectNotFoundError(ObjectStoreError):
    """The object does not exist."""

    def __init__(self, key: str, *, url: str = "") -> None:
        super().__init__(f"object {key!r} not found in {url}", url=url, key=key)


class ObjectExistsError(ObjectStoreError):
    """A put found an object already at the key: objects are write-once."""

    def __init__(self, key: str, *, url: str = "") -> None:
        super().__init__(
            f"object {key!r} already exists in {url} (objects are write-once)", url=url, key=key
        )


class ObjectInfo(msgspec.Struct, frozen=True):
    key: str
    size: int
    last_modified: datetime


@dataclass
class StoreStats:
    """Requests issued (successful or not) and payload bytes moved."""

    puts: int = 0
    gets: int = 0
    heads: int = 0
    lists: int = 0
    deletes: int = 0
    bytes_put: int = 0
    bytes_got: int = 0

    def snapshot(self) -> StoreStats:
        return replace(self)

    def __sub__(self, other: StoreStats) -> StoreStats:
        return StoreStats(
            **{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)}
        )


def check_key(key: str, *, allow_empty: bool = False) -> str:
    """Validate an object key (or list prefix) and return it.

    Rejected: empty keys, leading/trailing or doubled ``/``, ``.``/``..`` segments, control
    characters, ``\\`` and ``#`` (obstore's local store uses ``key#N`` for staging files).
    """
    if not key:
        if allow_empty:
            return key
        raise ValueError("object key is empty")
    segments = key.split("/")
    if any(s in ("", ".", "..") for s in segments):
        raise ValueError(f"invalid object key {key!r}: empty, '.' or '..' path segment")
    if not _BAD_KEY_CHARS.isdisjoint(key):
        raise ValueError(f"invalid object key {key!r}: control character, '\\' or '#'")
    return key


def join_key(*segments: str) -> str:
    """Join path segments into a key, validating that none contains a ``/``."""
    for s in segments:
        if "/" in s:
            raise ValueError(f"key segment {s!r} contains '/'")
    return check_key("/".join(segments))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _fsync_fd_path(path: Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)


class ObjectStore:
    """Async, write-once object store with counters; see the module docstring."""

    def __init__(self, backend: Any, url: str, *, local: LocalObjects | None = None) -> None:
        self._backend = backend
        self._url = url
        # A local directory: served by localstore, not by an obstore backend.
        self._local = local
        self.stats = StoreStats()

    # --- construction ----------------------------------------------------------------------

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        endpoint: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        allow_http: bool = True,
        timeout: float | None = None,
        retries: int | None = None,
        pack_index: int = DEFAULT_PACK_INDEX,
        packed: bool = True,
    ) -> ObjectStore:
        """Open ``file:///abs/dir``, ``s3://bucket[/prefix]`` or ``memory://``.

        For S3, options not given here come from the usual environment variables
        (``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``, ...). A custom endpoint
        (MinIO, moto, ...) is addressed path-style. ``memory://`` is a new, private store on
        every call. A bare absolute path is taken as a ``file://`` URL.

        ``timeout`` bounds one S3 request in seconds (obstore's default: 30), ``retries`` how
        many times a failed one is tried again (default 10, with backoff); together they bound
        how long a publish waits for a store that does not answer before it is refused.
        ``pack_index`` is a local directory's budget for where its objects are (packindex).
        ``packed=False`` writes each object of a local directory to a file of its own: for a
        writer that writes a few large objects and is gone (a Spark task), whose pack would
        hold one object each, and cost every reader of the directory a file to open.
        """
        if url.startswith("/"):
            url = Path(url).as_uri()
        parts = urllib.parse.urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme == "file":
            return cls._local_from_url(parts, pack_index, packed)
        if scheme == "memory":
            return cls(MemoryStore(), "memory://")
        if scheme in ("s3", "s3a"):
            return cls._s3_from_url(
                parts,
                endpoint=endpoint,
                region=region,
                access_key_id=access_key_id,
                secret_access_key=secret_access_key,
                allow_http=allow_http,
                timeout=timeout,
                retries=retries,
            )
        raise ValueError(f"unsupported object store URL {url!r} (use file://, s3:// or memory://)")

    @classmethod
    def _local_from_url(
        cls, parts: urllib.parse.SplitResult, pack_index: int, packed: bool
    ) -> ObjectStore:
        root = _local_root(parts)
        missing = [p for p in (root, *root.parents) if not p.exists()]
        root.mkdir(parents=True, exist_ok=True)
        for p in missing:  # make the new directory chain itself durable
            _fsync_fd_path(p.parent, _DIR_FLAGS)
        local = LocalObjects(
            str(root), index_budget=pack_index, max_packed=DEFAULT_MAX_PACKED if packed else -1
        )
        return cls(None, root.as_uri(), local=local)

    @classmethod
    def _s3_from_url(
        cls,
        parts: urllib.parse.SplitResult,
        *,
        endpoint: str | None,
        region: str | None,
        access_key_id: str | None,
        secret_access_key: str | None,
        allow_http: bool,
        timeout: float | None,
        retries: int | None,
    ) -> ObjectStore:
        bucket = parts.netloc
        if not bucket:
            raise ValueError("s3 URL needs a bucket: s3://bucket[/prefix]")
        prefix = parts.path.strip("/")
        if prefix:
            check_key(prefix)
        config: dict[str, Any] = {}
        if endpoint is not None:
            config["endpoint"] = endpoint
            # Custom endpoints (MinIO, moto, Ceph) rarely have per-bucket DNS names.
            config["virtual_hosted_style_request"] = False
        if region is not None:
            config["region"] = region
        if access_key_id is not None:
            config["access_key_id"] = access_key_id
        if secret_access_key is not None:
            config["secret_access_key"] = secret_access_key
        client: dict[str, Any] = {"allow_http": allow_http}
        if timeout is not None:
            client["timeout"] = timedelta(seconds=timeout)
            client["connect_timeout"] = timedelta(seconds=min(timeout, 5.0))
        retry: dict[str, Any] = {}
        if retries is not None:
            retry["max_retries"] = retries
        try:
            backend = S3Store(
                bucket,
                prefix=prefix or None,
                config=config,  # type: ignore[arg-type]  # TypedDict built incrementally
                client_options=client,  # type: ignore[arg-type]
                retry_config=retry or None,  # type: ignore[arg-type]
            )
        except (BaseError, ValueError) as e:
            raise ObjectStoreError(
                f"cannot configure S3 store s3://{bucket}/{prefix}: {_first_line(e)}"
            ) from e
        url = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        return cls(backend, url)

    # --- properties ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return self._url

    @property
    def backend(self) -> Any:
        """The underlying obstore store (None for a local directory)."""
        return self._backend

    @property
    def local(self) -> LocalObjects | None:
        """The local directory's store, if this is one."""
        return self._local

    def writes_inline(self, nbytes: int) -> bool:
        """Whether a put of `nbytes` is made on the caller's thread (a small one on a local
        directory): the caller's thread then waits on the disk, not on the event loop."""
        return self._local is not None and nbytes <= INLINE_BYTES

    def close(self) -> None:
        """Seal what a local store is writing and release its files (nothing to do for the
        others). Puts in flight finish first; the store takes no more."""
        if self._local is not None:
            self._local.close()

    def __enter__(self) -> ObjectStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ObjectStore({self._url!r})"

    def _error(self, op: str, key: str, exc: Exception) -> ObjectStoreError:
        if isinstance(exc, FileNotFoundError):
            return ObjectNotFoundError(key, url=self._url)
        if op == "put" and isinstance(exc, AlreadyExistsError | PreconditionError | ExistsError):
            return ObjectExistsError(key, url=self._url)
        return ObjectStoreError(
            f"{op} {key!r} in {self._url} failed: {type(exc).__name__}: {_first_line(exc)}",
            url=self._url,
            key=key,
        )

    # --- writes ----------------------------------------------------------------------------

    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Create the object; never overwrite one (raises :class:`ObjectExistsError`).

        On return the object is durable: S3 acknowledges only stored objects, and a local
        file has been fsynced together with its directory.

        A PUT whose response is lost and that obstore retries can find its own first attempt
        and raise :class:`ObjectExistsError`: the caller then fails the batch (no ack without a
        commit) and the unreferenced object is left for the janitor.
        """
        check_key(key)
        nbytes = data.nbytes if isinstance(data, memoryview) else len(data)
        self.stats.puts += 1
        try:
            if self._local is not None:
                await self._local.put(key, data)
            else:
                await obstore.put_async(self._backend, key, data, mode="create")
        except (BaseError, OSError, ValueError, ExistsError) as e:
            raise self._error("put", key, e) from e
        self.stats.bytes_put += nbytes

    async def put_parts(self, key: str, parts: list[bytes], *, fresh: bool = False) -> None:
        """`put` of the concatenation of `parts`: a local store writes them as they are
        (one copy of the object fewer), another gets them joined. `fresh` as for
        `stage_parts`."""
        if self._local is None:
            await self.put(key, b"".join(parts))
            return
        check_key(key)
        nbytes = sum(map(len, parts))
        self.stats.puts += 1
        try:
            await self._local.put(key, parts, fresh=fresh)
        except (OSError, ExistsError) as e:
            raise self._error("put", key, e) from e
        self.stats.bytes_put += nbytes

    def stage_parts(self, key: str, parts: list[bytes], *, fresh: bool = False) -> Staged | None:
        """On a local directory, append the object to its pack on the caller's thread
        without making it durable: `complete` does, together with the commit record that
        refers to it. None (nothing written) where the object must be `put_parts` instead.
        `fresh`: the caller made `key` unique to this store (`PackWriter.stage`)."""
        if self._local is None:
            return None
        check_key(key)
        try:
            staged = self._local.stage(key, parts, fresh=fresh)
        except (OSError, ExistsError) as e:
            raise self._error("put", key, e) from e
        if staged is not None:
            self.stats.puts += 1
            self.stats.bytes_put += sum(map(len, parts))
        return staged

    def complete(self, key: str, staged: Staged, record: bytes | None, revision: int = 0) -> None:
        """Make the staged object `key` durable, with `record` (of the commit that took
        `revision`) after it: one fdatasync."""
        assert self._local is not None
        try:
            self._local.complete(staged, record, revision)
        except OSError as e:
            raise self._error("put", key, e) from e

    def commit_records(self) -> list[bytes]:
        """The commit records a local directory's packs carry (none elsewhere)."""
        return [] if self._local is None else list(self._local.commit_records())

    def retire_commit_records(self, needless: Callable[[bytes], bool]) -> int:
        """Retire the commit records of a local directory's packs that `needless` says the
        metadata store needs no more; how many (none elsewhere). Their bytes are off the disk
        on return."""
        return 0 if self._local is None else self._local.retire_commit_records(needless)

    def retire_own_records(self, settled: int) -> int:
        """Retire the commit records this store wrote for commits at or below revision
        `settled` (durable in the metadata store now); how many."""
        return 0 if self._local is None else self._local.retire_own_records(settled)

    async def probe_write_once(self, key: str) -> bool:
        """Check that the backend refuses to overwrite: create ``key`` twice, then delete it.

        S3-compatible services that ignore ``If-None-Match: *`` would silently overwrite; an
        agent can call this once at startup (2 PUTs + 1 DELETE) and refuse such a store.
        Object keys are unique per flush anyway, so this guards against bugs, not by design.
        """
        await self.put(key, b"write-once probe 1")
        try:
            await self.put(key, b"write-once probe 2")
        except ObjectExistsError:
            return await self.get(key) == b"write-once probe 1"
        finally:
            await self.delete(key)
        return False

    async def delete(self, key: str) -> None:
        """Delete the object. Deleting a missing object is not an error (as on S3), so the
        janitor can retry freely."""
        check_key(key)
        self.stats.deletes += 1
        if self._local is not None:
            try:
                await asyncio.to_thread(self._local.delete, key)
            except OSError as e:
                raise self._error("delete", key, e) from e
            return
        try:
            await obstore.delete_async(self._backend, key)
        except FileNotFoundError:
            return
        except (BaseError, OSError, ValueError) as e:
            raise self._error("delete", key, e) from e

    # --- reads -----------------------------------------------------------------------------

    async def get(self, key: str) -> bytes:
        check_key(key)
        self.stats.gets += 1
        try:
            if self._local is not None:
                data, _ = await asyncio.to_thread(self._local.read, key)
            else:
                result = await obstore.get_async(self._backend, key)
                data = bytes(await result.bytes_async())
        except (BaseError, OSError, ValueError) as e:
            raise self._error("get", key, e) from e
        self.stats.bytes_got += len(data)
        return data

    async def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` with one ranged GET. A range reaching past the end of the
        object is an error, not a short read: callers compute ranges from metadata."""
        check_key(key)
        if start < 0 or end < start:
            raise ValueError(f"invalid range [{start}, {end})")
        if start == end:
            return b""
        self.stats.gets += 1
        try:
            if self._local is not None:
                data, _ = await self._local_read(key, start, end)
            else:
                data = bytes(
                    await obstore.get_range_async(self._backend, key, start=start, end=end)
                )
        except (BaseError, OSError, ValueError) as e:
            raise self._error("get_range", key, e) from e
        self.stats.bytes_got += len(data)
        if len(data) != end - start:
            raise ObjectStoreError(
                f"get_range {key!r} in {self._url}: asked for [{start}, {end}), object ends "
                f"at {start + len(data)}",
                url=self._url,
                key=key,
            )
        return data

    async def get_block(self, key: str, start: int, length: int) -> tuple[bytes, int]:
        """Bytes ``[start, start + length)`` cut at the object's end, and the object's size, with
        one GET: how the zone cache reads an aligned block of an object whose size it does not
        know (a whole L0 object when the block is larger than it)."""
        check_key(key)
        if start < 0 or length <= 0:
            raise ValueError(f"invalid block [{start}, {start}+{length})")
        return await self._get_sized("get_block", key, {"range": (start, start + length)})

    async def get_suffix(self, key: str, length: int) -> tuple[bytes, int]:
        """The last ``length`` bytes (or the whole object if smaller) and the object's size,
        with one GET: how a reader finds a TOC without knowing the size."""
        check_key(key)
        if length <= 0:
            raise ValueError(f"suffix length must be positive, got {length}")
        return await self._get_sized("get_suffix", key, {"range": {"suffix": length}})

    async def _get_sized(self, op: str, key: str, options: GetOptions) -> tuple[bytes, int]:
        """One GET of a range, with the object's size."""
        self.stats.gets += 1
        try:
            if self._local is not None:
                data, size = await self._local_sized(key, options)
            else:
                result = await obstore.get_async(self._backend, key, options=options)
                data = bytes(await result.bytes_async())
                size = int(result.meta["size"])
        except (BaseError, OSError, ValueError) as e:
            raise self._error(op, key, e) from e
        self.stats.bytes_got += len(data)
        return data, size

    async def get_ranges(
        self,
        key: str,
        ranges: Sequence[tuple[int, int]],
        *,
        coalesce: int = DEFAULT_COALESCE,
    ) -> list[bytes]:
        """Several ranges of one object, in the order asked.

        Ranges that overlap or lie within ``coalesce`` bytes of each other are merged into one
        GET (counted once); the merged GETs run concurrently.
        """
        check_key(key)
        for start, end in ranges:
            if start < 0 or end < start:
                raise ValueError(f"invalid range [{start}, {end})")
        order = sorted(
            (r for r in range(len(ranges)) if ranges[r][0] != ranges[r][1]), key=lambda r: ranges[r]
        )
        merged: list[tuple[int, int, list[int]]] = []  # (start, end, indexes into ranges)
        for r in order:
            start, end = ranges[r]
            if merged and start <= merged[-1][1] + coalesce:
                m_start, m_end, members = merged[-1]
                merged[-1] = (m_start, max(m_end, end), members)
                members.append(r)
            else:
                merged.append((start, end, [r]))
        blobs = await asyncio.gather(*(self.get_range(key, m[0], m[1]) for m in merged))
        out = [b""] * len(ranges)
        for (m_start, m_end, members), blob in zip(merged, blobs, strict=True):
            for r in members:
                start, end = ranges[r]
                whole = start == m_start and end == m_end
                out[r] = blob if whole else blob[start - m_start : end - m_start]
        return out

    async def head(self, key: str) -> ObjectInfo:
        check_key(key)
        self.stats.heads += 1
        if self._local is not None:
            try:
                return _listed_info(self._local.stat(key))
            except OSError as e:
                raise self._error("head", key, e) from e
        try:
            meta = await obstore.head_async(self._backend, key)
        except (BaseError, OSError, ValueError) as e:
            raise self._error("head", key, e) from e
        return _info(meta)

    # --- listing ---------------------------------------------------------------------------

    async def list_with_delimiter(self, prefix: str = "") -> tuple[list[str], list[ObjectInfo]]:
        """The prefixes one path segment below ``prefix``, and the objects directly in it
        (one LIST request, as S3 counts it)."""
        check_key(prefix, allow_empty=True)
        self.stats.lists += 1
        try:
            if self._local is not None:
                prefixes, listed = await asyncio.to_thread(self._local.list_with_delimiter, prefix)
                return prefixes, [_listed_info(item) for item in listed]
            result = await obstore.list_with_delimiter_async(self._backend, prefix or None)
        except (BaseError, OSError, ValueError) as e:
            raise self._error("list", prefix, e) from e
        return list(result["common_prefixes"]), [_info(m) for m in result["objects"]]

    def list_blocking(
        self, prefix: str = "", *, flat: bool = False, after: str | None = None
    ) -> Iterator[ObjectInfo]:
        """Objects under ``prefix`` (only those directly in it if ``flat``), whose keys sort
        after ``after`` if given; in key order on S3, in no particular order elsewhere. For
        code without an event loop (Spark executors); it blocks."""
        check_key(prefix, allow_empty=True)
        self.stats.lists += 1
        try:
            if self._local is not None:
                if flat:
                    listed = self._local.list_with_delimiter(prefix)[1]
                else:
                    listed = self._local.list_all(prefix)
                for item in listed:
                    if after is None or item.key > after:
                        yield _listed_info(item)
                return
            if flat:
                metas = obstore.list_with_delimiter(self._backend, prefix or None)["objects"]
                chunks: Iterable[Sequence[Any]] = [metas]
            else:
                chunks = obstore.list(
                    self._backend, prefix or None, offset=after, chunk_size=_LIST_PAGE
                )
            for chunk in chunks:
                for meta in chunk:
                    yield _info(meta)
        except (BaseError, OSError, ValueError) as e:
            raise self._error("list", prefix, e) from e

    async def iter_list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        """Objects under ``prefix`` (whole path segments), in no particular order."""
        check_key(prefix, allow_empty=True)
        if self._local is not None:
            self.stats.lists += 1
            try:
                listed = await asyncio.to_thread(self._local.list_all, prefix)
            except OSError as e:
                raise self._error("list", prefix, e) from e
            self.stats.lists += max(len(listed) - 1, 0) // _LIST_PAGE
            for item in listed:
                yield _listed_info(item)
            return
        stream = obstore.list(self._backend, prefix or None, chunk_size=_LIST_PAGE)
        self.stats.lists += 1
        try:
            first = True
            async for chunk in stream:
                if not first:
                    self.stats.lists += 1  # approximately one LIST request per 1000 keys
                first = False
                for meta in chunk:
                    yield _info(meta)
        except (BaseError, OSError, ValueError) as e:
            raise self._error("list", prefix, e) from e

    async def list(self, prefix: str = "") -> list[ObjectInfo]:
        """All objects under ``prefix``, sorted by key."""
        items = [info async for info in self.iter_list(prefix)]
        items.sort(key=lambda i: i.key)
        return items

    async def _local_sized(self, key: str, options: GetOptions) -> tuple[bytes, int]:
        """A local store's answer to a GET of a range, or of a suffix, with the object's size."""
        assert self._local is not None
        wanted: Any = options["range"]
        if isinstance(wanted, tuple):
            start, end = wanted
        else:
            size = self._local.stat(key).size
            start, end = max(size - int(wanted["suffix"]), 0), size
        return await self._local_read(key, start, end)

    async def _local_read(self, key: str, start: int, end: int) -> tuple[bytes, int]:
        """A local read: on this thread when small, else on a worker thread."""
        assert self._local is not None
        if end - start <= _DIRECT_READ:
            return self._local.read(key, start, end)
        return await asyncio.to_thread(self._local.read, key, start, end)


def local_root(url: str) -> Path | None:
    """The directory that a local store's URL (``file:///abs/dir``, or the bare path) names;
    None for a store elsewhere. Nothing is created here: ``ObjectStore.from_url`` does that."""
    parts = urllib.parse.urlsplit(Path(url).as_uri() if url.startswith("/") else url)
    return _local_root(parts) if parts.scheme.lower() == "file" else None


def _local_root(parts: urllib.parse.SplitResult) -> Path:
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"file URL must be file:///absolute/path, got host {parts.netloc!r}")
    root = Path(urllib.parse.unquote(parts.path))
    if not root.is_absolute():
        raise ValueError(f"file URL needs an absolute path, got {parts.path!r}")
    return Path(os.path.normpath(root))


def _info(meta: ObjectMeta) -> ObjectInfo:
    return ObjectInfo(key=meta["path"], size=meta["size"], last_modified=meta["last_modified"])


def _listed_info(item: Listed) -> ObjectInfo:
    modified = datetime.fromtimestamp(item.modified_ns / 1e9, tz=UTC)
    return ObjectInfo(key=item.key, size=item.size, last_modified=modified)
