"""The shared stores a pool of agents runs on, started for a benchmark: an etcd cluster of
`members` on loopback, and moto's S3-compatible server with one bucket.

Both are real servers over their real wire protocols, as tests/support/etcdserver.py
and tests/support/s3server.py start them for the tests; the benchmark lives in the package, so
it has its own small launcher.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

from infinistream_bench.control import BenchError

S3_KEY = "testing"
S3_REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str, process: subprocess.Popen[bytes], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BenchError(f"{what} exited with code {process.returncode}")
        with contextlib.suppress(OSError, ValueError), urllib.request.urlopen(url, timeout=2) as r:
            if r.status < 500:
                return
        time.sleep(0.1)
    raise BenchError(f"{what} did not come up in {timeout:g}s")


@contextlib.contextmanager
def etcd_cluster(work: Path, members: int, data: Path | None = None) -> Iterator[str]:
    """An etcd cluster of `members` on loopback; yields its `etcd://` metadata URL. With
    `data` (one member), the member starts on a copy of that data directory, one kept by
    `etcd_keep`: etcd takes its members from the data then, not from the flags. Each member's
    pid is in WORK/etcd-mI.pid, for `etcd_keep`."""
    binary = shutil.which("etcd")
    if binary is None:
        raise BenchError("etcd not found on PATH (apt-get install etcd-server)")
    work.mkdir(parents=True, exist_ok=True)
    if data is not None:
        if members != 1:
            raise BenchError("a kept etcd data directory starts one member")
        shutil.rmtree(work / "etcd-m0", ignore_errors=True)
        shutil.copytree(data, work / "etcd-m0")
    ports = [(free_port(), free_port()) for _ in range(members)]
    cluster = ",".join(f"m{i}=http://127.0.0.1:{peer}" for i, (_, peer) in enumerate(ports))
    token = uuid.uuid4().hex[:12]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, (client, peer) in enumerate(ports):
            log = (work / f"etcd-m{i}.log").open("ab")
            procs.append(
                subprocess.Popen(
                    [
                        binary,
                        f"--name=m{i}",
                        f"--data-dir={work / f'etcd-m{i}'}",
                        f"--listen-client-urls=http://127.0.0.1:{client}",
                        f"--advertise-client-urls=http://127.0.0.1:{client}",
                        f"--listen-peer-urls=http://127.0.0.1:{peer}",
                        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                        f"--initial-cluster={cluster}",
                        "--initial-cluster-state=new",
                        f"--initial-cluster-token={token}",
                        "--max-txn-ops=100000",
                        "--max-request-bytes=33554432",
                        "--quota-backend-bytes=8589934592",
                        # No --auto-compaction-*: the agents compact the history of their
                        # writes themselves (metadata/etcd_history.py), and the database's
                        # size measured here is what that leaves.
                        "--log-level=warn",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            )
            log.close()
            (work / f"etcd-m{i}.pid").write_text(str(procs[-1].pid))
        for proc, (client, _) in zip(procs, ports, strict=True):
            _wait(f"http://127.0.0.1:{client}/health", proc, "etcd")
        yield "etcd://" + ",".join(f"127.0.0.1:{client}" for client, _ in ports)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def etcd_keep(work: Path, to: Path, member: int = 0) -> None:
    """A copy of a running member's data directory at `to`. The member is stopped (SIGSTOP)
    while it is copied, so the copy is what a crash at that instant would leave, which etcd
    recovers from (its database and log are written to survive a crash anywhere)."""
    pid = int((work / f"etcd-m{member}.pid").read_text())
    os.kill(pid, signal.SIGSTOP)
    try:
        shutil.copytree(work / f"etcd-m{member}", to)
    finally:
        os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def s3_server(work: Path, bucket: str = "bench") -> Iterator[tuple[str, dict[str, str]]]:
    """moto's S3 server; yields the objects URL and the agent options/environment it needs."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    work.mkdir(parents=True, exist_ok=True)
    with (work / "moto.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        _wait(f"{endpoint}/moto-api/", proc, "moto server")
        request = urllib.request.Request(f"{endpoint}/{bucket}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass
        yield (
            f"s3://{bucket}/pool",
            {
                "AWS_ACCESS_KEY_ID": S3_KEY,
                "AWS_SECRET_ACCESS_KEY": S3_KEY,
                "endpoint": endpoint,
                "region": S3_REGION,
            },
        )
    finally:
        proc.kill()
        proc.wait()


def sqlite_counts(db: Path, prefixes: dict[str, str]) -> dict[str, int]:
    """Keys under each prefix of an SQLite metadata file, and their bytes (`NAME_bytes`: keys
    plus values, what any backend stores), read-only beside a live agent."""
    import sqlite3

    from infinistream.metadata.kv import prefix_end

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        out = {}
        for name, prefix in prefixes.items():
            low = prefix.encode()
            high = prefix_end(low)
            row = conn.execute(
                "SELECT count(*), coalesce(sum(length(key) + length(value)), 0) FROM kv"
                " WHERE key >= ? AND key < ?",
                (low, high),
            ).fetchone()
            out[name] = int(row[0])
            out[f"{name}_bytes"] = int(row[1])
        return out
    finally:
        conn.close()


async def metadata_counts(url: str, prefixes: dict[str, str]) -> dict[str, int]:
    """`sqlite_counts` on any metadata store, through a handle of its own (beside a live agent):
    the keys under each prefix and their bytes (`NAME_bytes`, keys plus values as stored)."""
    from infinistream.metadata import open_metadata

    meta = open_metadata(url)
    try:
        out = {}
        for name, prefix in prefixes.items():
            items = await meta.range(prefix)
            out[name] = len(items)
            out[f"{name}_bytes"] = sum(len(i.key.encode()) + len(i.value) for i in items)
        return out
    finally:
        await meta.close()


def etcd_db_bytes(client_url: str) -> tuple[int, int]:
    """The size of an etcd member's database file (what its backend quota is compared with)
    and the part of it in use (the rest: pages freed by compaction, reused before the file
    grows), from its maintenance status endpoint."""
    request = urllib.request.Request(f"{client_url}/v3/maintenance/status", data=b"{}")
    with urllib.request.urlopen(request, timeout=10) as answer:
        status = json.loads(answer.read())
    size = int(status["dbSize"])
    return size, int(status.get("dbSizeInUse", size))


def file_bytes(*paths: Path) -> int:
    return sum(p.stat().st_size for p in paths if p.exists())


def json_line(data: object) -> str:
    return json.dumps(data, sort_keys=True)
