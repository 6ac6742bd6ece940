"""py-spy's view of a process: a real recording of a Python process busy in a known function,
and the self times read from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from infinistream_bench import spy

BUSY = """
import time

def spin(until):
    n = 0
    while time.monotonic() < until:
        n += 1
    return n

def idle(until):
    time.sleep(max(0.0, until - time.monotonic()))

print("ready", flush=True)
end = time.monotonic() + 6
spin(end - 3)
idle(end)
"""


def test_a_recording_names_the_function_that_burns_the_cpu(tmp_path: Path) -> None:
    script = tmp_path / "busy.py"
    script.write_text(BUSY)
    busy = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert busy.stdout is not None and busy.stdout.readline() == "ready\n"
        out = tmp_path / "busy.txt"
        profile = spy.finish(spy.start(busy.pid, 2, out), out, "busy", "spinning")
    finally:
        busy.kill()
        busy.wait()
    assert profile.samples > 0
    # Idle threads are left out: the sleeping function is not there, the spinning one leads.
    assert profile.top[0].function == "spin (busy.py)"
    assert profile.top[0].share > 0.5
    assert all("idle" not in t.function for t in profile.top)


def test_self_times_add_the_lines_of_a_function_and_count_the_innermost_frame() -> None:
    raw = (
        "process 1;<module> (a.py:1);run (loop.py:10);parse (parser.py:5) 6\n"
        "process 1;<module> (a.py:1);run (loop.py:10);parse (parser.py:9) 2\n"
        "process 1;<module> (a.py:1);run (loop.py:12) 2\n"
    )
    samples, top = spy.self_times(raw)
    assert samples == 10
    assert [(t.function, t.share) for t in top] == [
        ("parse (parser.py)", 0.8),
        ("run (loop.py)", 0.2),
    ]
    lines = spy.markdown([spy.Profile("a row", "1 msg/s", samples, top)])
    assert "| 80.0% | `parse (parser.py)` |" in lines
    assert "**a row**: 1 msg/s, 10 samples." in lines
