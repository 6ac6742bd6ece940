"""A small blocking client for set-up and bookkeeping: JetStream API requests and /varz.

Nothing here is on a measured path; it creates streams and consumers between measurements and
reads counters before and after them.
"""

from __future__ import annotations

import itertools
import json
import socket
import time
import urllib.request
from typing import Any

from infinistream_bench import protocol

INBOX = "_INBOX.control"


class BenchError(Exception):
    """A benchmark step failed: a server refused a request, a job did not finish, ..."""


class ControlClient:
    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 120.0) -> None:
        self.timeout = timeout
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._parser = protocol.Parser()
        self._tokens = itertools.count(1)
        self._pending: list[protocol.Message] = []
        self._read_until(lambda: self._parser.info is not None)
        self._sock.sendall(protocol.CONNECT + protocol.sub(f"{INBOX}.*", 1) + protocol.PING)
        self._read_until(lambda: self._parser.pongs > 0)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read_until(self, done: Any) -> None:
        deadline = time.monotonic() + self.timeout
        while not done():
            if time.monotonic() > deadline:
                raise BenchError("no answer from the server in time")
            data = self._sock.recv(65536)
            if not data:
                raise BenchError("server closed the connection")
            self._pending.extend(self._parser.feed(data))
            if self._parser.pings:
                self._sock.sendall(protocol.PONG * self._parser.pings)
                self._parser.pings = 0

    def request(self, subject: str, payload: bytes) -> protocol.Message:
        reply = f"{INBOX}.{next(self._tokens)}".encode()
        self._pending.clear()
        self._sock.sendall(protocol.pub(subject, reply.decode(), payload))
        found: list[protocol.Message] = []

        def answered() -> bool:
            found.extend(m for m in self._pending if m[0] == reply)
            self._pending.clear()
            return bool(found)

        self._read_until(answered)
        return found[0]

    def js(self, api: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """A `$JS.API.<api>` request; raises BenchError when the answer is an error."""
        payload = json.dumps(body).encode() if body is not None else b""
        _, _, _, headers, data = self.request(f"$JS.API.{api}", payload)
        if protocol.status_code(headers) == 503:
            raise BenchError(f"$JS.API.{api}: no responders (is JetStream on?)")
        answer: dict[str, Any] = json.loads(data)
        if "error" in answer:
            raise BenchError(f"$JS.API.{api}: {answer['error']}")
        return answer

    # -- the JetStream calls the workloads use ------------------------------------------------

    def add_stream(self, name: str, subjects: list[str]) -> None:
        config = {"name": name, "subjects": subjects, "storage": "file", "num_replicas": 1}
        self.js(f"STREAM.CREATE.{name}", config)

    def delete_stream(self, name: str) -> None:
        self.js(f"STREAM.DELETE.{name}")

    def stream_messages(self, name: str) -> int:
        return int(self.stream_info(name)["state"]["messages"])

    def stream_info(self, name: str) -> dict[str, Any]:
        return self.js(f"STREAM.INFO.{name}")

    def add_consumer(self, stream: str, durable: str, **config: Any) -> None:
        cfg = {"durable_name": durable, "ack_policy": "explicit", **config}
        self.js(f"CONSUMER.CREATE.{stream}.{durable}", {"stream_name": stream, "config": cfg})

    def consumer_info(self, stream: str, durable: str) -> dict[str, Any]:
        return self.js(f"CONSUMER.INFO.{stream}.{durable}")


def varz(http_port: int, timeout: float = 10.0) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/varz", timeout=timeout) as resp:
        data: dict[str, Any] = json.loads(resp.read())
    return data
