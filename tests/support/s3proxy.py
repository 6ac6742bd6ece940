"""A fault-injecting HTTP proxy in front of the S3-compatible test server.

    with S3FaultProxy(s3.endpoint) as proxy:       # agents use proxy.endpoint as --s3-endpoint
        proxy.fault = Fault.UNAVAILABLE            # every request answered 503 SlowDown
        proxy.fault = Fault.NONE                   # requests pass through again

Faults, switched at any moment from the test (each applies to requests that arrive after):

    NONE         pass through
    ERROR        500 InternalError, S3's XML error body
    UNAVAILABLE  503 SlowDown, as S3 throttles
    SLOW         pass through after `delay` seconds
    HANG         read the request, answer nothing; the client's timeout ends it
    DROP         read the request, close the connection without an answer
    FULL         pass through, but PUTs beyond `quota` stored bytes are refused with
                 507 (a bucket that has run out of room)

The proxy runs its own event loop in a thread, so it keeps answering whatever the test's loop
is doing. It counts requests per method and fault, and remembers each PUT it passed through
successfully (`stored`), so a test can tell which objects really reached the store.
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

_HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "TE",
        "Trailers",
        "Transfer-Encoding",
        "Upgrade",
        "Content-Length",
        "Host",
    )
)


class Fault(enum.Enum):
    NONE = "none"
    ERROR = "error"
    UNAVAILABLE = "unavailable"
    SLOW = "slow"
    HANG = "hang"
    DROP = "drop"
    FULL = "full"


def _s3_error(status: int, code: str, message: str) -> web.Response:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    )
    return web.Response(status=status, text=body, content_type="application/xml")


@dataclass
class S3FaultProxy:
    upstream: str
    fault: Fault = Fault.NONE
    delay: float = 2.0
    quota: int = 0
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    stored_bytes: int = 0
    # Keys of the PUTs that reached the store, with when their answer was passed back.
    stored: dict[str, float] = field(default_factory=dict)
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _runner: web.AppRunner | None = None
    _session: aiohttp.ClientSession | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> S3FaultProxy:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def serve() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, name="s3-fault-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the S3 fault proxy did not start")
        return self

    def stop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> S3FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _start(self) -> None:
        # No pooling limits, no timeout of our own: a slow upstream is the test's business.
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False
        )
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # A client that gives up (its timeout) ends the request: the handler is cancelled.
        self._runner = web.AppRunner(
            app, handle_signals=False, access_log=None, handler_cancellation=True
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        fault = self.fault
        self.requests[(request.method, fault.value)] += 1
        if fault is Fault.ERROR:
            return _s3_error(500, "InternalError", "We encountered an internal error.")
        if fault is Fault.UNAVAILABLE:
            return _s3_error(503, "SlowDown", "Please reduce your request rate.")
        if fault is Fault.HANG:
            # Until the client gives up (and closes the connection, which cancels this).
            await asyncio.sleep(3600)
        if fault is Fault.DROP:
            if request.transport is not None:
                request.transport.abort()
            await asyncio.sleep(3600)  # cancelled: the connection is gone
        if fault is Fault.SLOW:
            await asyncio.sleep(self.delay)
        if (
            fault is Fault.FULL
            and request.method == "PUT"
            and self.stored_bytes + len(body) > (self.quota)
        ):
            return _s3_error(507, "InsufficientStorage", "The bucket has no room left.")
        return await self._forward(request, body)

    async def _forward(self, request: web.Request, body: bytes) -> web.Response:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["Host"] = self.upstream.split("://", 1)[1]
        async with self._session.request(
            request.method,
            self.upstream + request.rel_url.raw_path_qs,
            headers=headers,
            data=body if body else None,
            allow_redirects=False,
        ) as upstream:
            data = await upstream.read()
            reply_headers = {
                k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_BY_HOP
            }
            if request.method == "HEAD" and "Content-Length" in upstream.headers:
                # The size of the object, not of this (empty) answer.
                reply_headers["Content-Length"] = upstream.headers["Content-Length"]
            if request.method == "PUT" and upstream.status < 300:
                self.stored_bytes += len(body)
                self.stored[request.path] = time.monotonic()
            return web.Response(status=upstream.status, body=data, headers=reply_headers)
