"""The cache channel between agents: an agent asks the owner of a block for a byte range.

HTTP (aiohttp) on a port of its own, which membership advertises; one request a range:

    GET /range?key=<object key>&start=<n>&end=<n>
    X-InfiniStream-Time: <unix seconds>
    X-InfiniStream-Signature: hex HMAC-SHA256(secret, "key\\nstart\\nend\\ntime")

The secret is the pool's (kept in the metadata store, created by the first agent), so only
agents of the pool can ask: a client of the NATS port, or anyone else who reaches this port,
gets 403 and no bytes. A signature is good for `MAX_SKEW` seconds either side of its time.

Answers: 200 and the bytes (fewer than asked when the object ends first), 404 when the object
does not exist, 502 when the owner's GET failed, 400 for a malformed request.
"""

from __future__ import annotations

import asyncio
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
    message = f"{key}\n{start}\n{end}\n{when}".encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


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
        """Listen; returns the port (any free one for 0)."""
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
        q = request.query
        try:
            key = check_key(q["key"])
            start, end = int(q["start"]), int(q["end"])
            when = int(request.headers[_TIME])
            signature = request.headers[_SIGNATURE]
        except (KeyError, ValueError):
            self.stats.refused += 1
            return web.Response(status=403 if _SIGNATURE not in request.headers else 400)
        expected = sign(await self._secret.get(), key, start, end, when)
        if abs(time.time() - when) > MAX_SKEW or not hmac.compare_digest(signature, expected):
            self.stats.refused += 1
            return web.Response(status=403)
        if not 0 <= start < end:
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
