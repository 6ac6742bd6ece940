"""nats.js as applications use it: `natsjs_load.mjs` run with node, one measurement per run.

The script ships with this package; the nats.js packages do not (they are npm packages): they
are looked for in a node_modules directory, `tests/js/node_modules` of the checkout by default,
which `scripts/test` installs. When node or the packages are missing, `find` says why, and the
report shows the nats.js rows as not run, with that reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infinistream_bench.connection import STALL_SECONDS

SCRIPT = Path(__file__).with_name("natsjs_load.mjs")
PACKAGES = ("@nats-io/transport-node", "@nats-io/jetstream")
READY_SECONDS = 60.0
# The checkout this package runs from, when it runs from one (an editable install).
_CHECKOUT = Path(__file__).resolve().parents[3]


class NatsJsError(Exception):
    """The script failed or said something it should not have."""


@dataclass(frozen=True)
class NatsJs:
    node: str
    node_version: str
    modules: Path
    version: str  # of @nats-io/jetstream

    def run(
        self,
        spec: dict[str, Any],
        timeout: float,
        on_start: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Run one measurement: start the script, wait until it is set up, call `on_start`,
        let it go, and return its result."""
        spec = {"stall_seconds": STALL_SECONDS, **spec}
        proc = subprocess.Popen(
            [self.node, str(SCRIPT), str(self.modules), json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        # A script that never gets ready (node stuck connecting) is killed: readline returns.
        watchdog = threading.Timer(READY_SECONDS, proc.kill)
        watchdog.start()
        try:
            first = proc.stdout.readline().strip()
            watchdog.cancel()
            if first != "ready":
                raise NatsJsError(f"nats.js {spec['mode']}: {first} {self._rest(proc)}")
            if on_start is not None:
                on_start()
            proc.stdin.write("go\n")
            proc.stdin.flush()
            deadline = time.monotonic() + timeout
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise NatsJsError(f"nats.js {spec['mode']}: no result in {timeout:g}s") from None
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for line in out.splitlines():
            if line.startswith("RESULT "):
                result: dict[str, Any] = json.loads(line[len("RESULT ") :])
                return result
        raise NatsJsError(f"nats.js {spec['mode']}: exit {proc.returncode}: {out} {err}".strip())

    @staticmethod
    def _rest(proc: subprocess.Popen[str]) -> str:
        proc.kill()
        out, err = proc.communicate()
        return f"{out} {err}".strip()[-2000:]


def candidate_dirs(explicit: str | None) -> list[Path]:
    """Where the nats.js packages are looked for, in order."""
    if explicit:
        return [Path(explicit)]
    dirs = [
        Path.cwd() / "tests" / "js" / "node_modules",
        _CHECKOUT / "tests" / "js" / "node_modules",
    ]
    return list(dict.fromkeys(d.resolve() for d in dirs))


def find(explicit_modules: str | None = None) -> NatsJs | str:
    """node and the nats.js packages, or why they cannot be used."""
    node = shutil.which("node")
    if node is None:
        return "node is not installed (scripts/test installs it: apt-get install nodejs npm)"
    dirs = candidate_dirs(explicit_modules)
    for modules in dirs:
        if all((modules / name / "package.json").is_file() for name in PACKAGES):
            meta = json.loads((modules / "@nats-io" / "jetstream" / "package.json").read_text())
            node_version = subprocess.run(
                [node, "--version"], capture_output=True, text=True, check=False
            ).stdout.strip()
            return NatsJs(node, node_version, modules, str(meta.get("version", "?")))
    where = ", ".join(str(d) for d in dirs)
    return (
        f"the nats.js packages ({', '.join(PACKAGES)}) are not in {where}: "
        "run `npm ci --prefix tests/js` (scripts/test does), or pass --node-modules DIR"
    )
