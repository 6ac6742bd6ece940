"""Fixtures that run the contract suite against every metadata backend.

To add a backend, add a param to `backend` whose `open` returns a new handle on one fresh, empty
store per test. Tests never assume the revision of an empty store is 0 (etcd starts at 1), only
how it moves.

The etcd param runs a real single-member etcd (tests/support/etcdserver.py), started once per
session on the first test that needs it and wiped before every test. The etcd-tls-auth param
runs another as production clusters run: HTTPS with client certificates, authentication on,
the store logged in as a user whose role may read and write the keyspace. It is never skipped:
without an `etcd` binary those tests fail and say how to install one (scripts/test does).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from infinistream.metadata import MetadataStore, open_metadata
from support.etcdserver import EtcdMissing, EtcdServer
from support.etcdtls import EtcdTls


@dataclass
class Backend:
    name: str
    # Opens one more handle on this test's store.
    open: Callable[[], MetadataStore]
    # Whether a second `open()` sees the same data (false for a private in-memory store).
    shared: bool
    handles: list[MetadataStore] = field(default_factory=list)

    def open_handle(self) -> MetadataStore:
        store = self.open()
        self.handles.append(store)
        return store


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One single-member etcd for the whole session."""
    try:
        server = EtcdServer(tmp_path_factory.mktemp("etcd"))
    except EtcdMissing as e:
        pytest.fail(str(e), pytrace=False)
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def secure_etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One single-member etcd with TLS, client certificates and authentication (user "agent",
    role "agents") for the whole session."""
    directory = tmp_path_factory.mktemp("etcd-secure")
    try:
        server = EtcdServer(directory / "etcd", tls=EtcdTls.make(directory / "tls"))
    except EtcdMissing as e:
        pytest.fail(str(e), pytrace=False)
    server.start()
    try:
        server.enable_auth()
        server.add_user("agent", "agents")
        yield server
    finally:
        server.close()


@pytest.fixture(params=["sqlite", "sqlite-memory", "etcd", "etcd-tls-auth"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "etcd":
        server: EtcdServer = request.getfixturevalue("etcd_server")
        server.wipe()
        yield Backend("etcd", lambda: open_metadata(server.url), shared=True)
    elif request.param == "etcd-tls-auth":
        secure: EtcdServer = request.getfixturevalue("secure_etcd_server")
        secure.wipe()
        url = secure.url_as("agent")
        yield Backend("etcd-tls-auth", lambda: open_metadata(url), shared=True)
    elif request.param == "sqlite":
        url = f"sqlite://{tmp_path / 'meta.db'}"
        yield Backend("sqlite", lambda: open_metadata(url), shared=True)
    elif request.param == "sqlite-memory":
        yield Backend("sqlite-memory", lambda: open_metadata("sqlite://:memory:"), shared=False)
    else:  # pragma: no cover
        raise AssertionError(request.param)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[MetadataStore]:
    first = backend.open_handle()
    yield first
    for handle in backend.handles:
        await handle.close()


@pytest.fixture
def second_handle(backend: Backend, store: MetadataStore) -> MetadataStore:
    """Another client of the same store (another agent), closed with `store`."""
    # Tests that take this fixture run only on shared backends (SHARED_BACKENDS).
    assert backend.shared, f"{backend.name} handles do not share a store"
    return backend.open_handle()
