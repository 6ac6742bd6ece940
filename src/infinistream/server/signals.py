"""`infinistream serve --signal COMMAND[=PID]`: nats-server's `-sl`, sending a signal to a running
agent and exiting.

The commands and their signals are nats-server's (server/signal.go `CommandToSignal`): `ldm`
SIGUSR2 (lame duck mode), `stop` SIGKILL, `quit` SIGINT, `term` SIGTERM, `reload` SIGHUP.
nats-server's `reopen` (SIGUSR1, reopen the log file) is refused: an agent rotates its log by
size (`--log_size_limit`), and SIGUSR1 would end an agent that does not handle it. After `=`
comes a pid, or a pid file (as nats-server's `maybeReadPidFile`: a path that can be read is
read); without it, the one agent running on this host, found by its command line as
nats-server finds itself with `pgrep nats-server`.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

COMMANDS: dict[str, signal.Signals] = {
    "ldm": signal.SIGUSR2,
    "stop": signal.SIGKILL,
    "quit": signal.SIGINT,
    "term": signal.SIGTERM,
    "reload": signal.SIGHUP,
}
REFUSED = {"reopen": "an agent rotates its log file by size (--log_size_limit)"}


class SignalError(Exception):
    """The signal could not be sent; the message says why, in nats-server's words."""


@dataclass(frozen=True, slots=True)
class SignalRequest:
    command: str
    signal: signal.Signals
    # The pid given (after `=`, read from a pid file when it names one); None: find the agent.
    pid: int | None


def parse_signal(text: str) -> SignalRequest:
    """`ldm`, `ldm=1234` or `ldm=/run/infinistream.pid` -> what to send to whom."""
    parts = text.split("=")
    if len(parts) > 2:
        raise SignalError(f"invalid signal parameters: {parts[2:]}")
    command = parts[0]
    if command in REFUSED:
        raise SignalError(
            f'signal "{command}" is not supported by InfiniStream: {REFUSED[command]}'
        )
    if command not in COMMANDS:
        raise SignalError(f'unknown signal "{command}"')
    pid = None
    if len(parts) == 2:
        given = _maybe_read_pid_file(parts[1]).strip()
        try:
            pid = int(given)
        except ValueError:
            raise SignalError(f"invalid pid: {given}") from None
    return SignalRequest(command, COMMANDS[command], pid)


def send_signal(request: SignalRequest, *, proc: Path = Path("/proc")) -> int:
    """Send it; the pid signalled. SignalError when no single agent is found or the signal
    cannot be delivered."""
    pid = request.pid if request.pid is not None else _the_agent(running_agents(proc))
    try:
        os.kill(pid, request.signal)
    except OSError as exc:
        raise SignalError(f'signal "{request.command}" {pid}: {exc.strerror}') from None
    return pid


def running_agents(proc: Path = Path("/proc")) -> list[int]:
    """The pids of `infinistream serve` processes on this host (not this one)."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if _is_agent(argv):
            found.append(int(entry.name))
    return sorted(found)


def _is_agent(argv: Iterable[bytes]) -> bool:
    words = [w for w in argv if w]
    # `infinistream serve ...` or `python -m infinistream serve ...`; never a `--signal` sender.
    for i, word in enumerate(words[:-1]):
        if (word == b"infinistream" or word.endswith(b"/infinistream")) and words[
            i + 1
        ] == b"serve":
            return not any(w in (b"--signal", b"-sl") or w.startswith(b"--signal=") for w in words)
    return False


def _the_agent(pids: list[int]) -> int:
    if not pids:
        raise SignalError("no infinistream processes running")
    if len(pids) > 1:
        listed = "".join(f"\n{pid}" for pid in pids)
        raise SignalError(f"multiple infinistream processes running:{listed}")
    return pids[0]


def _maybe_read_pid_file(text: str) -> str:
    try:
        return Path(text).read_text()
    except (OSError, UnicodeDecodeError):
        return text
