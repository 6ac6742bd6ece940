"""`serve --workers N`: N agent processes on one port, sharing the store as any agents do.

One Python process uses one core for the protocol and the write buffer. Agents share nothing
but the stores, so several of them on one host use its cores: each worker is a whole agent
(its own connections, write buffer and server id) listening on the same port with
SO_REUSEPORT, and the kernel spreads new connections over them. Only the first worker serves
monitoring. A worker that dies is started again; its clients reconnect to the others, and
nothing it acknowledged is lost (invariant 4).
"""

from __future__ import annotations

import ctypes
import logging
import signal
import socket
import subprocess
import sys
import time
from types import FrameType

from infinistream.settings import Settings

log = logging.getLogger(__name__)

RESTART_PAUSE_SECONDS = 1.0
_PR_SET_PDEATHSIG = 1


def _stop_with_parent() -> None:
    """In a worker before exec: SIGTERM it when the parent dies, even by kill -9 (Linux), so
    no worker outlives its supervisor; SIGTERM makes it answer what it holds, then exit."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _start(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, preexec_fn=_stop_with_parent)


def reserve_port(host: str, port: int) -> tuple[socket.socket, int]:
    """A socket bound (not listening) to the port the workers share, keeping it ours; port 0
    or -1 picks a free one."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, max(port, 0)))
    return sock, int(sock.getsockname()[1])


def worker_argv(serve_argv: list[str], index: int, port: int, cache_port: int = 0) -> list[str]:
    """The command line of worker `index`: the parent's flags, then the shared port (later
    flags win), and monitoring on the first worker only. Each worker is a zone cache agent of
    its own: a fixed cache port is the first worker's, the next ones take the ports after it."""
    argv = [sys.executable, "-m", "infinistream", "serve", *serve_argv]
    argv += ["--workers", "1", "--port", str(port), "--reuse-port"]
    if index:
        argv += ["--http_port", "0"]
        if cache_port:
            argv += ["--cache-port", str(cache_port + index)]
    return argv


def serve_workers(settings: Settings, serve_argv: list[str]) -> int:
    """Run `settings.workers` agents until SIGTERM or SIGINT; the exit code of the last stop."""
    reserved, port = reserve_port(settings.host, settings.port)
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    procs: list[subprocess.Popen[bytes]] = []
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        procs = [
            _start(worker_argv(serve_argv, i, port, settings.cache_port))
            for i in range(settings.workers)
        ]
        log.info("Started %d workers on port %d", len(procs), port)
        while True:
            for i, proc in enumerate(procs):
                code = proc.poll()
                if code is None or stopping:
                    continue
                log.error("worker %d (pid %d) exited with %d; starting it again", i, proc.pid, code)
                time.sleep(RESTART_PAUSE_SECONDS)
                procs[i] = _start(worker_argv(serve_argv, i, port, settings.cache_port))
            if stopping:
                return max((proc.wait() for proc in procs), default=0)
            time.sleep(0.2)
    finally:
        reserved.close()
