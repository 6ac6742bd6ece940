"""`infinistream serve --signal COMMAND[=PID]`, nats-server's `-sl`: parsed, and sent to a real
process that reports the signal it got."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from infinistream.server.signals import (
    SignalError,
    SignalRequest,
    parse_signal,
    running_agents,
    send_signal,
)


def test_commands_are_nats_servers() -> None:
    assert parse_signal("ldm") == SignalRequest("ldm", signal.SIGUSR2, None)
    assert parse_signal("ldm=42") == SignalRequest("ldm", signal.SIGUSR2, 42)
    assert parse_signal("stop=1").signal == signal.SIGKILL
    assert parse_signal("quit=1").signal == signal.SIGINT
    assert parse_signal("term=1").signal == signal.SIGTERM
    assert parse_signal("reload=1").signal == signal.SIGHUP


def test_bad_signals_get_nats_servers_words(tmp_path: Path) -> None:
    with pytest.raises(SignalError, match='unknown signal "nope"'):
        parse_signal("nope")
    with pytest.raises(SignalError, match=r"invalid signal parameters: \['3'\]"):
        parse_signal("ldm=1=3")
    with pytest.raises(SignalError, match="invalid pid: abc"):
        parse_signal("ldm=abc")
    with pytest.raises(SignalError, match='"reopen" is not supported'):
        parse_signal("reopen")


def test_a_pid_file_is_read(tmp_path: Path) -> None:
    pid_file = tmp_path / "agent.pid"
    pid_file.write_text("1234\n")
    assert parse_signal(f"ldm={pid_file}").pid == 1234


def test_the_one_agent_is_found_by_its_command_line(tmp_path: Path) -> None:
    def process(pid: int, *argv: str) -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv))

    process(10, "/usr/bin/python3", "-m", "infinistream", "serve", "-p", "4222")
    process(11, "/venv/bin/infinistream", "serve", "--signal", "ldm")  # a sender
    process(12, "/usr/bin/python3", "-m", "infinistream", "pipeline", "compact")
    process(13, "bash")
    (tmp_path / "self").mkdir()
    assert running_agents(tmp_path) == [10]
    process(14, "infinistream", "serve")
    with pytest.raises(SignalError, match="multiple infinistream processes running:\n10\n14"):
        send_signal(parse_signal("ldm"), proc=tmp_path)
    with pytest.raises(SignalError, match="no infinistream processes running"):
        send_signal(parse_signal("ldm"), proc=tmp_path / "13")


def test_the_signal_reaches_the_process() -> None:
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGUSR2, lambda *_: (print('usr2', flush=True), sys.exit(0)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        assert send_signal(parse_signal(f"ldm={child.pid}")) == child.pid
        assert child.stdout.readline() == "usr2\n"
        assert child.wait(30) == 0
    finally:
        child.kill()
        child.wait()
    with pytest.raises(SignalError, match=f'signal "term" {child.pid}: No such process'):
        send_signal(parse_signal(f"term={child.pid}"))
