"""What a new user starts from, for tests that follow the README: a clean copy of the
repository and a shell environment that knows nothing of the test environment.

The copy holds the files git tracks, as they are in the working tree: what a clone of this
work would hold once committed, uncommitted changes included (a `git clone` would test the last
commit instead, not the tree under test), and nothing else: no `.venv`, no build output, no
untracked files, so a file the project needs but git does not track fails the test as it would
fail a clone. The scripts make their virtualenv in the copy from the interpreter a new user's
`python3` is; `user_env` strips what would let the test environment's packages leak into it
(PYTHONPATH, VIRTUAL_ENV, PYTHONHOME, the test virtualenv's `bin` on PATH), and
`assert_isolated` checks the result from inside. pip's download and wheel cache is shared:
it saves the downloads, not any step of an install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Variables that point an interpreter at other packages than its virtualenv's own.
_LEAKS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "VIRTUAL_ENV", "VENV")


def clean_copy(dest: Path) -> Path:
    """The files git tracks in this checkout, copied as they are in the working tree to `dest`
    (a tracked file deleted in the working tree is left out, as its commit would leave it)."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z"], check=True, capture_output=True
    ).stdout
    names = [os.fsdecode(n) for n in listed.split(b"\0") if n]
    assert "scripts/serve" in names, "not a git checkout of the project: nothing to copy"
    for name in names:
        source, target = ROOT / name, dest / name
        if not source.exists() and not source.is_symlink():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)  # keeps the scripts' executable bit
    return dest


def user_env(**extra: str) -> dict[str, str]:
    """This process's environment as a new user's shell would have it: without the variables
    and the PATH entry of the test virtualenv, so `python3` is the interpreter's own."""
    test_bin = Path(sys.prefix, "bin").resolve()
    env = {k: v for k, v in os.environ.items() if k not in _LEAKS}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != test_bin]
    env["PATH"] = os.pathsep.join(path)
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def activated(venv: Path, env: dict[str, str]) -> dict[str, str]:
    """`env` as `source venv/bin/activate` leaves it: the virtualenv's commands first on PATH."""
    return {**env, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}"}


_PROBE = """
import json, site, sys
print(json.dumps({"prefix": sys.prefix, "base": sys.base_prefix, "path": sys.path,
                  "user_site": site.ENABLE_USER_SITE}))
"""


def assert_isolated(venv: Path, env: dict[str, str]) -> None:
    """The virtualenv at `venv`, run with `env`, sees its own packages and the standard
    library only: made from the base interpreter, no system or user site-packages, nothing of
    the test environment on sys.path."""
    config = (venv / "pyvenv.cfg").read_text()
    assert "include-system-site-packages = false" in config, config
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c", _PROBE],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    seen = json.loads(probe.stdout)
    assert Path(seen["prefix"]).resolve() == venv.resolve(), seen
    assert Path(seen["base"]).resolve() == Path(sys.base_prefix).resolve(), seen
    assert seen["user_site"] is not True, seen
    own = venv.resolve()
    for entry in filter(None, seen["path"]):
        where = Path(entry).resolve()
        for other in (Path(sys.prefix).resolve(), ROOT):
            assert not where.is_relative_to(other), f"{other} on the copy's sys.path: {entry}"
        if "site-packages" in where.parts:
            assert where.is_relative_to(own), f"site-packages of another environment: {entry}"


def no_install_warnings(output: str) -> None:
    """No setuptools deprecation warning (the license field's form) in what a script printed."""
    assert "deprecated" not in output.lower(), output
    assert "BuildBackendWarning" not in output, output
