"""A strict config: unknown fields and wrong types refuse to start, in nats-server's form
(file:line:column: reason), and the same file is checked against nats-server; the monitoring
port binds to the client host unless told otherwise."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from infinistream.settings import (
    Settings,
    SettingsError,
    add_serve_arguments,
    normalize_go_flags,
    settings_from_args,
)
from support.servers import KINDS, free_port, running_server, start_command


def parse(*argv: str) -> Settings:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_serve_arguments(parser)
    return settings_from_args(parser.parse_args(normalize_go_flags(list(argv))))


def refusal(tmp_path: Path, text: str) -> str:
    path = tmp_path / "s.conf"
    path.write_text(text)
    with pytest.raises(SettingsError) as err:
        parse("-c", str(path))
    return str(err.value).replace(str(path), "s.conf")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("port: 4222\nfoo: 1\n", 's.conf:2:1: unknown field "foo"'),
        ("authorization {\n tokn: 1\n}\n", 's.conf:2:2: unknown field "tokn"'),
        ("cluster { port: 6222 }\n", 's.conf:1:1: "cluster" is not supported by InfiniStream'),
        ('\n\nport: "abc"\n', "s.conf:3:1: port: expected an integer, got 'abc'"),
        ("host: 12\n", "s.conf:1:1: host: expected a string, got 12"),
        ("jetstream { max_file_store: 1G }\n", 's.conf:1:13: jetstream: "max_file_store" is not'),
        ("jetstream: disabled\n", "s.conf:1:1: jetstream: JetStream is always on"),
        ("infinistream {\n colour: blue\n}\n", "s.conf:2:2: unknown infinistream setting 'colour'"),
        (
            "tls {\n  cert_file: x\n  key_file: y\n  verfy: true\n}\n",
            's.conf:4:3: error parsing tls config, unknown field "verfy"',
        ),
    ],
)
def test_refused_with_file_line_column_and_reason(tmp_path: Path, text: str, message: str) -> None:
    assert refusal(tmp_path, text).startswith(message)


def test_keys_are_case_insensitive_as_on_nats_server(tmp_path: Path) -> None:
    path = tmp_path / "s.conf"
    path.write_text("PORT: 4333\nMax_Payload: 2KB\n")
    s = parse("-c", str(path))
    assert (s.port, s.max_payload) == (4333, 2048)


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("", "127.0.0.1", 0),
        ("http: 8333\n", "127.0.0.1", 8333),
        ('http: "0.0.0.0:8444"\n', "0.0.0.0", 8444),
        ("http_port: 8555\nhttp_host: 10.1.2.3\n", "10.1.2.3", 8555),
        ("monitor_port: 8666\n", "127.0.0.1", 8666),
    ],
)
def test_monitoring_host_defaults_to_the_client_host(
    tmp_path: Path, text: str, host: str, port: int
) -> None:
    path = tmp_path / "s.conf"
    path.write_text(text or "port: 4222\n")
    s = parse("-c", str(path), "-a", "127.0.0.1")
    assert (s.monitor_host, s.http_port) == (host, port)


UNKNOWN = "port: 4222\nfoo: 1\n"


@pytest.mark.parametrize("kind", KINDS)
def test_an_unknown_field_refuses_to_start_on_both(kind: str, tmp_path: Path) -> None:
    conf = tmp_path / "unknown.conf"
    conf.write_text(UNKNOWN)
    command = [*start_command(kind), "-c", str(conf), "-p", "-1", "-sd", str(tmp_path / "s")]
    done = subprocess.run(command, capture_output=True, timeout=60, check=False)
    assert done.returncode != 0
    assert f'{conf}:2:1: unknown field "foo"' in done.stderr.decode()


def _listening_address(port: int) -> str:
    """The local address a listening TCP socket on `port` is bound to (from /proc/net/tcp)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            address, hex_port = fields[1].rsplit(":", 1)
            if int(hex_port, 16) == port and fields[3] == "0A":
                if len(address) == 8:
                    return ".".join(str(b) for b in bytes.fromhex(address)[::-1])
                return address
    raise AssertionError(f"nothing listens on {port}")


@pytest.mark.parametrize("kind", KINDS)
def test_monitoring_listens_on_the_client_host(kind: str, tmp_path: Path) -> None:
    http_port = free_port()
    # servers.py starts both with -a 127.0.0.1.
    with running_server(kind, tmp_path / "store", "-m", str(http_port)):
        assert _listening_address(http_port) == "127.0.0.1"
