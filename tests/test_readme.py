"""The README works in order, as a new user follows it: `scripts/serve` installs the project and
starts an agent, the client snippet publishes to it, `scripts/pipeline` installs the pipeline's
extra and runs a job on the agent's store, and the data source snippet reads the stream back.
Each script says what it installs, a line per step, and no install prints setuptools' license
deprecation warning. The config file example passes `serve -t`.

Snippets run as written with the scripts' virtualenv (tests/support/scriptvenv.py), from a directory
whose `./infinistream-data` is the agent's store; the one change is the client URL, the agent's
free port for the documented 4222.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import infinistream
from support.scriptvenv import ROOT, no_install_warnings, script_venv

README = ROOT / "README.md"
DOCUMENTED_URL = "nats://127.0.0.1:4222"
# `serve -t` below runs this checkout's sources, by absolute path.
SOURCES = str(Path(infinistream.__file__).resolve().parent.parent)


def python_snippets() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), re.M | re.S)


def test_readme_snippets_are_the_client_and_the_data_source() -> None:
    snippets = python_snippets()
    assert len(snippets) == 2
    assert DOCUMENTED_URL in snippets[0] and "infinistream-data" in snippets[1]


def _run_snippet(env: dict[str, str], cwd: Path, name: str, text: str) -> str:
    script = cwd / name
    script.write_text(text)
    done = subprocess.run(
        [env["VENV"] + "/bin/python", str(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, f"{name}:\n{text}\n{done.stdout}\n{done.stderr}"
    return done.stdout


# Two installs and two Spark jobs: more than the suite's default per-test limit on a busy
# machine.
@pytest.mark.timeout(600)
def test_quick_start_in_order(tmp_path: Path) -> None:
    env = script_venv(tmp_path / "venv")
    store = tmp_path / "infinistream-data"
    client, data_source = python_snippets()
    # Free ports, and the store under the test's directory rather than the checkout.
    flags = ["-a", "127.0.0.1", "-p", "-1", "-m", "-1", "-sd", str(store)]
    serve = subprocess.Popen(
        [str(ROOT / "scripts" / "serve"), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: list[str] = []
    try:
        assert serve.stdout is not None
        deadline = time.monotonic() + 240
        for line in serve.stdout:
            lines.append(line)
            if "Server is ready" in line or time.monotonic() > deadline:
                break
        port = re.search(r"client connections on \S+:(\d+)", "".join(lines))
        assert port, lines
        url = f"nats://127.0.0.1:{port.group(1)}"
        published = _run_snippet(env, tmp_path, "hello.py", client.replace(DOCUMENTED_URL, url))
    finally:
        serve.terminate()
        serve.wait(30)
    output = "".join(lines)
    assert "==> pip install -e . " in output, output
    assert "==> infinistream serve -js -m 8222 -a 127.0.0.1" in output, output
    no_install_warnings(output)
    assert published == "1 b'hello'\n"

    job = subprocess.run(
        [str(ROOT / "scripts" / "pipeline"), "scan", "-sd", str(store), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert job.returncode == 0, job.stdout + job.stderr
    assert "==> pip install -e .[pipeline]" in job.stderr, job.stderr
    assert "==> infinistream pipeline scan" in job.stderr, job.stderr
    no_install_warnings(job.stderr)
    # The job read back what the agent stored: the message checked, none damaged.
    assert job.stdout == ""
    assert "scan: 1 streams, " in job.stderr and "1 messages checked: 0 damaged" in job.stderr

    # The data source reads it back, as a batch and as a stream.
    read = _run_snippet(env, tmp_path, "read.py", data_source)
    assert read.count("orders.new") == 2, read


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
