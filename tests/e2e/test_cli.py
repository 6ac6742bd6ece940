"""`infinistream serve` as users run it: nats-server's flags and config file, its startup lines,
and a one-line message with a nonzero exit code for anything wrong."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import signal
import socket
import subprocess
import sys
import sysconfig
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nats
import nats.errors
import pytest
from packaging.requirements import Requirement

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
        (
            ["--lingr", "5ms"],
            "unrecognized arguments: --lingr 5ms (--lingr: did you mean --linger?)",
        ),
        (["--cluster", "nats://a:6222"], '"--cluster" is not supported by InfiniStream: agents do'),
        (["-routes", "nats://a:6222"], '"--routes" is not supported by InfiniStream: agents do'),
        (["-sl", "bogus"], 'unknown signal "bogus"'),
        (["-sl", "ldm=4194305"], 'signal "ldm" 4194305: No such process'),
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
        (
            ["-c", "CONF:port: -1\ninfinistream {\n  group: a\n  lingr: 5ms\n}\n"],
            """bad.conf:4:3: unknown infinistream setting 'lingr' (did you mean "linger"?)""",
        ),
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


# -- what `serve` needs ---------------------------------------------------------------------

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _base_distributions() -> set[str]:
    """pyproject.toml's dependencies (no extra), and theirs, as installed here."""
    pending = list(tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"])
    seen: set[str] = set()
    while pending:
        requirement = Requirement(pending.pop())
        name = requirement.name.lower().replace("_", "-")
        if name in seen or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        pending += importlib.metadata.requires(requirement.name) or []
    return seen


# Runs `python -m infinistream ARGS...` and, at exit, writes the top-level modules it imported
# from files (extensions' own runtime modules have none) to the file named by the first
# argument, a line each: name, file.
_RECORD_IMPORTS = """
import atexit, runpy, sys
record, sys.argv = sys.argv[1], ["infinistream", *sys.argv[2:]]
def write():
    tops = {name.split(".")[0] for name in sys.modules}
    files = {name: getattr(sys.modules.get(name), "__file__", None) for name in tops}
    open(record, "w").writelines(f"{n} {f}\\n" for n, f in files.items() if f)
atexit.register(write)
if len(sys.argv) > 1:
    runpy.run_module("infinistream", run_name="__main__")
"""
# The base interpreter's standard library (a virtualenv's own platstdlib holds site-packages).
_BASE = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
_STDLIB = tuple(
    str(Path(sysconfig.get_paths(vars=_BASE)[k]).resolve()) for k in ("stdlib", "platstdlib")
)


def _in_stdlib(file: str) -> bool:
    path = Path(file).resolve()
    return str(path).startswith(_STDLIB) and "site-packages" not in path.parts


def _imported(tmp_path: Path, argv: list[str], *, until: str | None = None) -> set[str]:
    """The top-level modules outside the standard library that `python -m infinistream argv`
    imports (up to the line `until` on its output, then stopped with SIGTERM), beyond what the
    interpreter imports anyway."""

    def run(name: str, args: list[str]) -> set[str]:
        record = tmp_path / name
        command = [sys.executable, "-c", _RECORD_IMPORTS, str(record), *args]
        if until is None or not args:
            subprocess.run(command, capture_output=True, timeout=120)
        else:
            agent = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
            assert agent.stderr is not None
            lines = []
            for line in agent.stderr:
                lines.append(line)
                if until in line:
                    agent.send_signal(signal.SIGTERM)
            assert agent.wait(60) == 0 and any(until in line for line in lines), "".join(lines)
        lines = (line.split(" ", 1) for line in record.read_text().splitlines())
        return {name for name, file in lines if not _in_stdlib(file)}

    return run("imported", argv) - run("interpreter", [])


@pytest.mark.parametrize(
    "argv",
    [["serve", "-v"], ["serve", "-a", "127.0.0.1", "-p", "-1", "-m", "-1", "-sd", "{tmp}"]],
    ids=["version", "agent"],
)
def test_serve_imports_only_the_base_dependencies(tmp_path: Path, argv: list[str]) -> None:
    """What `infinistream serve` imports, up to an agent that is ready, comes from the standard
    library, InfiniStream or a base dependency: nothing of an extra (`[pipeline]`, `[test]`)
    nor of the benchmark suite, which `pip install .` does not install."""
    args = [a.replace("{tmp}", str(tmp_path / "store")) for a in argv]
    modules = _imported(tmp_path, args, until="Server is ready" if "-sd" in argv else None)
    assert "infinistream" in modules
    owners = importlib.metadata.packages_distributions()
    allowed = _base_distributions()
    foreign = {
        name: owners.get(name, ["?"])
        for name in modules - {"infinistream"}
        if not {d.lower().replace("_", "-") for d in owners.get(name, [])} & allowed
    }
    assert foreign == {}, f"imported by serve, not in pyproject's dependencies: {foreign}"


# Where a package's import name is not its distribution's, and what the agent's own code may
# import without declaring it: the benchmark suite, a distribution of this repository that
# `infinistream bench` loads when installed.
_IMPORT_NAMES = {
    "nacl": "pynacl",
    "nats": "nats-py",
    "prometheus_client": "prometheus-client",
    "zlib_ng": "zlib-ng",
}
_OUR_OTHER = {"infinistream_bench"}


def test_every_package_the_source_imports_is_declared() -> None:
    """Every third-party package imported anywhere in the agent's source is a dependency in
    pyproject.toml: a base one, or one of the `[pipeline]` extra for the pipeline's modules
    (which import it when a job runs). A package that comes only as another's dependency
    would go when that one stops needing it."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]

    def names(requirements: list[str]) -> set[str]:
        return {Requirement(r).name.lower() for r in requirements}

    base = names(project["dependencies"])
    pipeline = base | names(project["optional-dependencies"]["pipeline"])
    source = Path(__file__).resolve().parents[2] / "src" / "infinistream"
    undeclared = []
    for module in source.rglob("*.py"):
        allowed = pipeline if "pipeline" in module.relative_to(source).parts else base
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top in sys.stdlib_module_names or top in {"infinistream", *_OUR_OTHER}:
                    continue
                if _IMPORT_NAMES.get(top, top).lower() not in allowed:
                    undeclared.append(f"{module.relative_to(source)}: {top}")
    assert undeclared == []


def test_pipeline_flags_are_checked_before_spark_starts(tmp_path: Path) -> None:
    scan = ["pipeline", "scan", "-sd", str(tmp_path), "--spark-log", "chatty"]
    done = subprocess.run(
        [sys.executable, "-m", "infinistream", *scan],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--spark-log: invalid choice: 'CHATTY'" in done.stderr, done.stderr
