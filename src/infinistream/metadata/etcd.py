"""`MetadataStore` on an etcd v3 cluster: the backend for many agents on many hosts.

Transport: etcd's JSON gRPC gateway (`POST /v3/kv/range`, `/v3/kv/txn`; keys and values are
base64 in JSON, int64 fields come back as strings), spoken with one pooled aiohttp session per
store, so there is no gRPC or protobuf dependency. etcd 3.4 and later serve the gateway under
`/v3/` on the client port. Bodies are built and parsed with msgspec, which does the base64.

Mapping:
- `Item.mod_revision` is etcd's `mod_revision` and `revision()` is the header revision of a
  point range (one linearizable read): the store-wide revision is etcd's own. etcd moves it only
  when a txn changes data (a delete of a missing key is no change), as the contract wants.
- `Compare(key, rev)` is `mod_revision(key) == rev`. etcd compares a missing key as a zero
  `KeyValue`, and no written key has mod_revision 0, so `Compare(key, 0)` holds exactly when
  the key does not exist (the same as `create_revision == 0`).
- `range` pages through large ranges (`limit` plus a moving start key, or end key when reversed),
  reading every page at the revision of the first one, so the result is one snapshot however
  many requests it takes. etcd sorts a DESCEND range in memory after reading the whole window, so
  a reverse range costs the size of its window on the server even with a small `limit`.
- `get_many` is one txn of point ranges per `max_txn_ops` keys; later chunks read at the first
  chunk's revision (one snapshot) and run concurrently.
- `txn` is one etcd txn: the compares, then the ops merged by `plan_ops` (below), since etcd
  refuses a txn that writes a key twice or puts a key inside a deleted range of the same txn.
  One consequence: a put that a later op of the same txn erases (Put(k) then Delete(k), k
  missing before) writes nothing, so if nothing else changes the revision stays (SQLite moves
  it for that put). Either way the data ends the same; only the no-op's revision bump differs.

etcd limits that production clusters must raise (start every member with the same flags):
- `--max-txn-ops` (default 128) bounds the compares and the ops of one txn separately. A flush
  or ack batch commits thousands of keys in one txn: use e.g. `--max-txn-ops=100000`.
- `--max-request-bytes` (default 1.5 MiB) bounds one request: use e.g. 32 MiB
  (`--max-request-bytes=33554432`). Keep it well under the backend quota.
A refused txn raises `MetadataError` that names the flag. History: the store compacts
etcd's history itself, at its writes, to a revision `history` seconds old (etcd_history.py):
etcd's own `--auto-compaction-*` flags are not needed, and `history=0` leaves it to them. Give
members a `--quota-backend-bytes` that fits the metadata.

Failover: the URL may list several endpoints (members of one cluster). A call goes to the last
endpoint that answered; when an endpoint cannot be connected to, the call moves on to the next.
A read also moves on when the connection breaks mid-request (after one retry on a new connection
to the same endpoint: a kept-alive connection that a restarted member closed breaks at once) or
the member says it is unavailable (no leader). A txn does not: once its request may have reached
etcd, a retry could apply it twice, so it raises `MetadataError` (the outcome is unknown, as with
SQLite's failed commit) and the next call starts at the next endpoint.

TLS and authentication (etcd_access.py): with `access`, every connection verifies the members
against its CA and presents its client certificate (files read again when they change), and
every request carries the token that `POST /v3/auth/authenticate` gave for its user and
password. A token etcd no longer takes (code 16, "invalid auth token": it expired, or etcd
restarted with simple tokens) is replaced once and the request sent again: etcd checks the token
before it proposes anything, so not even a txn was applied. A refused login or a permission
etcd denies (a user or role revoked) raises `MetadataError` in words, as a TLS failure does.

Not done: key namespaces (the store owns the keyspace of its cluster).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import aiohttp
import msgspec

import infinistream.metadata.kv as kv
from infinistream.metadata.etcd_access import EtcdAccess, TlsFiles, describe
from infinistream.metadata.etcd_history import DEFAULT_HISTORY_SECONDS, HistoryTrim

__all__ = ["EtcdMetadataStore", "TxnPlan", "plan_ops"]

T = TypeVar("T")

# etcd's default --max-txn-ops: get_many chunks stay under it unless told the server allows more.
DEFAULT_MAX_TXN_OPS = 128
# Keys per page of a range that returns values (keys-only pages are 10x larger). The gateway
# handles responses of tens of MiB, but a page bounds the memory of one response and the time of
# one request; etcd 3.4 walks the whole remaining window of its in-memory index per page anyway.
DEFAULT_PAGE_SIZE = 1000
# Ranges over the snapshot of one call run at most this many txns at once.
_READ_CONCURRENCY = 8
# A range paging at a pinned revision that etcd compacted meanwhile starts over, this often.
_COMPACTED_RETRIES = 3

# etcd holds no empty key (it refuses one), so b"\x00" is the smallest key there is, and as a
# range_end it means "to the end of the keyspace".
_LOWEST_KEY = b"\x00"
_TO_THE_END = b"\x00"

# gRPC status codes that the gateway returns in error bodies.
_OUT_OF_RANGE = 11  # "mvcc: required revision has been compacted"
_UNAVAILABLE = 14  # "etcdserver: no leader", "leader changed", member stopping
_UNAUTHENTICATED = 16  # "etcdserver: invalid auth token"


# -- the wire format ------------------------------------------------------------------------------


class _Header(msgspec.Struct):
    revision: int = 0


class _KeyValue(msgspec.Struct):
    key: bytes
    value: bytes = b""  # proto3 JSON omits empty fields
    mod_revision: int = 0


class _RangeResponse(msgspec.Struct):
    header: _Header = msgspec.field(default_factory=_Header)
    kvs: list[_KeyValue] = []
    more: bool = False


class _ResponseOp(msgspec.Struct):
    response_range: _RangeResponse | None = None


class _TxnResponse(msgspec.Struct):
    header: _Header = msgspec.field(default_factory=_Header)
    succeeded: bool = False
    responses: list[_ResponseOp] = []


class _AuthResponse(msgspec.Struct):
    token: str = ""


class _ErrorBody(msgspec.Struct):
    error: str = ""
    message: str = ""
    code: int = 0


_encoder = msgspec.json.Encoder()
_range_decoder = msgspec.json.Decoder(_RangeResponse, strict=False)  # strict=False: "12" -> 12
_txn_decoder = msgspec.json.Decoder(_TxnResponse, strict=False)
_error_decoder = msgspec.json.Decoder(_ErrorBody, strict=False)
_auth_decoder = msgspec.json.Decoder(_AuthResponse, strict=False)


def _items(kvs: Iterable[_KeyValue]) -> list[kv.Item]:
    return [kv.Item(pair.key.decode(), pair.value, pair.mod_revision) for pair in kvs]


# -- merging the ops of one txn -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TxnPlan:
    """The writes of one etcd txn whose combined effect equals a list of ops applied in order.

    No two writes touch one key: every put key is distinct, and no put key lies in a deleted key
    or range, which is what etcd demands. Deletes and ranges may overlap each other (etcd allows
    that), though `plan_ops` drops the deletes that a range already covers.
    """

    puts: list[tuple[bytes, bytes]]
    deletes: list[bytes]
    # [low, high) bytewise; high None means "to the end of the keyspace".
    ranges: list[tuple[bytes, bytes | None]]

    def __len__(self) -> int:
        return len(self.puts) + len(self.deletes) + len(self.ranges)


# The ops on one key. A tuple, not Put | Delete: isinstance checks a tuple 1.7x faster (measured),
# and plan_ops does it once per op of every txn.
_KEY_OPS = (kv.Put, kv.Delete)


def plan_ops(ops: Sequence[kv.Op]) -> TxnPlan:
    """Merge `ops` into writes that etcd accepts in one txn, with the same final effect.

    The final state of a key is decided by the last op that touches it: a Put, a Delete, or a
    DeletePrefix or DeleteRange whose range holds it. Walking the ops backwards, the first op
    seen for a key decides it; a Put or Delete of a key that a later range covers is dropped
    (the range deletes the key). What remains:
    - the surviving Puts, one per key, with the last value;
    - each deleted range (a DeletePrefix is the range of keys it starts), merged with those it
      overlaps, split around the surviving puts inside it: for put keys k1 < ... < kn in [L, H)
      the ranges are [L, k1), [k1 + b"\0", k2), ..., [kn + b"\0", H). `k + b"\0"` is the
      immediate successor of `k` in bytewise order, so the ranges delete exactly the keys in
      [L, H) other than k1..kn: no read, no extra compare, and still one atomic txn;
    - the surviving Deletes that no range covers.
    A rejected alternative read the keys under each prefix first and deleted them one by one,
    guarded by compares: it costs a round trip, fails on any concurrent change under the prefix,
    and misses keys created between the read and the txn unless a further compare guards those.

    The plan has at most one put per op, one delete per op, and one range per range op plus one
    per put, so it is at most about twice as long as `ops`.
    """
    decided: set[bytes] = set()
    puts: dict[bytes, bytes] = {}
    deletes: list[bytes] = []
    later_ranges: list[tuple[bytes, bytes | None]] = []

    def covered(key: bytes) -> bool:
        return any(low <= key and (high is None or key < high) for low, high in later_ranges)

    for op in reversed(ops):
        if isinstance(op, _KEY_OPS):
            key = op.key.encode()
            if key in decided:
                continue
            decided.add(key)
            if later_ranges and covered(key):
                continue
            if isinstance(op, kv.Put):
                puts[key] = _value_bytes(op)
            else:
                deletes.append(key)
        elif isinstance(op, kv.DeletePrefix):
            prefix = op.prefix.encode()
            later_ranges.append((prefix, kv.prefix_end(prefix)))
        elif isinstance(op, kv.DeleteRange):
            start, end = op.start.encode(), op.end.encode()
            if start < end:
                later_ranges.append((start, end))
        else:
            raise TypeError(f"not a metadata op: {type(op).__name__}")

    merged = _merged(later_ranges)
    put_keys = sorted(puts)
    ranges: list[tuple[bytes, bytes | None]] = []
    for low, high in merged:
        first = bisect.bisect_left(put_keys, low)
        last = len(put_keys) if high is None else bisect.bisect_left(put_keys, high)
        for key in put_keys[first:last]:
            if low < key:
                ranges.append((low, key))
            low = key + b"\x00"
        if high is None or low < high:
            ranges.append((low, high))

    # Deletes inside a range are redundant (and not covered by a later range, so every such
    # range comes from an earlier op, which deletes the key all the same).
    if merged:
        deletes = [key for key in deletes if not _in_any(key, merged)]
    return TxnPlan(list(puts.items())[::-1], deletes[::-1], ranges)


def _merged(ranges: list[tuple[bytes, bytes | None]]) -> list[tuple[bytes, bytes | None]]:
    """`ranges` sorted, with overlapping or touching ones merged (high None: no end)."""
    out: list[tuple[bytes, bytes | None]] = []
    for low, high in sorted(ranges, key=lambda r: r[0]):
        if out:
            last_low, last_high = out[-1]
            if last_high is None or low <= last_high:
                if last_high is not None and (high is None or high > last_high):
                    out[-1] = (last_low, high)
                continue
        out.append((low, high))
    return out


def _in_any(key: bytes, merged: list[tuple[bytes, bytes | None]]) -> bool:
    # The only candidate is the last range starting at or before the key (they do not overlap).
    i = bisect.bisect_right(merged, key, key=lambda r: r[0])
    if i == 0:
        return False
    high = merged[i - 1][1]
    return high is None or key < high


def _value_bytes(op: kv.Put) -> bytes:
    value = op.value
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"Put value for {op.key!r} must be bytes, not {type(value).__name__}")


def _request_ops(plan: TxnPlan) -> list[dict[str, Any]]:
    requests: list[dict[str, Any]] = [
        {"request_put": {"key": key, "value": value}} for key, value in plan.puts
    ]
    # etcd holds no empty key (and refuses one in a request): deleting it is a no-op.
    requests += [{"request_delete_range": {"key": key}} for key in plan.deletes if key]
    for low, high in plan.ranges:
        window = _without_empty_key(low, high)
        if window is not None:
            low, high = window
            requests.append(
                {"request_delete_range": {"key": low, "range_end": high or _TO_THE_END}}
            )
    return requests


def _without_empty_key(low: bytes, high: bytes | None) -> tuple[bytes, bytes | None] | None:
    """[low, high) as etcd can be asked for it; None when it holds no key etcd can hold.

    etcd has no empty key: start at the lowest real one. A range that then ends at or before it
    ([b"", b"\0") holds only the empty key) must not be sent, since as a range_end b"\0" means
    "to the end".
    """
    low = max(low, _LOWEST_KEY)
    if high is not None and high <= low:
        return None
    return low, high


def _compare(compare: kv.Compare) -> dict[str, Any]:
    if not compare.key:
        # The empty key never exists in etcd (which refuses it in a request): Compare("", 0)
        # always holds and any other revision never does. Say so about the lowest key, whose
        # mod_revision (0 when missing) is always > -1 and never == -1.
        holds = compare.mod_revision == 0
        return {
            "key": _LOWEST_KEY,
            "target": "MOD",
            "result": "GREATER" if holds else "EQUAL",
            "mod_revision": -1,
        }
    return {
        "key": compare.key.encode(),
        "target": "MOD",
        "result": "EQUAL",
        "mod_revision": compare.mod_revision,
    }


# -- the store ------------------------------------------------------------------------------------


class _Unavailable(Exception):
    """An endpoint failed in a way that lets this call try the next one."""

    def __init__(self, message: str, *, broken_connection: bool = False) -> None:
        super().__init__(message)
        # A kept-alive connection that the server closed (a restart) breaks a read at once;
        # the read may then try a new connection to the same endpoint before moving on.
        self.broken_connection = broken_connection


class EtcdMetadataStore(kv.MetadataStore):
    """A `MetadataStore` in an etcd v3 cluster reached at `endpoints` ("host:port" or URLs).

    Opening does no I/O: the HTTP session is made on the first call, in the running event loop.
    `max_txn_ops` is what the server's `--max-txn-ops` allows; only `get_many` uses it, to split
    its reads (writes are never split: a txn too large for the server raises `MetadataError`).
    `timeout` bounds one request, `connect_timeout` one connection attempt (then the next
    endpoint is tried). `ssl` is passed to aiohttp (None: verify with the system CAs) unless
    `access` gives the TLS files; `access` also gives the user etcd authenticates. `history`
    is how old etcd's history gets before the store's writes compact it (0: never).

    Keys are UTF-8 in etcd; the store assumes that the cluster (or at least every key a range of
    it reads) holds only this store's keys. etcd holds no empty key: `Put("")` raises.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        timeout: float = 30.0,
        connect_timeout: float = 2.0,
        max_txn_ops: int = DEFAULT_MAX_TXN_OPS,
        page_size: int = DEFAULT_PAGE_SIZE,
        ssl: Any = None,
        access: EtcdAccess | None = None,
        history: float = DEFAULT_HISTORY_SECONDS,
    ) -> None:
        if not endpoints:
            raise ValueError("etcd metadata store needs at least one endpoint")
        if max_txn_ops < 1 or page_size < 1:
            raise ValueError("max_txn_ops and page_size must be positive")
        if not history >= 0:
            raise ValueError(f"history must be 0 or more seconds, not {history}")
        self._endpoints = [_base_url(endpoint) for endpoint in endpoints]
        self._timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=connect_timeout)
        self._max_txn_ops = max_txn_ops
        self._page_size = page_size
        self._ssl = ssl
        self._access = access or EtcdAccess()
        self._tls = TlsFiles(self._access) if self._access.files else None
        self._token: str | None = None
        self._login = asyncio.Lock()
        self._retired: list[aiohttp.ClientSession] = []
        self._preferred = 0  # index of the endpoint that answered last
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self.history = HistoryTrim(history, self._compact)

    @property
    def endpoints(self) -> list[str]:
        return list(self._endpoints)

    def __repr__(self) -> str:
        return f"EtcdMetadataStore({self._endpoints!r})"

    # -- transport ------------------------------------------------------------------------------

    def _name(self) -> str:
        return f"etcd metadata store {','.join(self._endpoints)}"

    def _client(self) -> aiohttp.ClientSession:
        if self._closed:
            raise kv.MetadataError(f"{self._name()} is closed")
        loop = asyncio.get_running_loop()
        renewed = self._tls is not None and self._tls.changed()
        if self._session is None or self._loop is not loop or renewed:
            # A session belongs to one event loop; a store used from a new loop (asyncio.run
            # twice) gets a new pool rather than connections bound to a dead loop. Renewed
            # certificate files: new connections present the new one.
            ssl_option = self._ssl if self._ssl else True
            if self._tls is not None:
                ssl_option = self._tls.context()
            if renewed and self._session is not None and self._loop is loop:
                # Requests in flight finish on the old connections; closed with the store.
                _log.info("etcd TLS files changed: new connections use them")
                self._retired.append(self._session)
            connector = aiohttp.TCPConnector(limit=64, ssl=ssl_option)
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=self._timeout,
                headers={"Content-Type": "application/json"},
                skip_auto_headers=("User-Agent",),
            )
            self._loop = loop
        return self._session

    async def _post(self, path: str, body: dict[str, Any], *, idempotent: bool) -> bytes:
        """POST `body` to `path` on the first endpoint that answers; the 200 response body."""
        try:
            return await self._post_anywhere(path, body, idempotent=idempotent)
        except _TokenRefused as refused:
            # Checked before anything is proposed: nothing was applied, so sending it again
            # with a fresh token is safe for a txn too.
            await self._authenticate(stale=refused.token)
            try:
                return await self._post_anywhere(path, body, idempotent=idempotent)
            except _TokenRefused as again:
                raise kv.MetadataError(
                    f"{self._name()}: {path}: etcd refused a fresh token for user"
                    f" {self._access.user!r}: {again}"
                ) from None

    async def _authenticate(self, stale: str | None = None) -> None:
        """Get a token for the user (once for all the requests waiting on it)."""
        async with self._login:
            if self._token is not None and self._token != stale:
                return  # another request got a fresh one meanwhile
            self._token = None
            body = {"name": self._access.user, "password": self._access.secret()}
            try:
                payload = await self._post_anywhere("/v3/auth/authenticate", body, idempotent=True)
            except kv.MetadataError as exc:
                raise kv.MetadataError(
                    f"{self._name()}: etcd authentication of user {self._access.user!r} failed:"
                    f" {_cause(exc)}"
                ) from None
            token = self._decode(_auth_decoder, payload).token
            if not token:
                raise kv.MetadataError(
                    f"{self._name()}: etcd gave user {self._access.user!r} no token:"
                    " is authentication enabled on the cluster (etcdctl auth enable)?"
                )
            self._token = token

    async def _headers(self) -> dict[str, str] | None:
        """The token's header, when the store authenticates (getting a token first)."""
        if self._access.user is None:
            return None
        if self._token is None:
            await self._authenticate()
        return {"Authorization": self._token} if self._token else None

    async def _post_anywhere(self, path: str, body: dict[str, Any], *, idempotent: bool) -> bytes:
        session = self._client()
        data = _encoder.encode(body)
        failures: list[str] = []
        n = len(self._endpoints)
        first = self._preferred
        for i in range(n):
            index = (first + i) % n
            endpoint = self._endpoints[index]
            try:
                try:
                    payload = await self._post_once(session, endpoint, path, data, idempotent)
                except _Unavailable as e:
                    if not e.broken_connection:
                        raise
                    payload = await self._post_once(session, endpoint, path, data, idempotent)
            except _Unavailable as e:
                failures.append(f"{endpoint}: {e}")
                continue
            self._preferred = index
            return payload
        raise kv.MetadataError(
            f"{self._name()}: {path} failed on every endpoint: {'; '.join(failures)}"
        )

    async def _post_once(
        self,
        session: aiohttp.ClientSession,
        endpoint: str,
        path: str,
        data: bytes,
        idempotent: bool,
    ) -> bytes:
        headers = None if path == "/v3/auth/authenticate" else await self._headers()
        try:
            async with session.post(endpoint + path, data=data, headers=headers) as response:
                status = response.status
                payload = await response.read()
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as e:
            # Never connected: the request did not leave, so any call may try the next endpoint.
            raise _Unavailable(f"cannot connect ({describe(e)})") from e
        except (aiohttp.ClientError, TimeoutError) as e:
            what = describe(e)
            if idempotent:
                broken = isinstance(e, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError)
                raise _Unavailable(what, broken_connection=broken) from e
            # Not retried (it might apply twice), but the next call starts at the next endpoint.
            self._preferred = (self._endpoints.index(endpoint) + 1) % len(self._endpoints)
            raise kv.MetadataError(
                f"{self._name()}: {path} to {endpoint} failed after the request was sent"
                f" ({what}); the transaction may or may not have been applied"
            ) from e
        if status == 200:
            return payload
        error = _parse_error(payload)
        if error.code == _UNAUTHENTICATED and headers is not None:
            raise _TokenRefused(headers["Authorization"], error.error or error.message)
        if idempotent and (error.code == _UNAVAILABLE or status in (502, 503)):
            raise _Unavailable(f"HTTP {status}: {error.error or payload[:200]!r}")
        raise _error(endpoint, path, status, error, payload)

    # -- reads ----------------------------------------------------------------------------------

    async def _range_request(self, body: dict[str, Any]) -> _RangeResponse:
        payload = await self._post("/v3/kv/range", body, idempotent=True)
        return self._decode(_range_decoder, payload)

    def _decode(self, decoder: msgspec.json.Decoder[T], payload: bytes) -> T:
        try:
            return decoder.decode(payload)
        except msgspec.DecodeError as e:
            raise kv.MetadataError(
                f"{self._name()}: not an etcd v3 gateway response ({e}): {payload[:200]!r}"
            ) from e

    async def revision(self) -> int:
        # A point read of the lowest key: linearizable, and touches at most one key.
        response = await self._range_request({"key": _LOWEST_KEY, "count_only": True})
        return response.header.revision

    async def get(self, key: str) -> kv.Item | None:
        if not key:
            await self.revision()  # etcd holds no empty key; still fail like any call would
            return None
        response = await self._range_request({"key": key.encode()})
        items = _items(response.kvs)
        return items[0] if items else None

    async def get_many(self, keys: list[str]) -> dict[str, kv.Item]:
        wanted = list(dict.fromkeys(k.encode() for k in keys if k))  # no empty key in etcd
        if not wanted:
            self._client()  # a closed store refuses even an empty call
            return {}
        chunks = [
            wanted[i : i + self._max_txn_ops] for i in range(0, len(wanted), self._max_txn_ops)
        ]
        found = await self._pinned("get_many", lambda: self._get_many_once(chunks))
        return {item.key: item for item in _items(found)}

    async def _pinned(self, call: str, read: Callable[[], Awaitable[T]]) -> T:
        """`read`, whose requests are pinned to the revision of its first one, started over
        when etcd compacts that revision away meanwhile (`_Compacted`), a few times at most."""
        for attempt in itertools.count():
            try:
                return await read()
            except _Compacted:
                if attempt >= _COMPACTED_RETRIES:
                    raise kv.MetadataError(
                        f"{self._name()}: {call} kept losing its revision to compaction"
                    ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _get_many_once(self, chunks: list[list[bytes]]) -> list[_KeyValue]:
        found, revision = await self._read_txn(chunks[0], 0)
        if len(chunks) > 1:
            limiter = asyncio.Semaphore(_READ_CONCURRENCY)

            async def read(chunk: list[bytes]) -> list[_KeyValue]:
                async with limiter:
                    return (await self._read_txn(chunk, revision))[0]

            for kvs in await asyncio.gather(*(read(chunk) for chunk in chunks[1:])):
                found.extend(kvs)
        return found

    async def _read_txn(self, keys: list[bytes], revision: int) -> tuple[list[_KeyValue], int]:
        ranges: list[dict[str, Any]] = []
        for key in keys:
            request: dict[str, Any] = {"key": key}
            if revision:
                request["revision"] = revision
            ranges.append({"request_range": request})
        try:
            payload = await self._post("/v3/kv/txn", {"success": ranges}, idempotent=True)
        except kv.MetadataError as e:
            if _is_compacted(e):
                raise _Compacted from e
            raise
        response = self._decode(_txn_decoder, payload)
        kvs = [
            pair for op in response.responses if op.response_range for pair in op.response_range.kvs
        ]
        return kvs, response.header.revision

    async def range_of(self, query: kv.RangeQuery) -> list[kv.Item]:
        bounds = query.bounds()
        self._client()  # a closed store refuses even an empty range
        window = None if bounds is None else _without_empty_key(*bounds)
        if window is None:
            return []
        low, high = window
        return await self._pinned("range", lambda: self._range_pages(low, high, query))

    async def _range_pages(
        self, low: bytes, high: bytes | None, query: kv.RangeQuery, revision: int = 0
    ) -> list[kv.Item]:
        """The range low..high read as `query` asks (its limit, order, keys only) page by page,
        every page at the revision of the first one (or at `revision`, when given: raises
        `_Compacted` if etcd no longer has it)."""
        items: list[kv.Item] = []
        while True:
            body = self._range_body(low, high, query, len(items))
            if revision:
                body["revision"] = revision  # every page reads the first page's snapshot
            try:
                response = await self._range_request(body)
            except kv.MetadataError as e:
                if revision and _is_compacted(e):
                    raise _Compacted from e
                raise
            revision = revision or response.header.revision
            items.extend(_items(response.kvs))
            following = _next_page(response, low, high, query, len(items))
            if following is None:
                return items
            low, high = following

    def _range_body(
        self, low: bytes, high: bytes | None, query: kv.RangeQuery, have: int
    ) -> dict[str, Any]:
        """One page's range request: up to a page of what is still wanted of the window."""
        page = self._page_size * (10 if query.keys_only else 1)
        want = page if query.limit is None else min(page, query.limit - have)
        body: dict[str, Any] = {"key": low, "range_end": high or _TO_THE_END, "limit": want}
        if query.reverse:
            body["sort_order"] = "DESCEND"
            body["sort_target"] = "KEY"
        if query.keys_only:
            body["keys_only"] = True
        return body

    async def snapshot(self, reads: list[kv.Read]) -> kv.Snapshot:
        # Every read is one request of a single txn, which etcd serves at one revision; a scan
        # with more than a page to read goes on page by page at that same revision.
        windows = [_read_window(read) for read in reads]
        self._client()  # a closed store refuses even an empty snapshot
        return await self._pinned("snapshot", lambda: self._snapshot_once(reads, windows))

    async def _snapshot_once(
        self, reads: list[kv.Read], windows: list[tuple[bytes, bytes | None] | None]
    ) -> kv.Snapshot:
        requests: list[dict[str, Any]] = []
        for read, window in zip(reads, windows, strict=True):
            if window is None:
                continue
            if isinstance(read, kv.Get):
                requests.append({"request_range": {"key": window[0]}})
            else:
                body = self._range_body(*window, read, 0)
                requests.append({"request_range": body})
        payload = await self._post("/v3/kv/txn", {"success": requests}, idempotent=True)
        response = self._decode(_txn_decoder, payload)
        revision = response.header.revision
        answers = iter(response.responses)
        found: list[list[kv.Item]] = []
        for read, window in zip(reads, windows, strict=True):
            if window is None:
                found.append([])
                continue
            answer = next(answers).response_range or _RangeResponse()
            items = _items(answer.kvs)
            if isinstance(read, kv.Scan):
                low, high = window
                following = _next_page(answer, low, high, read, len(items))
                if following is not None:
                    left = None if read.limit is None else read.limit - len(items)
                    rest = replace(read, limit=left)
                    items += await self._range_pages(*following, rest, revision)
            found.append(items)
        return kv.Snapshot(revision, tuple(found))

    # -- the transaction ------------------------------------------------------------------------

    async def txn(
        self, compares: list[kv.Compare], ops: list[kv.Op], *, durable: bool = True
    ) -> kv.TxnResult:
        # etcd commits through its raft log, which is always synced: every commit is durable.
        self._client()
        plan = plan_ops(ops)
        body = {"compare": [_compare(c) for c in compares], "success": _request_ops(plan)}
        try:
            payload = await self._post("/v3/kv/txn", body, idempotent=False)
        except kv.MetadataError as e:
            if "too many operations" in str(e):
                raise kv.MetadataError(
                    f"{e}; this txn has {len(compares)} compares and {len(plan)} writes (merged"
                    f" from {len(ops)} ops): start every etcd member with --max-txn-ops at least"
                    " that large (e.g. --max-txn-ops=100000)"
                ) from e
            raise
        response = self._decode(_txn_decoder, payload)
        if response.succeeded:
            self.history.written(response.header.revision)
        return kv.TxnResult(response.succeeded, response.header.revision)

    async def _compact(self, revision: int, *, physical: bool = False) -> None:
        """Compact etcd's history up to `revision`; nothing to do when it is already compacted
        to there or past it. Reads pinned to an older revision retry (`_pinned`)."""
        body: dict[str, Any] = {"revision": revision}
        if physical:
            body["physical"] = True
        try:
            await self._post("/v3/kv/compaction", body, idempotent=True)
        except kv.MetadataError as e:
            if not _is_compacted(e):
                raise

    async def forget_deleted(self) -> None:
        """Compact the history up to now (physically: deleted and overwritten values leave the
        backend), then defragment every member so their files no longer hold them either."""
        await self._compact(await self.revision(), physical=True)
        session = self._client()
        for endpoint in self._endpoints:
            await self._post_once(session, endpoint, "/v3/maintenance/defragment", b"{}", True)

    def watch(self, prefix: str) -> kv.ChangeWatch:
        return EtcdWatch(self, prefix)

    async def close(self) -> None:
        if self._closed:
            return
        await self.history.close()
        self._closed = True
        session, self._session = self._session, None
        sessions = [*self._retired, *([session] if session is not None else [])]
        self._retired = []
        if self._loop is asyncio.get_running_loop():
            for one in sessions:
                await one.close()


_log = logging.getLogger(__name__)
# A watch stream that broke is opened again after this (on the next endpoint).
_WATCH_RETRY_SECONDS = 0.2


class EtcdWatch(kv.ChangeWatch):
    """An etcd watch on a prefix through the JSON gateway (`POST /v3/watch`, a stream of JSON
    results, one per line), opened on the first `wait` and kept open until `close`.

    Every result that carries events sets the level `wait` waits on: a commit by any agent
    wakes the waiter within a network round trip. Whenever the stream (re)opens the level is
    set too, since events may have been missed while it was down; so a broken watch costs a
    spurious wake, never a lost one.
    """

    def __init__(self, store: EtcdMetadataStore, prefix: str) -> None:
        self.store = store
        self.prefix = prefix.encode()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.events = 0
        self.opened = 0

    async def wait(self, timeout: float) -> bool:
        if self._task is None or self._task.done():
            self._changed.set()  # nothing known yet
            self._task = asyncio.get_running_loop().create_task(self._run())
        if not self._changed.is_set():
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                return False
        self._changed.clear()
        return True

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        create = {"key": self.prefix, "range_end": kv.prefix_end(self.prefix) or _TO_THE_END}
        body = _encoder.encode({"create_request": create})
        # No overall timeout: the stream stays open for as long as the watch is wanted.
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None, sock_connect=5)
        for index in itertools.cycle(range(len(self.store._endpoints))):
            if self.store._closed:
                return
            endpoint = self.store._endpoints[index]
            try:
                session = self.store._client()
                headers = await self.store._headers()
                post = session.post(
                    endpoint + "/v3/watch", data=body, timeout=timeout, headers=headers
                )
                async with post as r:
                    if r.status != 200:
                        raise kv.MetadataError(f"HTTP {r.status}: {(await r.read())[:200]!r}")
                    if self.opened:
                        self._changed.set()  # re-opened: events may have been missed
                    self.opened += 1
                    async for line in r.content:
                        if b'"events"' in line:
                            self.events += 1
                            self._changed.set()
                        elif b'"error"' in line or b'"canceled":true' in line:
                            if b"auth token" in line and headers is not None:
                                await self.store._authenticate(stale=headers["Authorization"])
                            raise kv.MetadataError(line[:200].decode(errors="replace"))
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if self.store._closed:
                    return
                _log.warning(
                    "etcd watch on %s at %s: %s; watching again", self.prefix, endpoint, describe(e)
                )
            self._changed.set()
            await asyncio.sleep(_WATCH_RETRY_SECONDS)


