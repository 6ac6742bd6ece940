"""docs/from-nats-server.md says what the agent does with each of nats-server's flags and
config keys; this checks that it lists them all and that the agent does what it says."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infinistream.settings import (
    Settings,
    SettingsError,
    add_serve_arguments,
    normalize_go_flags,
    settings_from_args,
)
from infinistream_bench.systems import nats_server_binary

DOC = Path(__file__).resolve().parent.parent / "docs" / "from-nats-server.md"
STATUSES = {"supported", "accepted, ignored", "refused"}

# nats-server 2.15's flags (server/opts.go ConfigureOptions) and top-level config keys
# (processConfigFileLine), copied from its source.
NATS_FLAGS_TEXT = """h help port p n name server_name addr a net client_advertise D debug V VV
trace DV DVV T logtime logtime_utc user pass auth m http_port ms https_port c config t sl signal
P pid ports_file_dir l log log_size_limit s syslog r remote_syslog version v profile routes cluster
cluster_listen cluster_advertise no_advertise connect_retries cluster_name help_tls tls
tlsverify tlscert tlskey tlscacert max_traced_msg_len js jetstream sd store_dir"""
NATS_KEYS_TEXT = """listen client_advertise port server_name host net debug trace trace_verbose
trace_headers logtime logtime_utc mappings maps disable_sublist_cache no_sublist_cache accounts
default_sentinel authorization http https http_port monitor_port https_port http_base_path
cluster gateway leaf leafnodes store_dir storedir jetstream logfile log_file logfile_size_limit
log_size_limit logfile_max_num log_max_num syslog remote_syslog pidfile pid_file ports_file_dir
prof_port prof_block_rate max_control_line max_payload max_pending proxy_protocol
max_connections max_conn max_traced_msg_len max_subscriptions max_subs max_sub_tokens
max_subscription_tokens ping_interval ping_max tls ocsp allow_non_tls write_deadline
write_timeout lame_duck_duration lame_duck_grace_period operator operators roots root
root_operators root_operator resolver account_resolver accounts_resolver resolver_tls
resolver_preload resolver_pinned_accounts no_auth_user system_account system
no_system_account no_system no_sys_acc no_header_support trusted trusted_keys
connect_error_reports reconnect_error_reports websocket ws mqtt server_tags server_metadata
feature_flags default_js_domain ocsp_cache no_fast_producer_stall max_closed_clients
proxies"""
NATS_FLAGS, NATS_KEYS = set(NATS_FLAGS_TEXT.split()), set(NATS_KEYS_TEXT.split())


def _table(heading: str) -> list[tuple[list[str], str]]:
    """The rows under `heading`: the names of the first column (backquoted), the status."""
    section = DOC.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[1] in STATUSES:
            rows.append((re.findall(r"`([^`]+)`", cells[0]), cells[1]))
    return rows


FLAG_ROWS = _table("Flags")
KEY_ROWS = _table("Configuration keys")


def test_every_flag_and_key_of_nats_server_is_listed() -> None:
    flags = {name.lstrip("-") for names, _ in FLAG_ROWS for name in names}
    keys = {name for names, _ in KEY_ROWS for name in names}
    assert NATS_FLAGS - flags == set()
    assert NATS_KEYS - keys == set()


def _parser() -> argparse.ArgumentParser:
    # `serve`'s flags, as cli.py adds them.
    parser = argparse.ArgumentParser(prog="serve", exit_on_error=False)
    add_serve_arguments(parser)
    parser.add_argument("-v", "--version", action="version", version="v")
    parser.add_argument("-t", dest="check_config", action="store_true")
    return parser


def _accepts(parser: argparse.ArgumentParser, flag: str) -> bool:
    action = parser._option_string_actions.get(normalize_go_flags([flag])[0])
    argv = [flag] if action is None or action.nargs in (0, "?") else [flag, "1"]
    try:
        parser.parse_args(normalize_go_flags(argv))
    except SystemExit as exc:
        return exc.code == 0  # -h and -v print and exit 0
    except argparse.ArgumentError:
        return False
    return True


@pytest.mark.parametrize(("names", "status"), FLAG_ROWS, ids=lambda v: str(v))
def test_flags_are_taken_or_refused_as_documented(
    names: list[str], status: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = _parser()
    for name in names:
        # nats-server spells every flag with one dash too (`-log`, `-DV`, `-trace`).
        for spelling in {name, "-" + name.lstrip("-")}:
            assert _accepts(parser, spelling) == (status != "refused"), spelling


@pytest.mark.parametrize(
    "names", [names for names, status in FLAG_ROWS if status == "refused"], ids=str
)
def test_refused_flags_say_why(names: list[str]) -> None:
    """As the config file's refusal: the flag, that InfiniStream does not support it, and the
    reason; never argparse's bare "unrecognized arguments"."""
    parser = _parser()
    for name in names:
        for spelling in {name, "-" + name.lstrip("-")}:
            with pytest.raises(argparse.ArgumentError) as refused:
                parser.parse_args(normalize_go_flags([spelling, "x"]))
            message = str(refused.value)
            long_name = normalize_go_flags([spelling])[0]
            assert message.startswith(f'"{long_name}" is not supported by InfiniStream: ')
            assert len(message.split(": ", 1)[1]) > 10, message  # a reason follows


