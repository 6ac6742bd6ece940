"""Start an agent or nats-server that logs to a file (`-l`), and wait until it is ready.

`tests/support/agentproc.py` reads readiness from the process's output; with `-l` there is none, so
this reads the same lines (`Listening for client connections on HOST:PORT`, `Server is
ready`, which both servers print) from the log file.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from infinistream_bench.systems import nats_server_binary

_LISTENING = re.compile(r"Listening for client connections on (\S+):(\d+)")


@dataclass
class FileLogged:
    process: subprocess.Popen[bytes]
    logfile: Path
    port: int = 0

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def text(self) -> str:
        return self.logfile.read_text(errors="replace") if self.logfile.exists() else ""

    def output(self) -> str:
        """What the process wrote to stdout and stderr (once it has exited)."""
        out, _ = self.process.communicate(timeout=30)
        return out.decode(errors="replace")


def command(kind: str) -> list[str]:
    if kind == "agent":
        return [sys.executable, "-m", "infinistream", "serve", "-a", "127.0.0.1"]
    return [nats_server_binary(), "-a", "127.0.0.1", "-js"]


@contextlib.contextmanager
def logging_to_file(
    kind: str, store_dir: Path, logfile: Path, *extra: str, timeout: float = 30.0
) -> Iterator[FileLogged]:
    args = [*command(kind), "-p", "-1", "-sd", str(store_dir), "-l", str(logfile), *extra]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    server = FileLogged(proc, logfile)
    try:
        deadline = time.monotonic() + timeout
        while "Server is ready" not in server.text():
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"not ready: {server.output()}\n{server.text()}")
            time.sleep(0.05)
        m = _LISTENING.search(server.text())
        assert m, server.text()
        server.port = int(m.group(2))
        yield server
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
