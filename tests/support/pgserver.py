"""A real PostgreSQL server for tests, from Debian's binaries (scripts/lib.sh installs them):
`initdb` into a temporary directory, `postgres` on a free loopback port, one database.

    server = PostgresServer()
    server.start()
    server.url        # "postgresql://infinistream@127.0.0.1:PORT/catalog"
    server.stop()     # stops it and deletes its data

PostgreSQL refuses to run as root: when the tests do, the server runs as the `postgres` user
that Debian's package made, in a directory of its own under the temporary directory.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

INSTALL_HINT = (
    "the PostgreSQL catalog test needs Debian's postgresql (scripts/test installs it: "
    "apt-get install postgresql)"
)
USER = "infinistream"
DATABASE = "catalog"


class PostgresMissing(RuntimeError):
    pass


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if not found:
        raise PostgresMissing(INSTALL_HINT)
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="infinistream-pg-"))
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{DATABASE}"

    def _as_owner(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv

    def start(self, timeout: float = 60.0) -> PostgresServer:
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        data = self.root / "data"
        initdb = [str(self.bin / "initdb"), "-D", str(data), "-U", USER, "--auth=trust"]
        subprocess.run(self._as_owner(initdb), check=True, capture_output=True)
        self.port = _free_port()
        log = open(self.root / "server.log", "wb")  # noqa: SIM115 - the process keeps it
        server = [str(self.bin / "postgres"), "-D", str(data), "-h", "127.0.0.1"]
        server += ["-p", str(self.port), "-k", str(self.root), "-c", "fsync=off"]
        self.process = subprocess.Popen(
            self._as_owner(server),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready = subprocess.run(
                ["pg_isready", "-h", "127.0.0.1", "-p", str(self.port)], capture_output=True
            )
            if ready.returncode == 0:
                break
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        else:
            self.stop()
            raise RuntimeError("PostgreSQL did not start in time")
        if self.process.poll() is not None:
            text = (self.root / "server.log").read_text(errors="replace")
            self.stop()
            raise RuntimeError(f"PostgreSQL did not start: {text[-2000:]}")
        subprocess.run(
            [str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", USER,
             DATABASE],
            check=True,
            capture_output=True,
        )  # fmt: skip
        return self

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            subprocess.run(
                self._as_owner(
                    [str(self.bin / "pg_ctl"), "stop", "-D", str(self.root / "data"), "-m", "fast"]
                ),
                capture_output=True,
                timeout=60,
            )
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)
