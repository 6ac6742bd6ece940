"""Running the nats.js scripts of tests/js with node, against a server given by its URL.

    run = await run_js("kv_client.mjs", server.url, server_log=server.log)
    assert run.steps == [...] and run.result == {...}

Every script runs under tests/js/harness.mjs, which prints "ok <step>" as each step passes and
last a line `RESULT <json>`: the steps passed and what the script returned, or the step that
failed and why. A script that fails, or exits without that line, fails the test with all it
printed and the end of the server's log. scripts/test installs node and the pinned packages
(`npm ci --prefix tests/js`).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JS_DIR = Path(__file__).resolve().parent.parent / "js"
RESULT = "RESULT "


def node() -> str:
    found = shutil.which("node")
    assert found, "node is not installed (scripts/test installs it)"
    installed = JS_DIR / "node_modules" / "@nats-io" / "jetstream" / "package.json"
    assert installed.exists(), (
        "nats.js is not installed: npm ci --prefix tests/js (scripts/test does)"
    )
    return found


@dataclass(frozen=True)
class JsRun:
    """What a nats.js script did: the steps it passed, in order, and the JSON value it
    returned (None when it returned nothing)."""

    steps: list[str]
    result: Any
    output: str


def _no_log() -> str:
    return ""


async def run_js(
    script: str,
    url: str,
    *args: str,
    server_log: Callable[[], str] = _no_log,
    timeout: float = 120,
) -> JsRun:
    """Run `tests/js/<script>` against `url`; fails the test unless every step passed."""
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
            await proc.wait()
    text = out.decode(errors="replace")
    reports = [line[len(RESULT) :] for line in text.splitlines() if line.startswith(RESULT)]
    report: dict[str, Any] = json.loads(reports[-1]) if reports else {}
    assert proc.returncode == 0 and "result" in report, (
        f"the nats.js script {script} exited {proc.returncode}"
        f" (failed in step {report.get('failed')!r}):\n{text}\n"
        f"--- server log ---\n{server_log()[-3000:]}"
    )
    return JsRun(steps=list(report["passed"]), result=report["result"], output=text)
