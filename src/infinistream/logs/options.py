"""nats-server's logging flags and config keys, read into `LogOptions`.

Flags (server/opts.go ConfigureOptions): `-l/--log FILE`, `-P/--pid FILE`, `-T/--logtime`,
`--logtime_utc`, `-D/--debug`, `-V/--trace`, `-DV` (both), `-VV`/`-DVV` (verbose trace, which
adds the system account's traffic: there is none here, so they are `-V`/`-DV`), `-s/--syslog`,
`-r/--remote_syslog URL`, `--log_size_limit BYTES`, `--max_traced_msg_len N`. Boolean flags
take Go's forms: `-T`, `-T=false`, `--logtime=0`.

Config keys, with nats-server's aliases: `logfile`/`log_file`, `pidfile`/`pid_file`,
`logtime`, `logtime_utc`, `debug`, `trace`, `trace_verbose`, `logfile_size_limit`/
`log_size_limit`, `logfile_max_num`/`log_max_num`, `max_traced_msg_len`, `syslog`,
`remote_syslog`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class LogOptions:
    logfile: str | None = None
    pidfile: str | None = None
    logtime: bool = True
    logtime_utc: bool = False
    debug: bool = False
    trace: bool = False
    # Rotation of the log file: past this many bytes (0: never), keeping this many files (0: all).
    size_limit: int = 0
    max_files: int = 0
    # How much of a traced payload is printed (0: all of it).
    max_traced_msg_len: int = 0
    syslog: bool = False
    remote_syslog: str | None = None


# nats-server's single-dash long forms, for settings.normalize_go_flags.
GO_LONG_FLAGS = {
    "-log": "--log",
    "-pid": "--pid",
    "-logtime": "--logtime",
    "-logtime_utc": "--logtime_utc",
    "-debug": "--debug",
    "-trace": "--trace",
    "-syslog": "--syslog",
    "-remote_syslog": "--remote_syslog",
    "-log_size_limit": "--log_size_limit",
    "-max_traced_msg_len": "--max_traced_msg_len",
}

_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def parse_bool(text: str) -> bool:
    """Go's strconv.ParseBool, which nats-server's boolean flags use."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {text!r}")


def add_log_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument

    def flag(*names: str, dest: str, help: str) -> None:
        add(*names, dest=dest, nargs="?", const=True, type=parse_bool, help=help)

    add("-l", "--log", dest="log_file", metavar="FILE", help="File to store logging output")
    add("-P", "--pid", dest="log_pidfile", metavar="FILE", help="File to store process pid")
    flag("-T", "--logtime", dest="log_time", help="Timestamp log entries (default: true)")
    flag("--logtime_utc", dest="log_time_utc", help="Timestamps in UTC instead of local time")
    flag("-D", "--debug", dest="log_debug", help="Enable debug logging")
    flag("-V", "--trace", dest="log_trace", help="Trace the protocol lines of every client")
    flag("-VV", dest="log_trace_verbose", help="Verbose trace: the same as -V here")
    flag("-DV", dest="log_debug_trace", help="Debug and trace")
    flag("-DVV", dest="log_debug_trace_verbose", help="Debug and verbose trace: -DV here")
    flag("-s", "--syslog", dest="log_syslog", help="Log to the local syslog")
    add(
        "-r",
        "--remote_syslog",
        dest="log_remote_syslog",
        metavar="URL",
        help="Syslog server address (udp://127.0.0.1:514)",
    )
    add(
        "--log_size_limit",
        dest="log_size_limit",
        type=int,
        metavar="BYTES",
        help="Log file size past which it is rotated (0: never)",
    )
    add(
        "--max_traced_msg_len",
        dest="log_max_traced_msg_len",
        type=int,
        metavar="N",
        help="Maximum printable length of traced payloads (0: unlimited)",
    )


# Flags with a value of their own: (argparse dest, LogOptions field); an empty file or URL
# (`-l ""`) turns off what the config file asked for.
_VALUE_FLAGS = (
    ("log_file", "logfile"),
    ("log_pidfile", "pidfile"),
    ("log_remote_syslog", "remote_syslog"),
    ("log_time", "logtime"),
    ("log_time_utc", "logtime_utc"),
    ("log_debug", "debug"),
    ("log_syslog", "syslog"),
    ("log_size_limit", "size_limit"),
    ("log_max_traced_msg_len", "max_traced_msg_len"),
    # -VV and -DVV trace the system account's traffic too, which an agent does not route.
    ("log_trace", "trace"),
    ("log_trace_verbose", "trace"),
)


def apply_log_args(options: LogOptions, args: argparse.Namespace) -> None:
    """Flags over what the config file said, as nats-server applies them."""
    for dest, name in _VALUE_FLAGS:
        value = getattr(args, dest, None)
        if value is not None:
            setattr(options, name, value if value != "" else None)
    for dest in ("log_debug_trace", "log_debug_trace_verbose"):
        value = getattr(args, dest, None)
        if value is not None:
            options.debug = options.trace = value
    check(options)


def apply_log_config(options: LogOptions, conf: dict[str, Any]) -> None:
    """The config file's logging keys; ValueError for a value of the wrong kind."""
    for key, value in conf.items():
        found = _CONFIG_KEYS.get(key)
        if found is not None:
            name, read = found
            setattr(options, name, read(key, value))
    check(options)


def check(options: LogOptions) -> None:
    if options.remote_syslog is not None:
        scheme = options.remote_syslog.partition("://")[0]
        if scheme not in ("udp", "tcp", "unix"):
            # nats-server's message (logger/syslog.go getNetworkAndAddr).
            raise ValueError(f'error invalid network type: "{scheme}"')


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{key}: expected a string, got {value!r}")
    return value


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{key}: expected true or false, got {value!r}")
    return value


def _int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key}: expected an integer, got {value!r}")
    return value


# Each config key (with nats-server's aliases): the option it sets, and how its value is read.
_CONFIG_KEYS: dict[str, tuple[str, Callable[[str, Any], object]]] = {
    "logfile": ("logfile", _text),
    "log_file": ("logfile", _text),
    "pidfile": ("pidfile", _text),
    "pid_file": ("pidfile", _text),
    "remote_syslog": ("remote_syslog", _text),
    "logtime": ("logtime", _bool),
    "logtime_utc": ("logtime_utc", _bool),
    "debug": ("debug", _bool),
    "trace": ("trace", _bool),
    "syslog": ("syslog", _bool),
    "trace_verbose": ("trace", _bool),
    "logfile_size_limit": ("size_limit", _int),
    "log_size_limit": ("size_limit", _int),
    "logfile_max_num": ("max_files", _int),
    "log_max_num": ("max_files", _int),
    "max_traced_msg_len": ("max_traced_msg_len", _int),
}
