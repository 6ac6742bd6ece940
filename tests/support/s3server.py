"""A real S3-compatible server for tests: moto's server mode in a subprocess.

The storage tests and the end-to-end tests talk to it over HTTP exactly as they would talk to
S3, so request signing, ranged GETs, conditional PUTs and listing all go through a real wire
protocol rather than an in-process mock.

    with s3_server() as s3:
        store = ObjectStore.from_url(s3.url, **s3.store_options())

or, for a session-long server, ``server = start_s3_server()`` ... ``server.stop()``.

Moto does not check signatures, so any key pair works; fixed fake credentials are handed out
so that clients never go looking for real ones (instance metadata, ~/.aws).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypedDict

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"
DEFAULT_BUCKET = "infinistream-test"


class S3Options(TypedDict):
    """Keyword arguments of ``ObjectStore.from_url`` that reach an S3 endpoint."""

    endpoint: str
    region: str
    access_key_id: str
    secret_access_key: str


@dataclass
class S3Server:
    """A running moto server with one bucket already created."""

    endpoint: str
    bucket: str
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    region: str = REGION
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The ``s3://`` URL of the bucket."""
        return f"s3://{self.bucket}"

    def store_options(self) -> S3Options:
        """Keyword arguments for ``ObjectStore.from_url`` to reach this server."""
        return {
            "endpoint": self.endpoint,
            "region": self.region,
            "access_key_id": self.access_key,
            "secret_access_key": self.secret_key,
        }

    def env(self) -> dict[str, str]:
        """The usual AWS_* variables, for processes (agents, Spark jobs) configured by env."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ENDPOINT": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ALLOW_HTTP": "true",
        }

    def create_bucket(self, name: str) -> None:
        """Create another bucket (moto accepts unsigned requests)."""
        _request("PUT", f"{self.endpoint}/{name}")

    def stop(self) -> None:
        """Stop the server process; safe to call twice."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def __enter__(self) -> S3Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _request(method: str, url: str) -> int:
    req = urllib.request.Request(url, method=method, data=b"" if method == "PUT" else None)
    with urllib.request.urlopen(req, timeout=5) as resp:
        status: int = resp.status
        return status


def _wait_until_up(proc: subprocess.Popen[bytes], endpoint: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            # ListBuckets: answers once the WSGI app is serving.
            _request("GET", f"{endpoint}/")
            return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.05)
    return False


def start_s3_server(
    bucket: str = DEFAULT_BUCKET,
    *,
    timeout: float = 30.0,
    attempts: int = 3,
    host: str = "127.0.0.1",
) -> S3Server:
    """Start ``python -m moto.server`` on a free port of `host` (loopback unless told) and
    create ``bucket``.

    The free port is found by binding port 0 and releasing it, so another process can grab it
    in between; a server that dies at startup is therefore retried on a new port.
    """
    env = dict(os.environ)
    # The server must not inherit settings that would point it (or boto inside it) elsewhere.
    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT", "MOTO_PORT"):
        env.pop(var, None)
    last_err = ""
    for _ in range(attempts):
        port = _free_port()
        endpoint = f"http://{host}:{port}"
        # A file, not a pipe: werkzeug logs every request, and a pipe nobody drains would
        # eventually block the server.
        with tempfile.TemporaryFile() as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
            server = S3Server(endpoint=endpoint, bucket=bucket, process=proc)
            if _wait_until_up(proc, endpoint, timeout):
                try:
                    server.create_bucket(bucket)
                except BaseException:
                    server.stop()
                    raise
                return server
            server.stop()
            log.seek(0)
            last_err = log.read().decode(errors="replace")[-2000:]
    raise RuntimeError(f"moto server did not start after {attempts} attempts: {last_err}")


@contextlib.contextmanager
def s3_server(bucket: str = DEFAULT_BUCKET) -> Iterator[S3Server]:
    """Context manager form of :func:`start_s3_server`."""
    server = start_s3_server(bucket)
    try:
        yield server
    finally:
        server.stop()
