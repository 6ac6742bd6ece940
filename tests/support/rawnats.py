"""A NATS client at the byte level, for tests that must see exactly what the server sends.

raw = await RawClient.open(port)        # reads the INFO line into raw.info
raw.send(b'CONNECT {"verbose":false}\\r\\nPING\\r\\n')
assert await raw.read_until(b"PONG\\r\\n") == b"PONG\\r\\n"
assert await raw.read_until_closed() == b"-ERR 'Unknown Protocol Operation'\\r\\n"
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

CONNECT_PLAIN = b'CONNECT {"verbose":false,"pedantic":false}\r\n'
CONNECT_HEADERS = (
    b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n'
)


class RawClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.info: dict[str, Any] = {}
        self._buf = b""

    @classmethod
    async def open(cls, port: int, host: str = "127.0.0.1") -> RawClient:
        reader, writer = await asyncio.open_connection(host, port)
        client = cls(reader, writer)
        line = await asyncio.wait_for(reader.readline(), 5)
        assert line.startswith(b"INFO ") and line.endswith(b"\r\n"), line
        client.info = json.loads(line[5:])
        return client

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def read_until(self, marker: bytes, timeout: float = 5.0) -> bytes:
        """Everything up to and including the first `marker`; what follows stays buffered."""

        async def wait() -> bytes:
            while marker not in self._buf:
                chunk = await self.reader.read(65536)
                if not chunk:
                    raise ConnectionError(f"closed before {marker!r}; got {self._buf!r}")
                self._buf += chunk
            end = self._buf.index(marker) + len(marker)
            out, self._buf = self._buf[:end], self._buf[end:]
            return out

        return await asyncio.wait_for(wait(), timeout)

    async def ping(self, timeout: float = 5.0) -> bytes:
        """Send PING; return what arrived before the PONG (the PONG itself stripped)."""
        self.send(b"PING\r\n")
        return (await self.read_until(b"PONG\r\n", timeout))[: -len(b"PONG\r\n")]

    async def read_until_closed(self, timeout: float = 5.0) -> bytes:
        """Everything the server sends until it closes the connection (fails if it does not)."""

        async def wait() -> bytes:
            with contextlib.suppress(ConnectionResetError):
                while chunk := await self.reader.read(65536):
                    self._buf += chunk
            out, self._buf = self._buf, b""
            return out

        return await asyncio.wait_for(wait(), timeout)

    async def read_for(self, seconds: float) -> bytes:
        """Everything the server sends within `seconds` (the connection may stay open)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._fill_forever(), seconds)
        out, self._buf = self._buf, b""
        return out

    async def _fill_forever(self) -> None:
        while chunk := await self.reader.read(65536):
            self._buf += chunk
        await asyncio.sleep(3600)  # closed: just wait out the deadline

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


def pub(subject: str, payload: bytes, reply: str | None = None) -> bytes:
    head = f"PUB {subject} {reply} {len(payload)}" if reply else f"PUB {subject} {len(payload)}"
    return head.encode() + b"\r\n" + payload + b"\r\n"


def hpub(subject: str, headers: bytes, payload: bytes, reply: str | None = None) -> bytes:
    sizes = f"{len(headers)} {len(headers) + len(payload)}"
    head = f"HPUB {subject} {reply} {sizes}" if reply else f"HPUB {subject} {sizes}"
    return head.encode() + b"\r\n" + headers + payload + b"\r\n"


def api_request(subject: str, body: dict[str, Any] | None, reply: str) -> bytes:
    return pub(subject, json.dumps(body).encode() if body is not None else b"", reply)


def parse_msgs(data: bytes) -> list[tuple[str, str, bytes | None, bytes]]:
    """Split MSG/HMSG frames into (subject, sid, headers or None, payload); other lines skipped."""
    out: list[tuple[str, str, bytes | None, bytes]] = []
    pos = 0
    while pos < len(data):
        nl = data.index(b"\r\n", pos)
        line = data[pos:nl].split()
        pos = nl + 2
        if not line:
            continue
        if line[0] == b"MSG":
            size = int(line[-1])
            out.append((line[1].decode(), line[2].decode(), None, data[pos : pos + size]))
            pos += size + 2
        elif line[0] == b"HMSG":
            hsize, size = int(line[-2]), int(line[-1])
            body = data[pos : pos + size]
            out.append((line[1].decode(), line[2].decode(), body[:hsize], body[hsize:]))
            pos += size + 2
    return out