class _TokenRefused(Exception):
    """etcd did not take the token sent (it expired, or etcd forgot it)."""

    def __init__(self, token: str, message: str) -> None:
        super().__init__(message)
        self.token = token


def _cause(exc: kv.MetadataError) -> str:
    """The words etcd or the connection gave, without the store's own prefix."""
    return str(exc).split(" failed: ", 1)[-1]


class _Compacted(Exception):
    """A read pinned to a revision that etcd has compacted away."""


def _is_compacted(error: kv.MetadataError) -> bool:
    return "compacted" in str(error)


def _read_window(read: kv.Read) -> tuple[bytes, bytes | None] | None:
    """The keys a snapshot's read covers in etcd, as [low, high); None when it reads none.

    For a `Get`, low is the key itself. Raises ValueError for a scan that `range` refuses.
    """
    if isinstance(read, kv.Get):
        return (read.key.encode(), None) if read.key else None  # etcd holds no empty key
    bounds = read.bounds()
    return None if bounds is None else _without_empty_key(*bounds)


def _next_page(
    response: _RangeResponse, low: bytes, high: bytes | None, query: kv.RangeQuery, have: int
) -> tuple[bytes, bytes | None] | None:
    """What is left of a range's window after `response`, one of its pages; None when the
    range is read (no more keys, or the query's limit reached)."""
    limit = query.limit
    if not response.more or not response.kvs or (limit is not None and have >= limit):
        return None
    last = response.kvs[-1].key
    if query.reverse:
        if last == _LOWEST_KEY:
            return None  # nothing sorts below it (and as a range_end it means "no end")
        return low, last
    return last + b"\x00", high


