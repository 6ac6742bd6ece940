"""nats-server's logging flags and config keys, on a real agent (and, where the behaviour is
nats-server's, on nats-server too): -l, -P, -T, -D, -V, -DV, -s, -r, --log_size_limit,
--max_traced_msg_len, and the config file's keys for the same."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import nats
import pytest
from logproc import logging_to_file

from support.agentproc import running_agent, wait_for
from support.written import written

# `[pid] 2026/11/25 04:31:32.339248 [INF] message`
TIMED_LINE = re.compile(
    r"^\[(\d+)\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} \[(INF|DBG|TRC|WRN|ERR|FTL)\] "
)
UNTIMED_LINE = re.compile(r"^\[(\d+)\] \[(INF|DBG|TRC|WRN|ERR|FTL)\] ")
KINDS = ("agent", "nats-server")
AGENT = [sys.executable, "-m", "infinistream", "serve", "-a", "127.0.0.1"]


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line]


@pytest.mark.parametrize("kind", KINDS)
def test_log_file_and_pid_file(kind: str, tmp_path: Path) -> None:
    logfile, pidfile = tmp_path / "server.log", tmp_path / "server.pid"
    with logging_to_file(kind, tmp_path / "sd", logfile, "-P", str(pidfile)) as server:
        pid = server.process.pid
        assert pidfile.read_text().strip() == str(pid)
        lines = _lines(server.text())
        assert lines and all(TIMED_LINE.match(line) for line in lines), lines
        assert {TIMED_LINE.match(line).group(1) for line in lines} == {str(pid)}  # type: ignore[union-attr]
        assert any("[INF] Server is ready" in line for line in lines)
        # Nothing of it goes to the terminal.
        server.process.terminate()
        assert server.output() == ""


def test_logtime_off_by_flag_and_by_config(tmp_path: Path) -> None:
    for flags in (["-T=false"], ["--logtime=0"], ["-c", str(_conf(tmp_path, "logtime: false"))]):
        with running_agent(tmp_path / "sd", *flags) as agent:
            lines = _lines(agent.log())
            assert lines and all(UNTIMED_LINE.match(line) for line in lines), (flags, lines)
    # -T alone (and the default) stamps lines.
    with running_agent(tmp_path / "sd", "-T") as agent:
        assert all(TIMED_LINE.match(line) for line in _lines(agent.log()))


async def _talk(url: str, payload: bytes = b"hello") -> None:
    nc = await nats.connect(url, name="logtest")
    js = nc.jetstream()
    await js.add_stream(name="LOGS", subjects=["logs.>"])
    await js.publish("logs.a", payload)
    await nc.close()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("flag", ["-V", "-D", "-DV"])
async def test_debug_and_trace_lines(kind: str, flag: str, tmp_path: Path) -> None:
    logfile = tmp_path / "server.log"
    with logging_to_file(kind, tmp_path / "sd", logfile, flag) as server:
        await _talk(server.url)
        wait_for(lambda: "Client connection closed" in server.text() or flag == "-V")
        wait_for(lambda: "MSG_PAYLOAD" in server.text() or flag == "-D")
        text = server.text()
    client = r'127\.0\.0\.1:\d+ - cid:\d+ - "v[\d.]+:python3:logtest"'
    traced = re.search(client + r" - <<- \[PUB logs\.a _INBOX\.\S+ 5\]", text)
    payload = re.search(client + r' - <<- MSG_PAYLOAD: \["hello"\]', text)
    ack = re.search(client + r" - ->> \[MSG _INBOX\.\S+ 1 \d+\]", text)
    connect = re.search(r'127\.0\.0\.1:\d+ - cid:\d+ - <<- \[CONNECT \{.*"name": "logtest"', text)
    created = re.search(r"\[DBG\] 127\.0\.0\.1:\d+ - cid:\d+ - Client connection created", text)
    trace, debug = "V" in flag, "D" in flag
    assert all(bool(m) == trace for m in (traced, payload, ack, connect)), text
    assert bool(created) == debug, text
    assert ("[TRC]" in text) == trace
    assert ("[DBG]" in text) == debug


@pytest.mark.parametrize("kind", KINDS)
async def test_max_traced_msg_len(kind: str, tmp_path: Path) -> None:
    logfile = tmp_path / "server.log"
    with logging_to_file(kind, tmp_path / "sd", logfile, "-V", "--max_traced_msg_len", "4") as s:
        await _talk(s.url, b"0123456789")
        wait_for(lambda: "->> MSG_PAYLOAD" in s.text())
        text = s.text()
    assert '<<- MSG_PAYLOAD: ["0123..."]' in text, text
    assert "0123456789" not in text


def _conf(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "server.conf"
    path.write_text(text)
    return path


async def test_config_keys_rotate_the_log_and_trace(tmp_path: Path) -> None:
    logfile, pidfile = tmp_path / "logs" / "agent.log", tmp_path / "agent.pid"
    logfile.parent.mkdir()
    conf = _conf(
        tmp_path,
        f'logfile: "{logfile}"\npid_file: "{pidfile}"\ntrace: true\nlogtime: false\n'
        "logfile_size_limit: 3KB\nlogfile_max_num: 3\nmax_traced_msg_len: 8\n",
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "infinistream",
            "serve",
            "-a",
            "127.0.0.1",
            "-p",
            "-1",
            "-sd",
            str(tmp_path / "sd"),
            "-c",
            str(conf),
        ],
    )
    try:
        wait_for(lambda: logfile.exists() and "Server is ready" in _all_logs(logfile), 30)
        assert pidfile.read_text() == str(proc.pid)
        port = re.search(r"connections on \S+:(\d+)", _all_logs(logfile)).group(1)  # type: ignore[union-attr]
        for _ in range(6):
            await _talk(f"nats://127.0.0.1:{port}", b"x" * 100)
        wait_for(lambda: len(_backups(logfile)) == 2, 10)
    finally:
        proc.kill()
        proc.wait(10)
    backups = _backups(logfile)
    # logfile_max_num 3: the live file and two backups; each new file says where the last went.
    assert len(backups) == 2, backups
    assert re.fullmatch(r"agent\.log\.\d{4}(\.\d\d){5}\.\d{9}", backups[0].name)
    first = logfile.read_text().splitlines()[0]
    assert UNTIMED_LINE.match(first) and 'Rotated log, backup saved as "' in first, first
    assert all(os.path.getsize(b) < 3 * 1024 + 1024 for b in backups)
    assert 'MSG_PAYLOAD: ["xxxxxxxx..."]' in _all_logs(logfile)


def _backups(logfile: Path) -> list[Path]:
    return sorted(p for p in logfile.parent.iterdir() if p.name != logfile.name)


def _all_logs(logfile: Path) -> str:
    files = [*_backups(logfile), logfile] if logfile.parent.exists() else []
    return "".join(p.read_text(errors="replace") for p in files if p.exists())


def test_remote_syslog_over_udp(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind(("127.0.0.1", 0))
        sink.settimeout(30)
        url = f"udp://127.0.0.1:{sink.getsockname()[1]}"
        proc = _agent(tmp_path, "-r", url)
        try:
            received = []
            while not any(b"Server is ready" in r for r in received):
                received.append(sink.recv(65536))
        finally:
            proc.kill()
            proc.wait(10)
    # Facility daemon (3), severity notice (5): <29>, tagged with the program and its pid.
    assert f"<29>infinistream[{proc.pid}]: Starting InfiniStream agent".encode() in received[0]
    assert f"<29>infinistream[{proc.pid}]: Server is ready".encode() in received[-1]


def _agent(tmp_path: Path, *flags: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*AGENT, "-p", "-1", "-sd", str(tmp_path / "sd"), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def test_local_syslog(tmp_path: Path) -> None:
    args = ["-p", "-1", "-sd", str(tmp_path / "sd"), "-s"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "infinistream", "serve", "-a", "127.0.0.1", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        if os.path.exists("/dev/log"):
            # Logs go to syslog, the agent serves (nothing on its own output).
            with pytest.raises(subprocess.TimeoutExpired):
                proc.wait(3)
        else:
            # Without a syslog daemon, as nats-server: one line, exit 1.
            out, _ = proc.communicate(timeout=30)
            assert proc.returncode == 1
            assert b"error connecting to syslog" in out
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.parametrize(
    ("flags", "code", "message"),
    [
        (["-T=maybe"], 2, "invalid boolean value"),
        (["-r", "ftp://127.0.0.1:514"], 2, 'error invalid network type: "ftp"'),
        (["-l", "/nonexistent/dir/agent.log"], 1, "error opening file"),
        (["-P", "/nonexistent/dir/agent.pid"], 1, "Could not write pidfile"),
    ],
)
def test_bad_logging_flags(tmp_path: Path, flags: list[str], code: int, message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "infinistream", "serve", "-p", "-1", "-sd", str(tmp_path), *flags],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == code
    assert message in done.stderr.decode(), done.stderr


async def test_log_size_limit_flag_and_utc_times(tmp_path: Path) -> None:
    logfile = tmp_path / "agent.log"
    flags = ("-V", "--log_size_limit", "2000", "--logtime_utc")
    with logging_to_file("agent", tmp_path / "sd", logfile, *flags) as server:
        await _talk(server.url, b"y" * 300)
        wait_for(lambda: len(_backups(logfile)) >= 1)
        text = logfile.read_text()
    assert 'Rotated log, backup saved as "' in text.splitlines()[0]
    # Stamped in UTC: the last line's time is now, read as UTC.
    stamp = re.match(r"^\[\d+\] (\S+ \S+) ", text.splitlines()[-1]).group(1)  # type: ignore[union-attr]
    logged = datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=UTC)
    assert abs((datetime.now(UTC) - logged).total_seconds()) < 60


@pytest.mark.parametrize("kind", KINDS)
async def test_trace_names_the_authenticated_user(kind: str, tmp_path: Path) -> None:
    logfile = tmp_path / "server.log"
    flags = ("-V", "--user", "app", "--pass", "s3cret")
    with logging_to_file(kind, tmp_path / "sd", logfile, *flags) as server:
        nc = await nats.connect(f"nats://app:s3cret@127.0.0.1:{server.port}", name="logtest")
        await nc.publish("some.subject", b"hi")
        await written(nc)  # the PUB reached the server (a flush would not prove it)
        await nc.close()
        wait_for(lambda: "some.subject" in server.text())
        text = server.text()
    client = r'127\.0\.0\.1:\d+ - cid:\d+ - "v[\d.]+:python3:logtest" - "\$G/user:app"'
    assert re.search(client + r" - <<- \[PUB some\.subject  2\]", text), text
    assert re.search(r'<<- \[CONNECT \{.*"pass": "\[REDACTED\]"', text), text
    assert "s3cret" not in text
