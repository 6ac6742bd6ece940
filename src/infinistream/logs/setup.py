"""Installing the handler `LogOptions` asks for, as nats-server's ConfigureLogger picks one:
a log file, else a remote syslog, else the local syslog, else stderr."""

from __future__ import annotations

import logging
import logging.handlers
import os
import socket
import sys
from urllib.parse import urlsplit

from infinistream.logs.files import LogFile
from infinistream.logs.format import TRACE, NatsFormatter
from infinistream.logs.options import LogOptions

# The logger protocol traces go to (server/tracing.py).
TRACE_LOGGER = "infinistream.trace"
# nats-server's defaultFilePerms for the pid file.
PID_PERMS = 0o660


class LogSetupError(Exception):
    pass


class _SysLog(logging.handlers.SysLogHandler):
    """nats-server's syslog priorities: notices for INF (and traces), not `info`."""

    def mapPriority(self, levelName: str) -> str:
        return {"TRACE": "notice", "INFO": "notice", "CRITICAL": "critical"}.get(
            levelName, super().mapPriority(levelName)
        )


def _syslog(options: LogOptions) -> logging.Handler:
    facility = logging.handlers.SysLogHandler.LOG_DAEMON
    try:
        if options.remote_syslog:
            url = urlsplit(options.remote_syslog)
            if url.scheme == "unix":
                handler: logging.Handler = _SysLog(url.path, facility)
            else:
                kind = socket.SOCK_DGRAM if url.scheme == "udp" else socket.SOCK_STREAM
                address = (url.hostname or "127.0.0.1", url.port or 514)
                handler = _SysLog(address, facility, kind)
        else:
            _check_local_syslog()
            handler = _SysLog("/dev/log", facility)
    except OSError as exc:
        raise LogSetupError(f'error connecting to syslog: "{exc}"') from exc
    # Syslog stamps lines itself; the tag is the program's name and pid, as Go's log/syslog.
    handler.setFormatter(logging.Formatter("infinistream[%(process)d]: %(message)s"))
    return handler


def _check_local_syslog() -> None:
    """Python's handler would complain on every line if nothing listens on /dev/log; nats-server
    refuses to start instead, and so do we."""
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        with socket.socket(socket.AF_UNIX, kind) as probe:
            try:
                probe.connect("/dev/log")
                return
            except OSError as exc:
                error = exc
    raise error


def configure_logging(options: LogOptions) -> None:
    """Route every log record of the process to where `options` say, in nats-server's form."""
    if options.logfile:
        try:
            handler: logging.Handler = LogFile(
                options.logfile, size_limit=options.size_limit, max_files=options.max_files
            )
        except OSError as exc:
            raise LogSetupError(f"error opening file: {exc}") from exc
        handler.setFormatter(NatsFormatter(logtime=options.logtime, utc=options.logtime_utc))
    elif options.remote_syslog or options.syslog:
        handler = _syslog(options)
    else:
        handler = logging.StreamHandler(sys.stderr)
        # Colour labels only on a terminal, as nats-server does.
        colour = sys.stderr.isatty()
        handler.setFormatter(
            NatsFormatter(logtime=options.logtime, utc=options.logtime_utc, colour=colour)
        )
    root = logging.getLogger()
    for old in root.handlers:
        old.close()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if options.debug else logging.INFO)
    logging.getLogger(TRACE_LOGGER).setLevel(TRACE if options.trace else logging.INFO)


def write_pidfile(path: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PID_PERMS)
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
    except OSError as exc:
        raise LogSetupError(f"Could not write pidfile: {exc}") from exc