def _parse_error(payload: bytes) -> _ErrorBody:
    try:
        return _error_decoder.decode(payload)
    except msgspec.DecodeError:
        return _ErrorBody()


def _error(
    endpoint: str, path: str, status: int, error: _ErrorBody, payload: bytes
) -> kv.MetadataError:
    text = (error.error or error.message or payload[:300].decode(errors="replace")).strip()
    code = f" (gRPC code {error.code})" if error.code else ""
    hint = ""
    if "larger than max" in text or "request is too large" in text:
        hint = (
            "; the request is larger than etcd accepts: start every member with a larger"
            " --max-request-bytes (e.g. 33554432), or write less per txn"
        )
    elif status == 404:
        hint = "; is this an etcd v3.4+ client URL (its JSON gateway serves /v3/)?"
    elif error.code == 3 and "duplicate key" in text:  # plan_ops should make this impossible
        hint = "; a txn wrote one key twice"
    return kv.MetadataError(f"etcd {endpoint}: {path} failed: HTTP {status}: {text}{code}{hint}")


def _base_url(endpoint: str) -> str:
    endpoint = endpoint.strip().rstrip("/")
    if not endpoint:
        raise ValueError("empty etcd endpoint")
    if "://" not in endpoint:
        endpoint = f"http://{endpoint}"
    scheme = endpoint.split("://", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise ValueError(f"etcd endpoint {endpoint!r}: expected host:port or an http(s) URL")
    return endpoint
