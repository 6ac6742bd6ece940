"""A virtualenv for running the project's install scripts in a test (scripts/lib.sh honours
VENV): it has no packages of its own, and sees the test environment's (pip among them, a
recent one, which shows build warnings) through a .pth file, so pip resolves the dependencies
without downloading them again and installs only the project itself, for real, from this
checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def script_venv(path: Path) -> dict[str, str]:
    """Create the virtualenv at `path`; the environment to run the scripts with."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    purelib = subprocess.run(
        [
            str(path / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "VENV": str(path), "PYTHONUNBUFFERED": "1"}


def no_install_warnings(output: str) -> None:
    """No setuptools deprecation warning (the license field's form) in what a script printed."""
    assert "deprecated" not in output.lower(), output
    assert "BuildBackendWarning" not in output, output
