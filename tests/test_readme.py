"""The README works as a new user follows it, on a clean copy of the repository
(tests/support/scriptvenv.py: the files git tracks, as in the working tree) with a shell
environment that knows nothing of the test environment:

- the quick start in order: `./scripts/serve` installs the project into the copy's `.venv`
  (made from the base interpreter; checked to see no other environment's packages) and starts
  an agent that reaches "Server is ready"; the client snippet, with nats-py installed as the
  README says, publishes to it; `./scripts/pipeline scan -sd ./infinistream-data` installs the
  pipeline's extra and checks the agent's store, printing its result and none of Spark's log;
  the pipeline section's `./scripts/pipeline tables` command appends the stream to its Iceberg
  table, which the next snippet queries with pyiceberg and DuckDB; the data source snippet
  reads the stream back;
- `pip install .` into a virtualenv of its own, then `infinistream serve -v` and an agent
  started with `infinistream serve`, with the base dependencies only; there, `infinistream bench`
  and `infinistream pipeline` say what to install instead of failing on an import.

Commands run as written, from the copy's root (where `./infinistream-data` is the agent's
store); the one change is the ports: free ones instead of the documented 4222 and 8222, which
other tests may hold. Each script says what it installs, a line per step, and no install prints
setuptools' license deprecation warning. The config file example passes `serve -t`.

What it costs: two virtualenvs and three installs (the project, nats-py, the [pipeline] extra
with Spark; then the project again), from pip's cache when it has the files, and three Spark
jobs: a few minutes on an idle machine, far more on a busy one.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import infinistream
from support.scriptvenv import (
    ROOT,
    activated,
    assert_isolated,
    clean_copy,
    no_install_warnings,
    user_env,
)

README = ROOT / "README.md"
DOCUMENTED_URL = "nats://127.0.0.1:4222"
# Free ports, for the documented ones.
PORTS = ["-a", "127.0.0.1", "-p", "-1", "-m", "-1"]
# `serve -t` below runs this checkout's sources, by absolute path.
SOURCES = str(Path(infinistream.__file__).resolve().parent.parent)
# The JVM says this of the module Spark adds to it, before any logging setting can act.
JVM_NOTICE = "WARNING: Using incubator modules"


def python_snippets() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), re.M | re.S)


def table_command() -> list[str]:
    """The pipeline section's command that makes the table, as written."""
    blocks = re.findall(r"^```sh\n(.*?)^```", README.read_text(), re.M | re.S)
    commands = [b.strip() for b in blocks if "pipeline tables" in b]
    assert len(commands) == 1 and "\n" not in commands[0], commands
    return shlex.split(commands[0])


def test_readme_snippets_are_the_client_the_table_and_the_data_source() -> None:
    snippets = python_snippets()
    assert len(snippets) == 3
    assert DOCUMENTED_URL in snippets[0]
    assert "duckdb" in snippets[1] and "pyiceberg" in snippets[1]
    assert "./infinistream-data" in snippets[2]
    assert table_command() == ["./scripts/pipeline", "tables", "-sd", "./infinistream-data"]
    assert "`.venv/bin/pip install nats-py`" in README.read_text()
    assert "It prints `[(1, 'orders.new', b'hello')]`" in README.read_text()


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clean_copy(tmp_path_factory.mktemp("fresh") / "infinistream")


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    """Run a command to its end; its output, stdout and stderr together."""
    done = subprocess.run(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout}"
    return done.stdout


