"""Fixtures for the storage tests: one ObjectStore per backend, S3 being a real moto server."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# tests/ is not a package; make the shared helper importable however pytest was started.
_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from infinistream.storage import ObjectStore  # noqa: E402
from support.s3server import S3Server, start_s3_server  # noqa: E402

BACKENDS = ["file", "memory", "s3"]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = start_s3_server()
    try:
        yield server
    finally:
        server.stop()


def _make_store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> ObjectStore:
    if backend == "file":
        return ObjectStore.from_url((tmp_path / "objects").as_uri())
    if backend == "memory":
        return ObjectStore.from_url("memory://")
    server: S3Server = request.getfixturevalue("s3_server")
    # One bucket for the session, a fresh prefix per test: tests cannot see each other.
    return ObjectStore.from_url(f"{server.url}/t-{uuid.uuid4().hex}", **server.store_options())


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    return _make_store(request.param, tmp_path, request)


@pytest.fixture
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], ObjectStore]:
    """A fresh store on the named backend ("file", "memory" or "s3"), for tests that pick."""
    counter = iter(range(1_000_000))

    def make(backend: str) -> ObjectStore:
        return _make_store(backend, tmp_path / f"store{next(counter)}", request)

    return make
