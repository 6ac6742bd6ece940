"""nats-server's HTTP monitoring endpoints (/healthz, /varz) on the `-m` port.

A deliberately small HTTP/1.1 responder: GET only, one request per connection, JSON bodies.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import msgspec

log = logging.getLogger(__name__)

Endpoint = Callable[[], dict[str, Any]]


class MonitorServer:
    def __init__(self, endpoints: dict[str, Endpoint]) -> None:
        self.endpoints = endpoints
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._serve, host, port)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = request_line.split()
            if len(parts) < 2:
                await _respond(writer, 400, {"error": "bad request"})
                return
            method, target = parts[0], parts[1]
            path = target.split("?", 1)[0].rstrip("/") or "/"
            endpoint = self.endpoints.get(path)
            if method not in ("GET", "HEAD"):
                await _respond(writer, 405, {"error": "method not allowed"})
            elif endpoint is None:
                await _respond(writer, 404, {"error": "not found"})
            else:
                await _respond(writer, 200, endpoint())
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        except Exception:
            log.exception("monitoring request failed")
        finally:
            writer.close()


async def _respond(writer: asyncio.StreamWriter, status: int, body: dict[str, Any]) -> None:
    payload = msgspec.json.encode(body)
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}[status]
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
        + payload
    )
    await writer.drain()
