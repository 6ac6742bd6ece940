"""Where the agent's time goes under a publish row: py-spy recording the agent's process.

`infinistream bench --targets N --targets-profile` runs, after the N rounds, one more pass of
the agent alone in which `py-spy record --pid AGENT -r 250 -f raw` samples it during each
one-connection publish row. A sample is the stack of one thread (idle threads left out); a
function's self time is the share of samples in which it is the innermost frame. py-spy pauses
the agent for each sample, so the figures of this pass are lower than the rounds' and are not
compared with anything: only the shares are read.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

RATE = 250
TOP = 12


@dataclass(frozen=True)
class SelfTime:
    function: str  # "name (module.py)"
    share: float  # of all samples, 0..1


@dataclass(frozen=True)
class Profile:
    row: str
    figure: str  # what the row measured during the recording
    samples: int
    top: tuple[SelfTime, ...]


def py_spy() -> str:
    """py-spy installed beside this interpreter (the bench distribution depends on it)."""
    found = Path(sys.executable).with_name("py-spy")
    return str(found) if found.exists() else "py-spy"


def start(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """py-spy recording `pid` for `seconds` into `out` (raw: one collapsed stack a line)."""
    argv = [py_spy(), "record", "--pid", str(pid), "-r", str(RATE), "-f", "raw"]
    argv += ["-d", str(max(1, round(seconds))), "-o", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # py-spy attaches in well under a second; the row's warm-up covers the rest.
    time.sleep(0.5)
    return proc


def finish(proc: subprocess.Popen[bytes], out: Path, row: str, figure: str) -> Profile:
    _, err = proc.communicate(timeout=120)
    if not out.exists():
        raise RuntimeError(f"py-spy wrote no profile: {err.decode(errors='replace')[-500:]}")
    samples, top = self_times(out.read_text())
    return Profile(row, figure, samples, top)


def self_times(raw: str, top: int = TOP) -> tuple[int, tuple[SelfTime, ...]]:
    """The samples of a raw (collapsed) profile, and its `top` functions by self time."""
    counts: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, n = line.rstrip().rpartition(" ")
        if not stack or not n.isdigit():
            continue
        total += int(n)
        counts[_function(stack.rsplit(";", 1)[-1])] += int(n)
    return total, tuple(SelfTime(f, n / total) for f, n in counts.most_common(top))


def _function(frame: str) -> str:
    """`name (path/to/module.py:LINE)` as `name (module.py)`: lines of one function add up."""
    name, paren, where = frame.partition(" (")
    if not paren:
        return frame
    module = where.rstrip(")").rsplit(":", 1)[0].rsplit("/", 1)[-1]
    return f"{name} ({module})"


def markdown(profiles: list[Profile]) -> list[str]:
    lines = [
        f"py-spy, `record --pid AGENT -r {RATE} -f raw` during each row (a pass of the agent "
        "alone after the rounds; py-spy pauses the agent at each sample, so its figures are "
        "lower than the rounds'); self time in percent of all samples of the agent's threads "
        "that were not idle:",
    ]
    for p in profiles:
        lines += ["", f"**{p.row}**: {p.figure}, {p.samples:,} samples.", ""]
        lines += ["| self | function |", "|--:|---|"]
        lines += [f"| {t.share * 100:.1f}% | `{t.function}` |" for t in p.top]
    return lines
