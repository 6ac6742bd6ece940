"""The cache channel between agents: an agent asks the owner of a block for a byte range.

HTTP (aiohttp) on a port of its own, which membership advertises; one request a range:

    GET /range?key=<object key>&start=<n>&end=<n>
    X-InfiniStream-Time: <unix seconds>
    X-InfiniStream-Signature: hex HMAC-SHA256(secret, "key\\nstart\\nend\\ntime")

The secret is the pool's (kept in the metadata store, created by the first agent), so only
agents of the pool can ask: a client of the NATS port, or anyone else who reaches this port,
gets 403 and no bytes, whatever it sends: the signature is checked before any field is parsed.
A signature is good for `MAX_SKEW` seconds either side of its time.

Answers: 200 and the bytes (fewer than asked when the object ends first), 404 when the object
does not exist, 502 when the owner's GET failed, 400 for a signed request that is not a range.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import socket
import time
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web

from .cachestats import ZoneCacheStats
from .objects import ObjectNotFoundError, ObjectStoreError, check_key

__all__ = ["MAX_SKEW", "PeerClient", "PeerError", "PeerServer", "PoolSecret", "sign"]

log = logging.getLogger(__name__)

MAX_SKEW = 60.0
_TIME = "X-InfiniStream-Time"
_SIGNATURE = "X-InfiniStream-Signature"

Serve = Callable[[str, int, int], Awaitable[bytes]]


class PeerError(Exception):
    """The owner did not give the bytes: refused, failed, slow or gone."""


def sign(secret: bytes, key: str, start: int, end: int, when: int) -> str:
    return _mac(secret, key, str(start), str(end), str(when)).hex()


def _mac(secret: bytes, key: str, start: str, end: str, when: str) -> bytes:
    """The HMAC of the fields as sent: the owner checks it before it reads any of them."""
    message = f"{key}\n{start}\n{end}\n{when}".encode("utf-8", "surrogateescape")
    return hmac.new(secret, message, hashlib.sha256).digest()


def _signature(text: str) -> bytes | None:
    """The signature a request carries, as bytes; None when it is not hex (anything else,
    non-ASCII text included, is no signature)."""
    if len(text) != 2 * hashlib.sha256().digest_size:
        return None
    try:
        return bytes.fromhex(text)
    except ValueError:
        return None


def _small_int(text: str) -> int | None:
    """A decimal integer of at most 19 digits (an int64), else None: a request's numbers are
    offsets and seconds, and no longer text is parsed at all."""
    if not 0 < len(text) <= 19 or not text.isascii() or not text.isdigit():
        return None
    return int(text)


class PoolSecret:
    """The pool's shared secret, loaded (from the metadata store) once, when first needed."""

    def __init__(self, load: Callable[[], Awaitable[bytes]]) -> None:
        self._load = load
        self._value: asyncio.Future[bytes] | None = None

    async def get(self) -> bytes:
        if self._value is None or (self._value.done() and self._value.exception()):
            self._value = asyncio.ensure_future(self._load())
        return await asyncio.shield(self._value)


class PeerServer:
    """The owner's side: answers signed range requests with `serve(key, start, end)`."""

    def __init__(self, secret: PoolSecret, serve: Serve, stats: ZoneCacheStats) -> None:
        self._secret = secret
        self._serve = serve
        self._runner: web.AppRunner | None = None
        self.stats = stats

    async def start(self, host: str, port: int) -> int:
        """Listen; returns the port (any free one for 0).

        The secret is loaded first: a request must not wait for a metadata read, which a
        zone's readers starting at once (each filling its streams' views from metadata) can
        hold past their timeout, and each request that times out costs its reader a GET.
        A store that fails now is asked again at the first request."""
        with contextlib.suppress(Exception):  # the metadata store's error, whatever the backend
            await self._secret.get()
        app = web.Application()
        app.router.add_get("/range", self._range)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family)
        sock.setblocking(False)
        await web.SockSite(self._runner, sock).start()
        return int(sock.getsockname()[1])

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _range(self, request: web.Request) -> web.Response:
        # Authentic first: until the signature holds, nothing of the request is parsed (a
        # stranger's 5,000-digit number or non-ASCII text costs one HMAC and gets 403).
        q = request.query
        key, start_text, end_text = q.get("key"), q.get("start"), q.get("end")
        when_text = request.headers.get(_TIME)
        signature = _signature(request.headers.get(_SIGNATURE, ""))
        if (
            signature is None
            or key is None
            or start_text is None
            or end_text is None
            or when_text is None
        ):
            self.stats.refused += 1
            return web.Response(status=403)
        expected = _mac(await self._secret.get(), key, start_text, end_text, when_text)
        when = _small_int(when_text)
        if (
            not hmac.compare_digest(signature, expected)
            or when is None
            or abs(time.time() - when) > MAX_SKEW
        ):
            self.stats.refused += 1
            return web.Response(status=403)
        start, end = _small_int(start_text), _small_int(end_text)
        if start is None or end is None or not 0 <= start < end:
            self.stats.refused += 1
            return web.Response(status=400)
        try:
            key = check_key(key)
        except ValueError:
            self.stats.refused += 1
            return web.Response(status=400)
        try:
            data = await self._serve(key, start, end)
        except ObjectNotFoundError:
            return web.Response(status=404)
        except (ObjectStoreError, ValueError) as exc:
            log.warning("cache range %s [%d, %d) failed: %s", key, start, end, exc)
            return web.Response(status=502)
        self.stats.served += 1
        self.stats.bytes_served += len(data)
        return web.Response(body=data, content_type="application/octet-stream")


class PeerClient:
    """The reader's side: one session, connections kept alive to each owner."""

    def __init__(self, secret: PoolSecret, *, timeout: float) -> None:
        self._secret = secret
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def fetch(self, url: str, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of `key` from the owner at `url` (fewer at the object's end);
        ObjectNotFoundError when the object does not exist, PeerError for anything else, a
        timeout included."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        try:
            secret = await self._secret.get()
        except Exception as exc:  # the metadata store's error, whatever the backend
            raise PeerError(f"no pool secret: {exc}") from exc
        when = int(time.time())
        headers = {_TIME: str(when), _SIGNATURE: sign(secret, key, start, end, when)}
        params = {"key": key, "start": str(start), "end": str(end)}
        try:
            async with self._session.get(f"{url}/range", params=params, headers=headers) as r:
                if r.status == 404:
                    raise ObjectNotFoundError(key, url=url)
                if r.status != 200:
                    raise PeerError(f"{url}: HTTP {r.status}")
                return await r.read()
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise PeerError(f"{url}: {type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
