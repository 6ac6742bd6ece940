"""One NATS connection for the load generator: an asyncio protocol over raw bytes."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import cast

from infinistream_bench import protocol
from infinistream_bench.protocol import Message

# No progress at all for this long means the server under test has stalled: fail the job.
STALL_SECONDS = 30.0

perf_counter = time.perf_counter


class JobError(Exception):
    """The server under test misbehaved (stalled, closed, sent garbage)."""


def _ignore(msgs: list[Message], t: float) -> None:
    pass


class Connection(asyncio.Protocol):
    """A NATS connection: writes what it is given, parses what arrives, answers PINGs."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.parser = protocol.Parser()
        self.transport: asyncio.Transport | None = None
        self.on_messages: Callable[[list[Message], float], None] = _ignore
        self.info_received: asyncio.Future[None] = loop.create_future()
        self.error: BaseException | None = None
        self._pongs: deque[asyncio.Future[None]] = deque()
        self._writable = asyncio.Event()
        self._writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        t = perf_counter()
        parser = self.parser
        try:
            msgs = parser.feed(data)
        except protocol.ProtocolError as exc:
            self._fail(exc)
            return
        if parser.info is not None and not self.info_received.done():
            self.info_received.set_result(None)
        if parser.pings:
            self.write(protocol.PONG * parser.pings)
            parser.pings = 0
        while parser.pongs and self._pongs:
            parser.pongs -= 1
            fut = self._pongs.popleft()
            if not fut.done():
                fut.set_result(None)
        if msgs:
            self.on_messages(msgs, t)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionError("connection closed by the server"))

    def _fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        for fut in [self.info_received, *self._pongs]:
            if not fut.done():
                fut.set_exception(JobError(str(exc)))
        self._pongs.clear()
        self._writable.set()
        if self.transport is not None:
            self.transport.close()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def write(self, data: bytes | memoryview) -> None:
        if self.error is not None:
            raise JobError(f"connection failed: {self.error}")
        assert self.transport is not None
        self.transport.write(data)

    async def drain(self) -> None:
        if not self._writable.is_set():
            await self._writable.wait()

    async def flush(self, timeout: float = STALL_SECONDS) -> None:
        """PING and wait for the PONG: the server has read everything sent before."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pongs.append(fut)
        self.write(protocol.PING)
        await asyncio.wait_for(fut, timeout)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def connect(port: int, host: str = "127.0.0.1") -> Connection:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(Connection, host, port)
    await asyncio.wait_for(conn.info_received, 10)
    conn.write(protocol.CONNECT)
    await conn.flush()
    return conn


def describe(msg: Message) -> str:
    subject, _, _, headers, payload = msg
    head = (headers or b"").split(b"\r\n", 1)[0]
    return f"{subject.decode(errors='replace')}: {head.decode(errors='replace')} {payload[:200]!r}"
