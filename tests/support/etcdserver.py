"""A real etcd for tests: one member or a small cluster on free loopback ports, in a temp dir.

    server = EtcdServer(tmp_dir, members=3)
    server.start()            # returns once every member answers GET /health
    open_metadata(server.url) # "etcd://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
    server.stop_member(0); server.start_member(0)
    server.stop(); server.start()   # same ports, same data: a restart
    server.close()                  # stop and delete the data

With `tls` (tests/support/etcdtls.py) the members serve HTTPS and want a client certificate
signed by the test CA (`--client-cert-auth`); `enable_auth` turns etcd authentication on (a
root user, then users and roles the tests add). `url` then carries what an agent needs:
`etcd+https://...?cacert=&cert=&key=` and, for a `user`, `user=&password_file=`.
Members run with the limits the metadata store needs (`--max-txn-ops`, `--max-request-bytes`,
see infinistream.metadata.etcd) and short raft timers, since everything is on loopback.
There is no skip when `etcd` is missing: `EtcdServer` raises `EtcdMissing` with how to install it.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.etcdtls import EtcdTls

MAX_TXN_OPS = 100_000
MAX_REQUEST_BYTES = 32 * 1024 * 1024
INSTALL_HINT = (
    "the etcd tests need an `etcd` binary on PATH: run scripts/test (it installs it), or"
    " `apt-get install etcd-server` on Debian/Ubuntu"
)

_running: set[EtcdServer] = set()


class EtcdMissing(RuntimeError):
    pass


def etcd_binary() -> str:
    path = shutil.which("etcd")
    if path is None:
        raise EtcdMissing(INSTALL_HINT)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Member:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    scheme: str = "http"
    host: str = "127.0.0.1"

    @property
    def client_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"


class EtcdServer:
    def __init__(
        self,
        directory: Path,
        *,
        members: int = 1,
        max_txn_ops: int | None = MAX_TXN_OPS,
        max_request_bytes: int | None = MAX_REQUEST_BYTES,
        start_timeout: float = 30.0,
        tls: EtcdTls | None = None,
        auth_token_ttl: int | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        """`max_txn_ops`/`max_request_bytes` None: etcd's defaults (128 ops, 1.5 MiB).
        `auth_token_ttl`: seconds a simple token lives (etcd's default is 300)."""
        self.binary = etcd_binary()
        self.limits = [
            *([f"--max-txn-ops={max_txn_ops}"] if max_txn_ops is not None else []),
            *(
                [f"--max-request-bytes={max_request_bytes}"]
                if max_request_bytes is not None
                else []
            ),
        ]
        if auth_token_ttl is not None:
            self.limits.append(f"--auth-token-ttl={auth_token_ttl}")
        self.directory = Path(directory)
        self.start_timeout = start_timeout
        self.tls = tls
        # Set by enable_auth: the root user's password, and each user's password file.
        self.root_password: str | None = None
        self.password_files: dict[str, Path] = {}
        self.token = f"infinistream-test-{uuid.uuid4().hex[:12]}"
        self.members = [
            Member(
                name=f"m{i}",
                client_port=free_port(),
                peer_port=free_port(),
                data_dir=self.directory / f"m{i}",
                log_path=self.directory / f"m{i}.log",
            )
            for i in range(members)
        ]
        for member in self.members:
            member.scheme = "https" if tls is not None else "http"
            # Clients reach the members here (another address than loopback: from a network
            # namespace a test made).
            member.host = host

    # -- addresses ----------------------------------------------------------------------------

    @property
    def endpoints(self) -> list[str]:
        """host:port of every member, in member order."""
        return [f"{m.host}:{m.client_port}" for m in self.members]

    @property
    def url(self) -> str:
        return self.url_as()

    def url_as(self, user: str | None = None) -> str:
        """The metadata URL for an agent, as `user` when given."""
        if self.tls is None and user is None:
            return "etcd://" + ",".join(self.endpoints)
        scheme = "etcd+https" if self.tls is not None else "etcd"
        options = []
        if self.tls is not None:
            t = self.tls
            options += [f"cacert={t.ca}", f"cert={t.client.cert}", f"key={t.client.key}"]
        if user is not None:
            options += [f"user={user}", f"password_file={self.password_files[user]}"]
        return f"{scheme}://{','.join(self.endpoints)}?{'&'.join(options)}"

    def url_for(self, *indexes: int) -> str:
        """A metadata URL listing the given members, in that order."""
        return "etcd://" + ",".join(self.endpoints[i] for i in indexes)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        for i in range(len(self.members)):
            self._spawn(i)
        _running.add(self)
        for i in range(len(self.members)):
            self.wait_healthy(i)

    def stop(self, *, kill: bool = False) -> None:
        """Stop every member (SIGTERM: a clean shutdown; `kill`: SIGKILL, a crash)."""
        # Signal every member first, then wait: one at a time, each later member would spend
        # seconds on leadership transfer and a cluster without quorum.
        for member in self.members:
            if member.process is not None and member.process.poll() is None:
                member.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        for i in range(len(self.members)):
            self.stop_member(i, kill=kill)
        _running.discard(self)

    def close(self) -> None:
        """Stop and delete the data (no clean shutdown needed: nothing is kept)."""
        self.stop(kill=True)
        shutil.rmtree(self.directory, ignore_errors=True)

    def start_member(self, index: int) -> None:
        self._spawn(index)
        _running.add(self)
        self.wait_healthy(index)

    def stop_member(self, index: int, *, kill: bool = False) -> None:
        member = self.members[index]
        process, member.process = member.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _spawn(self, index: int) -> None:
        member = self.members[index]
        if member.process is not None and member.process.poll() is None:
            return
        member.data_dir.mkdir(parents=True, exist_ok=True)
        cluster = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        # "new" on first boot; on later boots etcd reads the membership from its data dir.
        state = "existing" if (member.data_dir / "member").exists() else "new"
        args = [
            self.binary,
            f"--name={member.name}",
            f"--data-dir={member.data_dir}",
            f"--listen-client-urls={member.client_url}",
            f"--advertise-client-urls={member.client_url}",
            f"--listen-peer-urls={member.peer_url}",
            f"--initial-advertise-peer-urls={member.peer_url}",
            f"--initial-cluster={cluster}",
            f"--initial-cluster-state={state}",
            f"--initial-cluster-token={self.token}",
            *self.limits,
            *self._tls_args(),
            "--heartbeat-interval=50",
            "--election-timeout=500",
            "--logger=zap",
            "--log-outputs=stderr",
            "--log-level=warn",
        ]
        log = member.log_path.open("ab")
        try:
            member.process = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        finally:
            log.close()

    def _tls_args(self) -> list[str]:
        if self.tls is None:
            return []
        t = self.tls
        return [
            f"--cert-file={t.member.cert}",
            f"--key-file={t.member.key}",
            f"--trusted-ca-file={t.ca}",
            "--client-cert-auth",
        ]

    def _ssl(self) -> ssl.SSLContext | None:
        """The tests' own TLS client (the admin certificate)."""
        if self.tls is None:
            return None
        context = ssl.create_default_context(cafile=str(self.tls.ca))
        context.load_cert_chain(self.tls.admin.cert, self.tls.admin.key)
        return context

    def wait_healthy(self, index: int) -> None:
        member = self.members[index]
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            if member.process is None or member.process.poll() is not None:
                raise RuntimeError(f"etcd member {member.name} exited: {self.log_tail(index)}")
            try:
                with urllib.request.urlopen(
                    f"{member.client_url}/health", timeout=2, context=self._ssl()
                ) as response:
                    body = json.loads(response.read())
                if body.get("health") == "true":
                    return
                last = repr(body)
            except (OSError, ValueError) as e:
                last = repr(e)
            time.sleep(0.05)
        raise RuntimeError(
            f"etcd member {member.name} not healthy after {self.start_timeout:g} s ({last}):"
            f" {self.log_tail(index)}"
        )

    def log_tail(self, index: int, lines: int = 20) -> str:
        try:
            text = self.members[index].log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    # -- direct access (independent of the code under test) -------------------------------------

    def call(self, path: str, body: dict[str, Any], index: int | None = None) -> dict[str, Any]:
        """POST to the gateway of member `index` (default: the first one running), as root
        once authentication is on."""
        indexes = (
            [index]
            if index is not None
            else [i for i, m in enumerate(self.members) if m.process and m.process.poll() is None]
        )
        url = self.members[indexes[0]].client_url
        headers = {"Content-Type": "application/json"}
        if self.root_password is not None and path != "/v3/auth/authenticate":
            login = {"name": "root", "password": self.root_password}
            headers["Authorization"] = self.call("/v3/auth/authenticate", login, index)["token"]
        request = urllib.request.Request(
            f"{url}{path}", data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        with urllib.request.urlopen(request, timeout=30, context=self._ssl()) as response:
            result: dict[str, Any] = json.loads(response.read())
        return result

    # -- authentication (independent of the code under test) ------------------------------------

    def enable_auth(self) -> None:
        """A root user with the root role, then etcd authentication on."""
        password = uuid.uuid4().hex
        self.call("/v3/auth/user/add", {"name": "root", "password": password})
        self.call("/v3/auth/user/grant", {"user": "root", "role": "root"})
        self.call("/v3/auth/enable", {})
        self.root_password = password

    def add_user(self, user: str, role: str) -> Path:
        """A user with `role`, which may read and write every key; its password file."""
        password = uuid.uuid4().hex
        self.call("/v3/auth/user/add", {"name": user, "password": password})
        self.call("/v3/auth/role/add", {"name": role})
        self.grant(role)
        self.call("/v3/auth/user/grant", {"user": user, "role": role})
        path = self.directory / f"{user}.password"
        path.write_text(password + "\n")
        self.password_files[user] = path
        return path

    def grant(self, role: str) -> None:
        """Read and write on the whole keyspace to `role`."""
        everything = base64.b64encode(b"\x00").decode()
        permission = {"permType": "READWRITE", "key": everything, "range_end": everything}
        self.call("/v3/auth/role/grant", {"name": role, "perm": permission})

    def revoke(self, role: str) -> None:
        """Take the whole keyspace away from `role`: its users may do nothing."""
        everything = base64.b64encode(b"\x00").decode()
        self.call(
            "/v3/auth/role/revoke", {"role": role, "key": everything, "range_end": everything}
        )

    def set_password(self, user: str, password: str) -> None:
        self.call("/v3/auth/user/changepw", {"name": user, "password": password})

    def wipe(self) -> None:
        """Delete every key (the revision keeps counting: etcd never resets it)."""
        everything = base64.b64encode(b"\x00").decode()
        self.call("/v3/kv/deleterange", {"key": everything, "range_end": everything})

    def leader(self) -> int:
        """The index of the member that leads the cluster."""
        for i, m in enumerate(self.members):
            if m.process is None or m.process.poll() is not None:
                continue
            with contextlib.suppress(OSError, urllib.error.URLError):
                status = self.call("/v3/maintenance/status", {}, i)
                if status.get("leader") == status["header"]["member_id"]:
                    return i
        raise RuntimeError("no etcd member reports itself as the leader")


@atexit.register
def _stop_leftovers() -> None:
    # A test run that dies before its fixtures' teardown must not leave etcd processes behind.
    for server in list(_running):
        with contextlib.suppress(Exception):
            server.stop()


__all__ = ["INSTALL_HINT", "EtcdMissing", "EtcdServer", "etcd_binary", "free_port"]
