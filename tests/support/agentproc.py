"""Run a real agent as a subprocess, the way users run it, for end-to-end tests.

    with running_agent(store_dir) as agent:
        nc = await nats.connect(agent.url)

The agent listens on a free port (`-p 0`) and the helper reads the port from the line
`Listening for client connections on HOST:PORT` that nats-server also prints.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

_LISTENING = re.compile(rb"Listening for client connections on (\S+):(\d+)")
_MONITOR = re.compile(rb"Starting http monitor on (\S+):(\d+)")


@dataclass
class AgentProcess:
    args: list[str]
    env: dict[str, str] | None = None
    # The program and its leading arguments; `args` follow. An agent unless told otherwise
    # (tests/support/servers.py runs nats-server through the same helper).
    command: list[str] = field(
        default_factory=lambda: [sys.executable, "-m", "infinistream", "serve", "-a", "127.0.0.1"]
    )
    process: subprocess.Popen[bytes] | None = None
    port: int = 0
    http_port: int = 0
    output: list[bytes] = field(default_factory=list)
    _ready: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> AgentProcess:
        env = dict(os.environ)
        env.update(self.env or {})
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._ready.clear()
        # Read again from this run's log: a restart must not pass for started on the old port.
        self.port = self.http_port = 0
        self.process = subprocess.Popen(
            [*self.command, *self.args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        if not self._ready.wait(timeout):
            self.kill()
            raise RuntimeError("agent did not start:\n" + self.log())
        if not self.port:
            # It exited before listening: say why now rather than let clients retry port 0.
            self.kill()
            raise RuntimeError("agent exited before listening:\n" + self.log())
        return self

    def _pump(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            if m := _MONITOR.search(line):
                self.http_port = int(m.group(2))
            if m := _LISTENING.search(line):
                self.port = int(m.group(2))
            if b"Server is ready" in line:
                self._ready.set()
        self._ready.set()

    def running(self) -> bool:
        """Not exited: a test waiting for the agent to do something stops waiting once it is
        gone, and says so, rather than sit out its time limit."""
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        return b"".join(self.output).decode(errors="replace")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, as an orchestrator would; returns the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def kill(self) -> None:
        """kill -9: no chance to flush or say goodbye."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def restart(self) -> AgentProcess:
        """kill -9, then start again with the same arguments: on the same port when it was
        given one (`-p PORT`), so that clients reconnect as they do to a restarted server."""
        self.kill()
        return self.start()


def agent_args(store_dir: Path | str, *extra: str) -> list[str]:
    return ["-p", "0", "-sd", str(store_dir), *extra]


@contextlib.contextmanager
def running_agent(
    store_dir: Path | str, *extra: str, env: dict[str, str] | None = None
) -> Iterator[AgentProcess]:
    agent = AgentProcess(agent_args(store_dir, *extra), env=env).start()
    try:
        yield agent
    finally:
        agent.kill()


def wait_for(predicate: object, timeout: float = 10.0, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(interval)
    raise TimeoutError("condition not met in time")
