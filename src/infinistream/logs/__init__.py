"""Logging as nats-server does it: its line format, its flags and config keys, its log file
rotation, syslog, the pid file.

`options.py` reads the flags and config keys into `LogOptions`; `setup.py` installs the
handlers they ask for; `format.py` is the line format; `files.py` the size-limited log file.
"""

from infinistream.logs.format import TRACE, NatsFormatter
from infinistream.logs.options import (
    LogOptions,
    add_log_arguments,
    apply_log_args,
    apply_log_config,
)
from infinistream.logs.setup import LogSetupError, configure_logging, write_pidfile

__all__ = [
    "TRACE",
    "LogOptions",
    "LogSetupError",
    "NatsFormatter",
    "add_log_arguments",
    "apply_log_args",
    "apply_log_config",
    "configure_logging",
    "write_pidfile",
]
