"""`infinistream serve` as users run it: nats-server's flags and config file, its startup lines,
and a one-line message with a nonzero exit code for anything wrong."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nats
import nats.errors
import pytest

from infinistream import __version__
from support.agentproc import AgentProcess
from support.rawnats import RawClient
from support.storeinspect import object_keys


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def started() -> Iterator[list[AgentProcess]]:
    """Agents a test starts with its own flags; killed at the end."""
    agents: list[AgentProcess] = []
    yield agents
    for agent in agents:
        agent.kill()


def _start(started: list[AgentProcess], *args: str) -> AgentProcess:
    agent = AgentProcess(list(args))
    started.append(agent)
    return agent.start()


def _serve(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """Run `infinistream serve` expecting it to exit on its own."""
    return subprocess.run(
        [sys.executable, "-m", "infinistream", "serve", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _varz(agent: AgentProcess) -> dict:
    url = f"http://127.0.0.1:{agent.http_port}/varz"
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


# -- startup output -----------------------------------------------------------------------


def test_prints_listening_address_and_ready(started: list[AgentProcess], tmp_path: Path) -> None:
    port = _free_port()
    agent = _start(started, "-p", str(port), "-sd", str(tmp_path))
    log = agent.log()
    assert f"Listening for client connections on 127.0.0.1:{port}" in log
    assert "Server is ready" in log
    assert log.index("Listening for client connections") < log.index("Server is ready")
    assert agent.port == port


@pytest.mark.parametrize("style", ["-p {}", "-p={}", "--port={}", "--port {}", "-port {}"], ids=str)
async def test_port_flag_styles(started: list[AgentProcess], tmp_path: Path, style: str) -> None:
    port = _free_port()
    agent = _start(started, *style.format(port).split(), "-sd", str(tmp_path))
    assert agent.port == port
    client = await RawClient.open(port)
    assert client.info["port"] == port
    await client.close()


async def test_address_monitor_jetstream_and_store_dir_flags(
    started: list[AgentProcess], tmp_path: Path
) -> None:
    http_port = _free_port()
    store = tmp_path / "data"
    agent = _start(
        started, "--addr=127.0.0.1", "-p", "0", "-m", str(http_port), "-js", "-sd", str(store)
    )
    assert f"Listening for client connections on 127.0.0.1:{agent.port}" in agent.log()
    assert agent.http_port == http_port
    assert _varz(agent)["jetstream"]["config"]["store_dir"] == str(store)
    nc = await nats.connect(agent.url)
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="SD", subjects=["sd"])
    await js.publish("sd", b"x")
    await nc.close()
    assert (store / "meta.db").is_file()
    assert object_keys(store / "objects")


async def test_config_file_in_nats_server_syntax(
    started: list[AgentProcess], tmp_path: Path
) -> None:
    port, http_port = _free_port(), _free_port()
    objects, meta = tmp_path / "objs", tmp_path / "md" / "meta.db"
    meta.parent.mkdir()
    config = tmp_path / "agent.conf"
    config.write_text(
        f"""
        listen: 127.0.0.1:{port}
        http_port: {http_port}
        max_payload: 64KB
        jetstream {{
            store_dir: "{tmp_path / "unused"}"
        }}
        infinistream {{
            objects: "{objects.as_uri()}"
            metadata: "sqlite:///{str(meta).lstrip("/")}"
            linger: 20ms
            batch_bytes: 512KB
            group: cfg
        }}
        authorization {{
            user: alice
            password: s3cret
        }}
        """
    )
    agent = _start(started, "-c", str(config))
    assert agent.port == port
    assert agent.http_port == http_port
    raw = await RawClient.open(port)
    assert raw.info["max_payload"] == 64 * 1024
    assert raw.info["auth_required"] is True
    await raw.close()
    varz = _varz(agent)["infinistream"]
    assert (varz["group"], varz["linger_ms"], varz["batch_bytes"]) == ("cfg", 20, 512 * 1024)

    nc = await nats.connect(agent.url, user="alice", password="s3cret")
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="CFG", subjects=["cfg"])
    await js.publish("cfg", b"x")
    await nc.close()
    assert meta.is_file()
    written = object_keys(objects)
    assert written
    assert all(key.split("/")[0] == "cfg" for key in written)
    assert not (tmp_path / "unused").exists()


async def test_flags_override_the_config_file(started: list[AgentProcess], tmp_path: Path) -> None:
    config = tmp_path / "agent.conf"
    config.write_text(f"port: {_free_port()}\n")
    port = _free_port()
    agent = _start(started, "--config", str(config), "--port", str(port), "-sd", str(tmp_path))
    assert agent.port == port


async def test_user_and_password_flags_require_them(
    started: list[AgentProcess], tmp_path: Path
) -> None:
    agent = _start(started, "-p", "0", "-sd", str(tmp_path), "--user", "u1", "--pass", "p1")
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(agent.url, user="u1", password="wrong", allow_reconnect=False)
    nc = await nats.connect(agent.url, user="u1", password="p1")
    await nc.flush()
    await nc.close()


async def test_auth_flag_requires_the_token(started: list[AgentProcess], tmp_path: Path) -> None:
    agent = _start(started, "-p", "0", "-sd", str(tmp_path), "--auth", "tok")
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(agent.url, allow_reconnect=False)
    nc = await nats.connect(agent.url, token="tok")
    await nc.flush()
    await nc.close()


@pytest.mark.parametrize("how", ["stop", "interrupt"])
def test_sigterm_and_sigint_exit_cleanly(
    started: list[AgentProcess], tmp_path: Path, how: str
) -> None:
    agent = _start(started, "-p", "0", "-sd", str(tmp_path))
    assert agent.process is not None
    if how == "interrupt":
        agent.process.send_signal(2)
    assert agent.stop() == 0
    assert "Server Exiting" in agent.log()


def test_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "infinistream", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0
    assert __version__ in out.stdout


# -- errors: a clear line and a nonzero exit, never a traceback ---------------------------


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.conf"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--bogus"], "unrecognized arguments"),
        (["-p", "abc"], "invalid int value"),
        (["-p", "70000"], "port out of range"),
        (["--linger", "soon"], "invalid duration"),
        (["--batch-bytes", "lots"], "invalid size"),
        (["--group", "a/b"], "group"),
        (["-c", "{tmp}/missing.conf"], "error opening config file"),
        (["-c", "CONF:port: 4222\nlisten {\n"], "never closed"),
        (["-c", 'CONF:port: "abc"\n'], "port: expected an integer"),
        (["-c", 'CONF:ping_interval: "often"\n'], "invalid duration"),
        (["-c", "CONF:infinistream { colour: blue }\n"], "colour"),
        (["--objects", "ftp://nowhere"], "unsupported object store URL"),
        (["--metadata", "mysql://nowhere"], "unknown metadata URL scheme"),
    ],
    ids=lambda v: " ".join(v).replace("\n", " ") if isinstance(v, list) else None,
)
def test_bad_flags_and_config_exit_nonzero_with_a_message(
    tmp_path: Path, args: list[str], needle: str
) -> None:
    argv = []
    for arg in args:
        if arg.startswith("CONF:"):
            arg = _config(tmp_path, arg.removeprefix("CONF:"))
        argv.append(arg.replace("{tmp}", str(tmp_path)))
    result = _serve("-p", "0", "-sd", str(tmp_path / "store"), *argv)
    assert result.returncode != 0
    assert needle in result.stderr + result.stdout
    assert "Traceback" not in result.stderr + result.stdout


def test_port_in_use_exits_nonzero_with_a_message(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _serve("-a", "127.0.0.1", "-p", str(port), "-sd", str(tmp_path))
    assert result.returncode != 0
    assert "address already in use" in result.stderr
    assert "Traceback" not in result.stderr


def test_store_dir_that_is_a_file_exits_nonzero_with_a_message(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    result = _serve("-p", "0", "-sd", str(not_a_dir))
    assert result.returncode != 0
    assert str(not_a_dir) in result.stderr
    assert "Traceback" not in result.stderr