def _snippet(copy: Path, env: dict[str, str], name: str, text: str) -> str:
    """Save a README snippet as `name` in the copy and run it with `.venv/bin/python name`."""
    (copy / name).write_text(text)
    done = subprocess.run(
        [".venv/bin/python", name], cwd=copy, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, f"{name}:\n{text}\n{done.stdout}\n{done.stderr}"
    return done.stdout


class Started:
    """A command that runs until stopped, and the lines it printed up to "Server is ready"."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []

    def wait_ready(self, within: float) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + within
        for line in self.process.stdout:
            self.lines.append(line)
            if "Server is ready" in line or time.monotonic() > deadline:
                break
        output = "".join(self.lines)
        assert "Server is ready" in output, output
        return output

    @property
    def url(self) -> str:
        port = re.search(r"client connections on \S+:(\d+)", "".join(self.lines))
        assert port, self.lines
        return f"nats://127.0.0.1:{port.group(1)}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def stopped_at_end() -> Iterator[list[Started]]:
    started: list[Started] = []
    yield started
    for command in started:
        command.stop()


# Installs and three Spark jobs: far more than the suite's default per-test limit on a busy
# machine.
@pytest.mark.timeout(1800)
def test_quick_start_in_order(copy: Path, stopped_at_end: list[Started]) -> None:
    env = user_env()
    client, table, data_source = python_snippets()
    serve = Started(["./scripts/serve", *PORTS], copy, env)
    stopped_at_end.append(serve)
    output = serve.wait_ready(within=900)
    assert "==> creating the virtualenv .venv" in output, output
    assert "==> pip install -e . " in output, output
    assert "==> infinistream serve -js -m 8222 -a 127.0.0.1" in output, output
    no_install_warnings(output)
    assert_isolated(copy / ".venv", env)
    located = _run([".venv/bin/python", "-c", "import infinistream; print(infinistream.__file__)"],
                   copy, env)  # fmt: skip
    assert Path(located.strip()).is_relative_to(copy / "src"), located

    _run([".venv/bin/pip", "install", "nats-py"], copy, env)
    published = _snippet(copy, env, "hello.py", client.replace(DOCUMENTED_URL, serve.url))
    assert published == "1 b'hello'\n"
    serve.stop()

    scan = ["./scripts/pipeline", "scan", "-sd", "./infinistream-data"]
    job = subprocess.run(scan, cwd=copy, env=env, capture_output=True, text=True, timeout=900)
    assert job.returncode == 0, job.stdout + job.stderr
    assert "==> pip install -e .[pipeline]" in job.stderr, job.stderr
    assert "==> infinistream pipeline scan" in job.stderr, job.stderr
    no_install_warnings(job.stderr)
    # The job read back what the agent stored: the message checked, none damaged; and it
    # printed that, not Spark's own log lines or progress bars.
    assert job.stdout == ""
    lines = job.stderr.splitlines()
    result = lines[lines.index(next(x for x in lines if x.startswith("==> infinistream "))) + 1 :]
    assert result[-1].startswith("scan: 1 streams, "), job.stderr
    assert result[-1].endswith("1 messages checked: 0 damaged"), job.stderr
    assert all(line.startswith(JVM_NOTICE) for line in result[:-1]), job.stderr

    # The stream appended to its Iceberg table, queried with pyiceberg and DuckDB.
    tables = subprocess.run(
        table_command(), cwd=copy, env=env, capture_output=True, text=True, timeout=900
    )
    assert tables.returncode == 0, tables.stdout + tables.stderr
    assert _snippet(copy, env, "table.py", table) == "[(1, 'orders.new', b'hello')]\n"

    # The data source reads it back, as a batch and as a stream.
    read = _snippet(copy, env, "read.py", data_source)
    assert read.count("orders.new") == 2, read


@pytest.mark.timeout(1200)
def test_pip_install_then_serve(copy: Path, tmp_path: Path, stopped_at_end: list[Started]) -> None:
    """`pip install .` in a virtualenv of a user's own: the base dependencies only."""
    venv = tmp_path / "venv"
    env = user_env()
    _run(["python3", "-m", "venv", str(venv)], copy, env)
    env = activated(venv, env)
    assert_isolated(venv, env)
    no_install_warnings(_run(["pip", "install", "."], copy, env, timeout=900))
    assert _run(["infinistream", "serve", "-v"], tmp_path, env) == (
        f"infinistream: v{infinistream.__version__}\n"
    )
    agent = Started(["infinistream", "serve", *PORTS, "-sd", "store"], tmp_path, env)
    stopped_at_end.append(agent)
    agent.wait_ready(within=300)
    agent.stop()
    assert agent.process.returncode == 0, "".join(agent.lines)

    # The optional parts say what to install.
    bench = subprocess.run(
        ["infinistream", "bench", "--help"], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert bench.returncode == 2, bench.stdout + bench.stderr
    assert "benchmark suite is not installed" in bench.stderr, bench.stderr
    assert "`pip install ./bench`" in bench.stderr, bench.stderr
    scan = subprocess.run(
        ["infinistream", "pipeline", "scan", "-sd", "store"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert scan.returncode != 0, scan.stdout + scan.stderr
    assert "pip install 'infinistream[pipeline]'" in scan.stderr, scan.stderr
    assert "Traceback" not in scan.stderr, scan.stderr


def test_readme_config_example_is_valid(tmp_path: Path) -> None:
    """The config file example of "Configuration" passes nats-server's `-t` check."""
    examples = re.findall(r"^```\n(listen:.*?)^```", README.read_text(), re.M | re.S)
    assert len(examples) == 1
    conf = tmp_path / "agent.conf"
    conf.write_text(examples[0])
    done = subprocess.run(
        [sys.executable, "-m", "infinistream", "serve", "-t", "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": SOURCES},
    )
    assert done.returncode == 0, done.stderr
    assert "is valid" in done.stderr
