"""Running the nats.js scripts of tests/js with node, against a server given by its URL.

Each script prints "ok <step>" per step it passed, and "ALL OK" last, or "FAIL <step>: <why>"
and exits 1. scripts/test installs the pinned packages (`npm ci --prefix tests/js`).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path

JS_DIR = Path(__file__).resolve().parent.parent / "js"


def node() -> str:
    found = shutil.which("node")
    assert found, "node is not installed (scripts/test installs it)"
    installed = JS_DIR / "node_modules" / "@nats-io" / "jetstream" / "package.json"
    assert installed.exists(), (
        "nats.js is not installed: npm ci --prefix tests/js (scripts/test does)"
    )
    return found


async def run_script(
    script: str, url: str, *args: str, server_log: Callable[[], str], timeout: float = 120
) -> list[str]:
    """The lines `tests/js/<script>` printed; fails the test if it did not exit 0."""
    proc = await asyncio.create_subprocess_exec(
        node(),
        str(JS_DIR / script),
        url,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
    text = out.decode(errors="replace")
    assert proc.returncode == 0, (
        f"the nats.js client exited {proc.returncode}:\n{text}\n"
        f"--- server log ---\n{server_log()[-3000:]}"
    )
    return text.splitlines()


def steps(lines: list[str]) -> list[str]:
    """The steps a script passed, in order (without their details)."""
    return [line[3:] for line in lines if line.startswith("ok ")]