def _load(tmp_path: Path, text: str) -> Settings:
    conf = tmp_path / "server.conf"
    conf.write_text(text)
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return settings_from_args(parser.parse_args(["-c", str(conf)]))


@pytest.mark.parametrize(("names", "status"), KEY_ROWS, ids=lambda v: str(v))
def test_refused_and_ignored_keys(names: list[str], status: str, tmp_path: Path) -> None:
    for name in names:
        if status == "refused":
            refusal = f'"{name}" is not supported by InfiniStream|unknown field "{name}"'
            with pytest.raises(SettingsError, match=refusal):
                _load(tmp_path, f"{name} {{}}\n")
        elif status == "accepted, ignored":
            assert _load(tmp_path, f"{name} {{}}\n") == _load(tmp_path, "")


def test_store_dir_and_monitor_port_aliases(tmp_path: Path) -> None:
    assert _load(tmp_path, "storedir: /a\n").store_dir == "/a"
    assert _load(tmp_path, "store_dir: /a\njetstream { store: /b }\n").store_dir == "/b"
    assert _load(tmp_path, "monitor_port: 8333\n").http_port == 8333


AGENT = [sys.executable, "-m", "infinistream", "serve"]


@pytest.mark.parametrize("kind", ["agent", "nats-server"])
def test_check_config(kind: str, tmp_path: Path) -> None:
    command = AGENT if kind == "agent" else [nats_server_binary()]
    conf = tmp_path / "ok.conf"
    conf.write_text("port: 4333\nmax_payload: 1MB\n")
    ok = subprocess.run([*command, "-t", "-c", str(conf)], capture_output=True, text=True)
    assert ok.returncode == 0
    assert re.fullmatch(
        rf"\S+: configuration file {re.escape(str(conf))} is valid \(sha256:[0-9a-f]{{64}}\)\n",
        ok.stderr,
    ), ok.stderr
    missing = subprocess.run([*command, "-t"], capture_output=True, text=True)
    assert missing.returncode == 1
    assert "must specify [-c, --config] option to check configuration file syntax" in (
        missing.stderr
    )


def test_refused_key_stops_the_agent(tmp_path: Path) -> None:
    conf = tmp_path / "mqtt.conf"
    conf.write_text("port: -1\nmqtt { port: 1883 }\n")
    done = subprocess.run([*AGENT, "-c", str(conf)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert '2:1: "mqtt" is not supported by InfiniStream' in done.stderr
