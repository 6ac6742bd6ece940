"""The install scripts, run as a new user runs them: `scripts/serve` installs the project and
starts an agent, `scripts/pipeline` installs the pipeline's extra and runs a job; each step
says what it does, and no install prints setuptools' license deprecation warning.

They run in a virtualenv of their own (VENV, which scripts/lib.sh honours) that sees the
test environment's packages through a .pth file, so pip resolves the dependencies without
downloading them again and installs only the project itself, for real, from this checkout.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import nats

ROOT = Path(__file__).resolve().parent.parent


def _venv(path: Path) -> dict[str, str]:
    """A virtualenv without packages of its own: the test environment's (pip among them, a
    recent one, which shows build warnings) come through a .pth file."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = str(path / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "VENV": str(path), "PYTHONUNBUFFERED": "1"}


def _no_warnings(output: str) -> None:
    assert "deprecated" not in output.lower(), output
    assert "BuildBackendWarning" not in output, output


def test_serve_then_pipeline(tmp_path: Path) -> None:
    env = _venv(tmp_path / "venv")
    store = tmp_path / "data"
    serve = subprocess.Popen(
        [
            str(ROOT / "scripts" / "serve"),
            "-a",
            "127.0.0.1",
            "-p",
            "-1",
            "-m",
            "-1",
            "-sd",
            str(store),
        ],
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
        asyncio.run(_publish(f"nats://127.0.0.1:{port.group(1)}"))
    finally:
        serve.terminate()
        serve.wait(30)
    output = "".join(lines)
    assert "==> pip install -e . " in output, output
    assert "==> infinistream serve -js -m 8222 -a 127.0.0.1" in output, output
    assert "Server is ready" in output, output
    _no_warnings(output)

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
    _no_warnings(job.stderr)
    # The job read back what the agent stored: every message checked, none damaged.
    assert job.stdout == ""
    assert "scan: 1 streams, " in job.stderr and "10 messages checked: 0 damaged" in job.stderr


async def _publish(url: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    for _ in range(10):
        await js.publish("orders.new", b"hello")
    await nc.close()


def test_wheel_carries_the_console_files(tmp_path: Path) -> None:
    """The console's page, script and style are package data: a built wheel has them."""
    # Built from a copy, so that the build leaves nothing in the checkout.
    source = tmp_path / "source"
    shutil.copytree(
        ROOT / "src", source / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("infinistream-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    static = "infinistream/server/console/static/"
    assert {static + n for n in ("index.html", "console.js", "console.css")} <= names
