"""Agent settings: nats-server's flags and config file keys, plus InfiniStream's own.

Precedence is nats-server's: defaults, then the config file, then command-line flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any

from infinistream import natsconf
from infinistream.logs import LogOptions, add_log_arguments, apply_log_args, apply_log_config
from infinistream.logs.options import GO_LONG_FLAGS
from infinistream.pool import ROLES, parse_roles
from infinistream.pool.members import JOBS as JOBS_ROLE
from infinistream.security.config import DEFAULT_AUTH_TIMEOUT, AuthConfig, parse_auth
from infinistream.security.tls import TlsSpec, parse_tls
from infinistream.security.upstreams import Upstream, parse_upstream_flag, parse_upstreams
from infinistream.storage import Encryption, LocalKeys
from infinistream.storage.keys import (
    KEY_ENV,
    PREV_KEY_ENV,
    cipher_from_name,
    load_provider,
    read_key_file,
)
from infinistream.storage.packindex import DEFAULT_BUDGET as DEFAULT_PACK_INDEX

DEFAULT_PORT = 4222
DEFAULT_STORE_DIR = "./infinistream-data"
# The write buffer's PUT budget, as the shortest average interval between object PUTs. S3 bills
# every PUT ($0.005 per 1,000): 250 ms is a budget of 4 PUTs/s, about $52 a month per agent.
# A local directory bills nothing; its budget only bounds how many small files pile up for
# compaction (see docs/benchmarks.md, "The PUT budget"). Below one pack append and commit
# (about 0.4-1 ms), so that a sequential publisher waits for its fdatasync, never for the
# budget; group commit already holds flushes to about one per such cycle.
S3_LINGER = 0.25
LOCAL_LINGER = 0.00025
# PUTs the budget may spend at once after a quiet spell: a lone publish goes out at once.
PUT_BURST = 4
# The pipeline jobs an agent in the jobs role can run (pipeline/scheduler.py), in the order
# they run: erase first, so that the janitor of the same round deletes what it replaced (and
# after the tables' appends, so that it reaches what they appended). The tables' jobs make
# Iceberg tables of the streams (pipeline/tables): they run only when named.
JOBS = ("tables", "erase", "compact", "janitor", "tables-upkeep")
DEFAULT_JOBS = ("erase", "compact", "janitor")


class SettingsError(Exception):
    pass


def parse_jobs(text: str) -> tuple[str, ...]:
    """`"compact,janitor"` -> the jobs, in the order they run; ValueError for unknown names."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in JOBS]
    if unknown:
        raise ValueError(f"unknown job {unknown[0]!r} (known: {', '.join(JOBS)})")
    return tuple(job for job in JOBS if job in names)


@dataclass
class Settings:
    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    # The monitoring port's host; None: the client host, as nats-server (so `-a 127.0.0.1`
    # keeps monitoring off other interfaces too).
    http_host: str | None = None
    http_port: int = 0
    max_payload: int = 1024 * 1024
    max_pending: int = 64 * 1024 * 1024
    # nats-server's max_connections (64K by default); 0 or less refuses every connection, as
    # nats-server's `max_connections: 0` does. The agent also keeps it below its open-file
    # limit (server/fdlimit.py).
    max_connections: int = 64 * 1024
    # nats-server's write_deadline: a client whose socket takes no more bytes for this long is
    # a slow consumer (closed, counted, logged as nats-server logs it).
    write_deadline: float = 10.0
    ping_interval: float = 120.0
    max_pings_out: int = 2
    server_name: str = field(default_factory=socket.gethostname)
    # nats-server's --user/--pass/--auth flags; they win over the config file's.
    user: str | None = None
    password: str | None = None
    token: str | None = None
    # The config file's authorization, accounts, no_auth_user and system_account (security/).
    auth_config: AuthConfig = field(default_factory=AuthConfig)
    # The client `tls` block or the --tls flags: None is plain text.
    tls: TlsSpec | None = None
    store_dir: str = DEFAULT_STORE_DIR
    objects: str | None = None
    metadata: str | None = None
    group: str = "default"
    # The PUT budget's interval; None: the object store's default (S3_LINGER for s3://,
    # LOCAL_LINGER otherwise).
    linger: float | None = None
    batch_bytes: int = 4 * 1024 * 1024
    cache_bytes: int = 64 * 1024 * 1024
    # Memory for what the agent reads of stream indexes (stream.index_cache): section summaries
    # and details, subject records, of every stream it serves, within one budget whatever
    # their number and length.
    index_cache: int = 64 * 1024 * 1024
    # Memory for where the local object store's objects are (storage.packindex): the seals and
    # entries of packs other processes wrote, or that this one finished writing.
    pack_index: int = DEFAULT_PACK_INDEX
    # The form new sections are written in: 2, each with its record directory and one small
    # index entry (what this version reads best); 1, the per-record index entries that agents
    # of earlier versions read, for as long as a pool being upgraded still runs one of them.
    index_format: int = 2
    # Object store options for s3:// URLs (also read from the usual AWS_* variables).
    s3_endpoint: str | None = None
    s3_region: str | None = None
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None
    # How long one S3 request may take, and how many times a failed one is tried again: they
    # bound how long a publish waits on a failing store before it is answered with an error.
    s3_timeout: float = 30.0
    s3_retries: int = 10
    # Jobs role (pipeline/scheduler.py), off by default: the pipeline jobs this agent runs on a
    # schedule, comma-separated ("compact,janitor"; "" = none), how often, on which Spark master,
    # and the grace of scheduled janitor runs.
    jobs: str = ""
    jobs_interval: float = 300.0
    # Running NATS servers this agent's mirrors and sources may read from (security.upstreams).
    upstreams: dict[str, Upstream] = field(default_factory=dict)
    jobs_master: str = "local[*]"
    janitor_grace: float = 600.0
    # The tables' jobs: their catalog URL (handed to jobs in the environment: it may hold a
    # password), where the tables' files go, and more arguments of scheduled `tables` runs
    # (e.g. "--layout account --subject-partition 1 --json"); "" for the defaults.
    tables_catalog: str = field(default="", repr=False)
    tables_location: str = ""
    tables_args: str = ""
    # How long an erase (GDPR) may take before /healthz says so; 0: no deadline.
    erase_deadline: float = 0.0
    # Agent processes serving one port (server/workers.py); a worker listens with SO_REUSEPORT.
    workers: int = 1
    reuse_port: bool = False
    # The zone cache (storage/zonecache.py): the blocks this agent owns, kept in memory and on
    # disk (under cache_dir, default <store_dir>/cache, or the temporary directory when the
    # objects and metadata are both elsewhere) within these sizes; the port of its
    # channel between agents (0: any free one, advertised in membership); how long a reader
    # waits for an owner before it reads from object storage itself. cache_size 0: memory only.
    cache_memory: int = 256 * 1024 * 1024
    cache_size: int = 1024 * 1024 * 1024
    cache_dir: str | None = None
    cache_port: int = 0
    cache_timeout: float = 1.0
    # The pool (server/membership.py): this agent's zone ("" = the one zone of a pool without
    # zones), its roles (pool.ROLES, all by default), the client address it advertises to other
    # agents' clients (nats-server's client_advertise; default: the listening address), and how
    # long its membership lease lasts unrenewed (a killed agent drops out after about this).
    zone: str = ""
    roles: tuple[str, ...] = ROLES
    client_advertise: str | None = None
    membership_ttl: float = 3.0
    # Lame duck mode (SIGUSR2, `--signal ldm`): how long the agent takes to close its clients,
    # and how long it waits first (nats-server's `lame_duck_duration`, 2m, and
    # `lame_duck_grace_period`, 10s; server/lame_duck.py).
    lame_duck_duration: float = 120.0
    lame_duck_grace_period: float = 10.0
    # Encryption at rest (nats-server's `jetstream { cipher, key, prev_key }`): on when a key is
    # given (here, by --key-file, or by $INFINISTREAM_KEY). `prev_keys` still open older objects
    # until `infinistream pipeline rewrap` has moved them to `key`. Never printed.
    cipher: str = ""
    key: str | None = field(default=None, repr=False)
    prev_keys: list[str] = field(default_factory=list, repr=False)
    # Or a pluggable provider of the keys (a KMS): `package.module:name` (storage.keys).
    key_provider: str = ""
    # nats-server's `jetstream { domain }`: the API answers on `$JS.<domain>.API.>` too, and
    # account info, stream infos and PubAcks name it ("": no domain).
    jetstream_domain: str = ""
    # Logging as nats-server's flags and config keys ask (logs/options.py).
    log: LogOptions = field(default_factory=LogOptions)

    @property
    def monitor_host(self) -> str:
        """Where the monitoring port listens: http_host, else the client host."""
        return self.http_host if self.http_host is not None else self.host

    @property
    def auth(self) -> AuthConfig:
        """Who may connect: the config file's users and accounts, with the flags on top."""
        auth = self.auth_config.with_flags(self.user, self.password, self.token)
        if auth.timeout is None:
            # nats-server's getDefaultAuthTimeout: with TLS, the TLS timeout and a second.
            timeout = self.tls.timeout + 1.0 if self.tls is not None else DEFAULT_AUTH_TIMEOUT
            auth = dataclasses.replace(auth, timeout=timeout)
        return auth

    @property
    def auth_required(self) -> bool:
        return self.auth.required

    @property
    def auth_timeout(self) -> float:
        """nats-server's AUTH_TIMEOUT: a client must send CONNECT this soon when auth is
        required."""
        return self.auth.timeout or 0.0

    @property
    def put_interval(self) -> float:
        """The average interval between object PUTs the write buffer may not go below."""
        if self.linger is not None:
            return self.linger
        return S3_LINGER if self.objects_url.startswith("s3://") else LOCAL_LINGER

    @property
    def objects_url(self) -> str:
        if self.objects:
            return self.objects
        return Path(self.store_dir, "objects").resolve().as_uri()

    @property
    def metadata_url(self) -> str:
        if self.metadata:
            return self.metadata
        return "sqlite:///" + str(Path(self.store_dir, "meta.db").resolve()).lstrip("/")

    def check(self) -> None:
        # -1 is nats-server's RANDOM_PORT (e.g. `-m -1`: monitoring on any free port).
        if not -1 <= self.port <= 65535 or not -1 <= self.http_port <= 65535:
            raise SettingsError("port out of range")
        if self.linger is not None and self.linger <= 0:
            raise SettingsError("linger must be > 0")
        if self.batch_bytes < 1024:
            raise SettingsError("batch_bytes must be at least 1KB")
        if self.max_payload <= 0:
            raise SettingsError("max_payload must be > 0")
        # '@' is what an account's group adds to it (jetstream/accounts.py).
        if "/" in self.group or "@" in self.group or not self.group:
            raise SettingsError("group must be a non-empty name without '/' or '@'")
        if self.s3_timeout <= 0:
            raise SettingsError("s3 timeout must be > 0")
        if self.s3_retries < 0:
            raise SettingsError("s3 retries must not be negative")
        # Encryption at rest.
        if self.cipher:
            try:
                cipher_from_name(self.cipher)
            except ValueError as exc:
                raise SettingsError(f"jetstream cipher: {exc}") from exc
        if (self.cipher or self.prev_keys) and not (self.key or self.key_provider):
            raise SettingsError(
                "encryption needs a key: jetstream { key }, --key-file or $" + KEY_ENV
            )
        if self.key_provider and (self.key or self.prev_keys):
            raise SettingsError("give either keys or a key provider, not both")
        if self.key_provider:
            self.encryption()  # a provider that cannot be loaded is named now, not at start
        if self.key is not None and not self.key.strip():
            raise SettingsError("jetstream key must not be empty")
        # Jobs role settings.
        try:
            parse_jobs(self.jobs)
        except ValueError as exc:
            raise SettingsError(f"jobs: {exc}") from exc
        if self.jobs_interval <= 0:
            raise SettingsError("jobs_interval must be > 0")
        if self.workers < 1:
            raise SettingsError("workers must be at least 1")
        if self.janitor_grace < 0:
            raise SettingsError("janitor_grace must not be negative")
        if self.erase_deadline < 0:
            raise SettingsError("erase_deadline must not be negative")
        if self.index_cache < 1024 * 1024:
            raise SettingsError("index_cache must be at least 1MB")
        if self.pack_index < 0:
            raise SettingsError("pack_index must not be negative")
        if self.index_format not in (1, 2):
            raise SettingsError("index_format must be 1 or 2")
        # Zone cache settings.
        if self.cache_memory < 0 or self.cache_size < 0:
            raise SettingsError("cache sizes must not be negative")
        if not 0 <= self.cache_port <= 65535:
            raise SettingsError("cache_port out of range")
        if self.cache_timeout <= 0:
            raise SettingsError("cache_timeout must be > 0")
        if not self.roles or any(role not in ROLES for role in self.roles):
            raise SettingsError(f"roles: expected some of {','.join(ROLES)}")
        if self.jobs and JOBS_ROLE not in self.roles:
            raise SettingsError(
                f"jobs {self.jobs!r} given, but the jobs role is not among roles "
                f"{','.join(self.roles)}"
            )
        if "/" in self.zone:
            raise SettingsError("zone must not contain '/'")
        if self.membership_ttl < 0.3:
            raise SettingsError("membership_ttl must be at least 300ms")
        if self.lame_duck_duration <= 0 or self.lame_duck_grace_period < 0:
            raise SettingsError("lame_duck_duration must be > 0, lame_duck_grace_period >= 0")
        if self.lame_duck_grace_period >= self.lame_duck_duration:
            # nats-server's rule (validateOptions), in its words.
            raise SettingsError(
                f"lame duck grace period ({_go_duration(self.lame_duck_grace_period)}) should be"
                " strictly lower than lame duck duration"
                f" ({_go_duration(self.lame_duck_duration)})"
            )

    def runs_jobs(self) -> bool:
        """Whether this agent takes part in the pipeline jobs' leases."""
        return bool(self.jobs) and JOBS_ROLE in self.roles

    def encryption(self) -> Encryption | None:
        """The keys and cipher that seal what this process writes; None: encryption is off."""
        cipher = cipher_from_name(self.cipher or "chachapoly")  # nats-server's default
        if self.key_provider:
            try:
                return Encryption(load_provider(self.key_provider), cipher)
            except ValueError as exc:
                raise SettingsError(str(exc)) from exc
        if not self.key:
            return None
        return Encryption(LocalKeys.from_texts(self.key, self.prev_keys, cipher=cipher), cipher)


# nats-server's long flags that `serve` refuses, and why (docs/from-nats-server.md, "Flags"):
# running as if one were set would leave clients or messages somewhere else than configured.
_NO_ROUTES = "agents do not route to each other: they share object storage and metadata"
REFUSED_GO_FLAGS = {
    "https_port": "monitoring is plain HTTP",
    "ports_file_dir": "the log says which ports the agent listens on",
    "profile": "there is no Go profiler; profile with Python's tools",
    "routes": _NO_ROUTES,
    "cluster": _NO_ROUTES,
    "cluster_listen": _NO_ROUTES,
    "cluster_advertise": _NO_ROUTES,
    "no_advertise": _NO_ROUTES,
    "connect_retries": _NO_ROUTES,
    "cluster_name": _NO_ROUTES,
    "help_tls": "TLS is described in docs/security.md",
}


class _RefusedFlag(argparse.Action):
    """A nats-server flag the agent does not take: parsing stops with the reason, as the config
    file's refusal gives it, rather than argparse's bare "unrecognized arguments"."""

    def __init__(self, option_strings: list[str], dest: str, reason: str, **_: Any) -> None:
        # Any value may follow (`--cluster nats://...`); none is kept, nor listed in --help.
        super().__init__(
            option_strings, dest, nargs="?", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
        self.reason = reason

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        flag = option_string or self.option_strings[0]
        raise argparse.ArgumentError(
            None, f'"{flag}" is not supported by InfiniStream: {self.reason}'
        )


def normalize_go_flags(argv: list[str]) -> list[str]:
    """nats-server accepts `-flag=value` and `-long_flag value`; argparse wants `--long`."""
    out = []
    long_single_dash = {
        "-js": "--jetstream",
        "-sd": "--store_dir",
        "-user": "--user",
        "-pass": "--pass",
        "-auth": "--auth",
        "-addr": "--addr",
        "-port": "--port",
        "-http_port": "--http_port",
        "-config": "--config",
        "-name": "--server_name",
        "-server_name": "--server_name",
        "-jetstream": "--jetstream",
        "-store_dir": "--store_dir",
        "-net": "--addr",
        "-tls": "--tls",
        "-tlscert": "--tlscert",
        "-tlskey": "--tlskey",
        "-tlscacert": "--tlscacert",
        "-tlsverify": "--tlsverify",
        "-help": "--help",
        "-version": "--version",
        **GO_LONG_FLAGS,
        # nats-server flags an agent does not take: spelled with two dashes, argparse refuses
        # them by name (with one, `-cluster` would read as `-c luster`).
        **{f"-{name}": f"--{name}" for name in REFUSED_GO_FLAGS},
        "-ms": "--https_port",
        "-sl": "--signal",
        "-signal": "--signal",
    }
    for arg in argv:
        name, eq, value = arg.partition("=")
        if name in long_single_dash:
            name = long_single_dash[name]
        elif name.startswith("-") and not name.startswith("--") and len(name) > 2 and eq:
            # `-p=4222` style for the short flags.
            pass
        out.append(name + eq + value if eq else name)
    return out


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the stores are and how their objects are sealed: the flags `infinistream serve`
    and the pipeline's commands share (read back by `settings_from_args`)."""
    add = parser.add_argument
    add(
        "-sd",
        "--store_dir",
        dest="store_dir",
        help="Directory of the embedded object and metadata store",
    )
    add("-c", "--config", dest="config", help="Configuration file (nats-server syntax)")
    add(
        "--objects",
        dest="objects",
        help="Object store URL: file:///dir, s3://bucket/prefix, memory://",
    )
    add("--metadata", dest="metadata", help="Metadata store URL: sqlite:///path/meta.db")
    add("--group", dest="group", help="Virtual group (tenant) name (default: default)")
    add("--s3-endpoint", dest="s3_endpoint", help="S3-compatible endpoint URL")
    add("--s3-region", dest="s3_region", help="S3 region")
    # Encryption at rest.
    add("--cipher", dest="cipher", help="Encryption at rest: chachapoly (default) or aes")
    add(
        "--key-file",
        dest="key_file",
        help=f"Encryption at rest: file holding the key (or set ${KEY_ENV})",
    )
    add(
        "--prev-key-file",
        dest="prev_key_file",
        action="append",
        help=f"A previous key, still read until rewrapped (or set ${PREV_KEY_ENV})",
    )
    add(
        "--key-provider",
        dest="key_provider",
        help="Encryption at rest: the keys' provider (a KMS), as package.module:name",
    )


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("-a", "--addr", "--net", dest="host", help="Bind to host address (default: 0.0.0.0)")
    add("-p", "--port", dest="port", type=int, help="Use port for clients (default: 4222)")
    add("-m", "--http_port", dest="http_port", type=int, help="Use port for http monitoring")
    add("-n", "--server_name", "--name", dest="server_name", help="Server name")
    add("-js", "--jetstream", action="store_true", help="Accepted: JetStream is always on")
    add_store_arguments(parser)
    add(
        "--max_connections",
        dest="max_connections",
        type=int,
        help="Most client connections at once (default: 65536, kept below the open-file limit)",
    )
    add("--user", dest="user", help="User required for connections")
    add("--pass", dest="password", help="Password required for connections")
    add("--auth", dest="token", help="Authorization token required for connections")
    # nats-server's TLS flags: any of them replaces the config file's tls block.
    add("--tls", dest="tls_flag", action="store_true", help="Enable TLS")
    add("--tlscert", dest="tls_cert", help="Server certificate file")
    add("--tlskey", dest="tls_key", help="Private key for server certificate")
    add("--tlscacert", dest="tls_ca", help="Client certificate CA for verification")
    add(
        "--tlsverify",
        dest="tls_verify",
        action="store_true",
        help="Enable TLS with client verification",
    )
    add(
        "--linger",
        dest="linger",
        help="Write buffer PUT budget: at most one object PUT per linger on average, e.g. 250ms "
        "(default: 250ms on S3, 250us on a local directory)",
    )
    add("--batch-bytes", dest="batch_bytes", help="Write buffer size that forces a flush, e.g. 4MB")
    add("--s3-timeout", dest="s3_timeout", help="Time one S3 request may take, e.g. 30s (default)")
    add("--s3-retries", dest="s3_retries", help="Times a failed S3 request is retried (10)")
    # Jobs role: off unless asked for.
    add(
        "--jobs",
        dest="jobs",
        nargs="?",
        const=",".join(DEFAULT_JOBS),
        help=f"Run pipeline jobs on a schedule: all, or a comma-separated list ({','.join(JOBS)})",
    )
    add("--jobs-interval", dest="jobs_interval", help="How often the jobs run, e.g. 5m (default)")
    add("--jobs-master", dest="jobs_master", help="Spark master of the jobs (default: local[*])")
    add("--janitor-grace", dest="janitor_grace", help="Grace of scheduled janitor runs (10m)")
    add(
        "--erase-deadline",
        dest="erase_deadline",
        help="/healthz fails when an erase request is not complete after this long, e.g. 24h",
    )
    add(
        "--workers",
        dest="workers",
        type=int,
        help="Agent processes sharing the client port and the store (default: 1)",
    )
    _add_cache_arguments(parser)
    # The pool.
    add("--zone", dest="zone", help="This agent's zone (availability zone); default: none")
    add(
        "--roles",
        dest="roles",
        help=f"What this agent does, comma-separated: {','.join(ROLES)} (default: all)",
    )
    add(
        "--client_advertise",
        "--client-advertise",
        dest="client_advertise",
        help="Client address (host:port) advertised to the pool's clients in connect_urls",
    )
    add(
        "-sl",
        "--signal",
        dest="signal",
        metavar="SIGNAL[=PID]",
        help="Send a signal to a running agent and exit: ldm, stop, quit, term, reload (the pid,"
        " or a pid file, after =; without it the one agent running on this host)",
    )
    # Set on the workers that --workers starts.
    add("--reuse-port", dest="reuse_port", action="store_true", help=argparse.SUPPRESS)
    for name, reason in REFUSED_GO_FLAGS.items():
        add(f"--{name}", dest=f"refused_{name}", action=_RefusedFlag, reason=reason)
    add_log_arguments(parser)


def _add_cache_arguments(parser: argparse.ArgumentParser) -> None:
    """The stream index's flags and the zone cache's."""
    add = parser.add_argument
    add(
        "--upstream",
        dest="upstream",
        action="append",
        metavar="NAME=URL",
        help="A running NATS server mirrors and sources may read from as $JS.NAME.API "
        "(repeatable; docs/migration.md)",
    )
    add(
        "--index-cache",
        dest="index_cache",
        help="Memory for stream indexes, whatever the streams' number and length (64MB)",
    )
    add(
        "--pack-index",
        dest="pack_index",
        help="Memory for where the local object store's objects are, whatever the stream's "
        "length (2MB)",
    )
    add(
        "--index-format",
        dest="index_format",
        help="Index form new sections are written in: 2 (default) or 1, while agents of "
        "earlier versions still run in the pool",
    )
    # Zone cache.
    add("--cache-size", dest="cache_size", help="Zone cache on local disk, e.g. 1GB (0: none)")
    add("--cache-memory", dest="cache_memory", help="Zone cache in memory, e.g. 256MB (default)")
    add("--cache-dir", dest="cache_dir", help="Zone cache directory (<store_dir>/cache)")
    add("--cache-port", dest="cache_port", help="Port of the cache channel between agents (any)")
    add("--cache-timeout", dest="cache_timeout", help="Wait for a cache owner, e.g. 1s (default)")


def _apply_config_file(settings: Settings, path: str) -> None:
    try:
        conf = natsconf.load(path)
    except (OSError, natsconf.ConfigError) as exc:
        raise SettingsError(f"config file {path}: {exc}") from exc
    try:
        _apply_config(settings, conf, path)
    except natsconf.ConfigError as exc:
        # nats-server's form: the file, the line, what is wrong.
        raise SettingsError(str(exc)) from exc
    except (ValueError, TypeError) as exc:
        # A value of the wrong kind (`port: "abc"`, `ping_interval: "zz"`): one line naming
        # the file, not a traceback.
        raise SettingsError(f"config file {path}: {exc}") from exc


# Top-level keys, as nats-server reads them (case-insensitively). Anything else refuses to
# start, as nats-server refuses an unknown field: a key that is silently dropped is a setting
# the user believes in and does not have. A new key must be added here and to
# docs/security.md ("Every key").
_TOP_LEVEL_KEYS = {
    "listen", "host", "net", "port", "http", "http_host", "http_port", "monitor_port",
    "server_name", "max_payload", "max_pending", "ping_interval", "ping_max",
    "max_connections", "max_conn", "write_deadline",
    "jetstream", "infinistream", "tls", "client_advertise",
    "authorization", "accounts", "no_auth_user", "system_account", "system",
    "operator", "resolver", "resolver_preload",
    "store_dir", "storedir",
    # Logging (logs/options.py reads them).
    "debug", "trace", "trace_verbose", "logtime", "logtime_utc", "logfile", "log_file",
    "logfile_size_limit", "log_size_limit", "logfile_max_num", "log_max_num", "syslog",
    "remote_syslog", "pidfile", "pid_file", "max_traced_msg_len",
    "lame_duck_duration", "lame_duck_grace_period",
}  # fmt: skip
# nats-server's own keys that InfiniStream does not implement: refused with a word saying so.
_NOT_SUPPORTED = {
    "cluster", "gateway", "leafnodes", "leaf", "mqtt", "websocket", "ws", "routes",
    "mappings", "maps", "operators", "trusted", "trusted_keys", "resolver_tls", "https",
    "https_port", "http_base_path",
    "allow_non_tls", "max_subscriptions", "max_subs",
    "max_control_line",
    "ocsp", "ocsp_cache", "no_header_support", "no_system_account", "no_system",
    "no_sys_acc", "default_js_domain",
    "connect_error_reports", "reconnect_error_reports", "ports_file_dir", "prof_port",
    "max_closed_clients",
    "disable_sublist_cache", "no_fast_producer_stall", "auth_callout",
}  # fmt: skip


class _BlockKeyError(ValueError):
    """A bad key or value inside a block (`infinistream { }`, `jetstream { }`): reported at the
    key's own line and column, not at the block's."""

    def __init__(self, block: dict[str, Any], key: str, reason: str) -> None:
        super().__init__(reason)
        self.block = block
        self.key = key
        self.reason = reason


def _unknown(what: str, key: str, known: Iterable[str]) -> str:
    """`what` naming `key`, and the known key it most likely misspells."""
    guess = natsconf.near_miss(key, known)
    return f'{what} (did you mean "{guess}"?)' if guess else what


def _apply_config(settings: Settings, conf: dict[str, Any], path: str | None = None) -> None:
    for key, value in conf.items():
        k = key.lower()
        if k not in _TOP_LEVEL_KEYS:
            reason = (
                f'"{key}" is not supported by InfiniStream'
                if k in _NOT_SUPPORTED
                else _unknown(f'unknown field "{key}"', key, _TOP_LEVEL_KEYS)
            )
            raise _config_error(conf, key, path, reason)
        try:
            _apply_key(settings, k, value)
            # The logging keys are logs/options.py's; it leaves the others alone.
            apply_log_config(settings.log, {k: value})
        except _BlockKeyError as exc:
            raise _config_error(exc.block, exc.key, path, exc.reason) from exc
        except (ValueError, TypeError, SettingsError) as exc:
            raise _config_error(conf, key, path, str(exc)) from exc
    settings.auth_config = parse_auth(conf, path=path)
    js = conf.get("jetstream")
    if isinstance(js, dict) and "store_dir" in js:
        settings.store_dir = str(js["store_dir"])
    ours = conf.get("infinistream")
    if isinstance(ours, dict):
        _apply_ours(settings, ours)
    tls_key = next((k for k in conf if k.lower() == "tls"), None)
    if tls_key is not None:
        settings.tls = parse_tls(conf[tls_key], path=path, where=conf)


def _config_error(conf: dict[str, Any], key: str, path: str | None, reason: str) -> Exception:
    """nats-server's form: file:line:column: reason."""
    line, column = natsconf.key_position(conf, key)
    return natsconf.ConfigError(reason, line=line, column=column, path=path)


def _apply_key(settings: Settings, k: str, value: Any) -> None:
    if k == "listen":
        if isinstance(value, int) and not isinstance(value, bool):
            settings.port = value  # nats-server takes `listen: 4222` as a port
            return
        host, port = _host_port("listen", value)
        settings.host = host or settings.host
        settings.port = port if port is not None else settings.port
    elif k in ("host", "net"):
        settings.host = _text(k, value)
    elif k == "port":
        settings.port = _int(k, value)
    elif k in ("http_port", "monitor_port"):
        settings.http_port = _int(k, value)
    elif k == "http":
        # `http: 8222` or `http: "host:port"`.
        if isinstance(value, int) and not isinstance(value, bool):
            settings.http_port = value
            return
        host, port = _host_port("http", value)
        if host:
            settings.http_host = host
        if port is not None:
            settings.http_port = port
    elif k == "http_host":
        settings.http_host = _text(k, value)
    elif k == "server_name":
        settings.server_name = _text(k, value)
    elif k == "client_advertise":
        # The address the pool's clients are given for this agent (INFO connect_urls).
        settings.client_advertise = _text(k, value)
    elif k in ("max_payload", "max_pending"):
        setattr(settings, k, _size(value))
    elif k in ("max_connections", "max_conn"):
        # As nats-server: 0 in the file means no connection at all.
        settings.max_connections = _int(k, value) or -1
    elif k == "write_deadline":
        settings.write_deadline = natsconf.parse_duration(value)
    elif k == "ping_interval":
        settings.ping_interval = natsconf.parse_duration(value)
    elif k == "ping_max":
        settings.max_pings_out = _int(k, value)
    elif k in ("lame_duck_duration", "lame_duck_grace_period"):
        seconds = natsconf.parse_duration(value)
        if seconds < 0:
            raise ValueError(f"invalid {k}, needs to be positive")
        setattr(settings, k, seconds)
    elif k in ("store_dir", "storedir"):
        # nats-server's store directory at the top level; the jetstream block's wins.
        settings.store_dir = _text(k, value)
    elif k == "jetstream":
        _apply_jetstream(settings, value)
    elif k == "infinistream":
        if not isinstance(value, dict):
            raise ValueError("infinistream: expected a block { ... }")
        _apply_ours(settings, value)
    # authorization, accounts, no_auth_user, system_account and tls are read as a whole
    # (security/); the logging keys by logs/options.py.


def _apply_jetstream(settings: Settings, value: Any) -> None:
    if isinstance(value, bool) or (
        isinstance(value, str) and value.lower() in ("enabled", "enable", "disabled", "disable")
    ):
        if value is False or (isinstance(value, str) and value.lower().startswith("disable")):
            raise ValueError("jetstream: JetStream is always on in InfiniStream")
        return
    if not isinstance(value, dict):
        raise ValueError(f"jetstream: expected enabled, disabled or a block, got {value!r}")
    for key, v in value.items():
        if key.lower() in _STORE_DIR_KEYS:
            try:
                settings.store_dir = _text("store_dir", v)
            except ValueError as exc:
                raise _BlockKeyError(value, key, f"jetstream: {exc}") from exc
        elif key.lower() == "domain":
            try:
                settings.jetstream_domain = _domain(v)
            except ValueError as exc:
                raise _BlockKeyError(value, key, str(exc)) from exc
        elif key not in _ENCRYPTION_KEYS:
            # max_memory_store, max_file_store, domain, ...: limits are per account here.
            guess = natsconf.near_miss(key, _JETSTREAM_KEYS)
            reason = (
                f'jetstream: unknown field "{key}" (did you mean "{guess}"?)'
                if guess
                else f'jetstream: "{key}" is not supported by InfiniStream'
            )
            raise _BlockKeyError(value, key, reason)
    _apply_encryption(settings, value)


def _domain(value: Any) -> str:
    """A JetStream domain, checked as nats-server's validateJetStreamOptions checks it."""
    domain = _text("domain", value)
    # "$JS.<domain>.API.>" is a valid subject unless a token is cut by white space or ">"
    # stands inside it; the domain must also be one token, without wildcards.
    if any(c in domain for c in " \t\r\n\f>"):
        raise ValueError(
            f'invalid domain name: derived "$JS.{domain}.API.>" is not a valid subject'
        )
    if any(c in domain for c in ".*"):
        raise ValueError("invalid domain name: may not contain ., * or >")
    return domain


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{key}: expected a string, got {value!r}")
    return value


def _host_port(key: str, value: Any) -> tuple[str, int | None]:
    if not isinstance(value, str):
        raise ValueError(f"{key}: expected host:port, got {value!r}")
    host, sep, port = value.rpartition(":")
    if not sep:
        return value, None
    return host, _int(f"{key} port", port)


# The jetstream block's encryption-at-rest keys (nats-server's names and aliases).
_ENCRYPTION_KEYS = {
    "cipher", "key", "ek", "encryption_key", "prev_key", "prev_ek", "prev_encryption_key",
}  # fmt: skip
_STORE_DIR_KEYS = ("store_dir", "storedir", "store")
_JETSTREAM_KEYS = {*_STORE_DIR_KEYS, *_ENCRYPTION_KEYS, "domain"}


def _apply_encryption(settings: Settings, js: dict[str, Any]) -> None:
    """nats-server's keys and aliases: `cipher`, `key` (`ek`, `encryption_key`), `prev_key`
    (`prev_ek`, `prev_encryption_key`); a list of previous keys is ours."""
    for name in ("key", "ek", "encryption_key"):
        if name in js:
            if not isinstance(js[name], str):
                raise ValueError(f"expected string for 'key', got {type(js[name]).__name__}")
            settings.key = js[name]
    for name in ("prev_key", "prev_ek", "prev_encryption_key"):
        if name in js:
            value = js[name]
            values = value if isinstance(value, list) else [value]
            if not all(isinstance(v, str) for v in values):
                raise ValueError("expected string for 'prev_key'")
            settings.prev_keys = [str(v) for v in values]
    if "cipher" in js:
        if not isinstance(js["cipher"], str):
            raise ValueError("expected string for 'cipher'")
        settings.cipher = js["cipher"]


def _key_text(path: str) -> str:
    try:
        return read_key_file(path).decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"key file {path}: {exc}") from exc


def _go_duration(seconds: float) -> str:
    """A duration as Go prints one in the messages nats-server's rules give (`10s`, `1m0s`)."""
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:g}s"
    return f"{int(minutes)}m{text}" if minutes else text


def _int(key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{key}: expected an integer, got {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key}: expected an integer, got {value!r}") from None


# The infinistream block's keys read on their own; every other key is a Settings field of the
# same name (_OWN_FIELDS).
_OWN_KEYS = ("linger", "jobs", "roles", "batch_bytes", "cache_bytes", "s3")
# Credentials, TLS and accounts have their own blocks (authorization, accounts, tls).
_OWN_FIELDS = {f.name for f in fields(Settings)} - {
    "tls", "auth_config", "user", "password", "token",
}  # fmt: skip
_S3_KEYS = ("timeout", "retries", "endpoint", "region", "access_key_id", "secret_access_key")


def _apply_ours(settings: Settings, ours: dict[str, Any]) -> None:
    for key, value in ours.items():
        if key not in _OWN_KEYS and key not in _OWN_FIELDS:
            what = f"unknown infinistream setting {key!r}"
            raise _BlockKeyError(ours, key, _unknown(what, key, {*_OWN_KEYS, *_OWN_FIELDS}))
        try:
            _apply_own_key(settings, key, value)
        except _BlockKeyError:
            raise
        except (ValueError, TypeError, SettingsError) as exc:
            raise _BlockKeyError(ours, key, f"infinistream {key}: {exc}") from exc


def _apply_own_key(settings: Settings, key: str, value: Any) -> None:
    if key == "linger":
        settings.linger = natsconf.parse_duration(value)
    elif key == "jobs":
        # Jobs role: `jobs: true` runs every job, or name them: `jobs: "janitor"`.
        if isinstance(value, bool):
            settings.jobs = ",".join(DEFAULT_JOBS) if value else ""
        elif isinstance(value, str):
            settings.jobs = value
        else:
            raise SettingsError("expected true, false or job names")
    elif key == "roles":
        # `roles: "publish,fetch"` or `roles: [publish, fetch]`.
        text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
        settings.roles = parse_roles(text)
    elif key in ("batch_bytes", "cache_bytes"):
        setattr(settings, key, _size(value))
    elif key == "s3":
        if not isinstance(value, dict):
            raise SettingsError("expected a block { ... }")
        _apply_s3(settings, value)
    elif key == "upstreams":
        settings.upstreams = parse_upstreams(value)
    else:
        # Coerce to the setting's type so a wrong kind fails here, not deep in the agent.
        current = getattr(settings, key)
        if isinstance(current, int) and not isinstance(current, bool):
            value = _size(value)
        elif isinstance(current, float):
            value = natsconf.parse_duration(value)
        elif not isinstance(value, str):
            raise SettingsError("must be a string")
        setattr(settings, key, value)


def _apply_s3(settings: Settings, block: dict[str, Any]) -> None:
    for key, value in block.items():
        if key not in _S3_KEYS:
            what = f"unknown infinistream s3 setting {key!r}"
            raise _BlockKeyError(block, key, _unknown(what, key, _S3_KEYS))
        try:
            if key == "timeout":
                settings.s3_timeout = natsconf.parse_duration(value)
            elif key == "retries":
                settings.s3_retries = _int("s3 retries", value)
            else:
                setattr(settings, f"s3_{key}", str(value))
        except ValueError as exc:
            raise _BlockKeyError(block, key, f"infinistream s3 {key}: {exc}") from exc


def _size(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip().upper().removesuffix("B")
    units = {"K": 1024, "M": 1024**2, "G": 1024**3}
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        raise ValueError(f"invalid size {value!r}") from None


def _apply_tls_flags(settings: Settings, args: argparse.Namespace) -> None:
    """nats-server's overrideTLS: any --tls flag replaces the config file's block."""
    cert, key = getattr(args, "tls_cert", None), getattr(args, "tls_key", None)
    ca, verify = getattr(args, "tls_ca", None), getattr(args, "tls_verify", False)
    if not (getattr(args, "tls_flag", False) or cert or key or ca or verify):
        return
    if not cert:
        raise SettingsError("TLS Server certificate must be present and valid")
    if not key:
        raise SettingsError("TLS Server private key must be present and valid")
    spec = TlsSpec(cert_file=cert, key_file=key, ca_file=ca, verify=bool(verify))
    try:
        spec.context()
    except natsconf.ConfigError as exc:
        raise SettingsError(exc.message) from exc
    settings.tls = spec


# Flags whose text is read into a setting (attribute and flag dest alike), in the order a bad
# one is reported; the cache's after the logging flags.
_READ_FLAGS: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("linger", natsconf.parse_duration),
    ("batch_bytes", _size),
    ("s3_timeout", natsconf.parse_duration),
    ("s3_retries", partial(_int, "--s3-retries")),
    ("roles", parse_roles),
    ("jobs_interval", natsconf.parse_duration),
    ("janitor_grace", natsconf.parse_duration),
    ("erase_deadline", natsconf.parse_duration),
)
_READ_CACHE_FLAGS: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("cache_size", _size),
    ("cache_memory", _size),
    ("index_cache", _size),
    ("pack_index", _size),
    ("cache_port", partial(_int, "--cache-port")),
    ("index_format", partial(_int, "--index-format")),
    ("cache_timeout", natsconf.parse_duration),
)


def _read_flags(
    settings: Settings, args: argparse.Namespace, flags: Iterable[tuple[str, Callable[[Any], Any]]]
) -> None:
    for attr, read in flags:
        value = getattr(args, attr, None)
        if value is not None:
            setattr(settings, attr, read(value))


def settings_from_args(args: argparse.Namespace) -> Settings:
    settings = Settings()
    if args.config:
        _apply_config_file(settings, args.config)
    for attr in (
        "host",
        "port",
        "http_port",
        "server_name",
        "store_dir",
        "user",
        "password",
        "token",
        "objects",
        "metadata",
        "group",
        "s3_endpoint",
        "s3_region",
        "workers",
        "cache_dir",
        "zone",
        "client_advertise",
        "max_connections",
        "jobs",
        "jobs_master",
        "cipher",
        "key_provider",
    ):
        value = getattr(args, attr, None)
        if value is not None:
            setattr(settings, attr, value)
    if getattr(args, "reuse_port", False):
        settings.reuse_port = True
    for text in getattr(args, "upstream", None) or ():
        try:
            upstream = parse_upstream_flag(text)
        except ValueError as exc:
            raise SettingsError(str(exc)) from exc
        settings.upstreams[upstream.name] = upstream
    _apply_tls_flags(settings, args)
    # Bad values are reported as SettingsError (a message and exit code 2), not a traceback.
    try:
        _read_flags(settings, args, _READ_FLAGS)
        apply_log_args(settings.log, args)
        _read_flags(settings, args, _READ_CACHE_FLAGS)
    except ValueError as exc:
        raise SettingsError(str(exc)) from exc
    # Encryption at rest: a key file over the config's key over the environment's.
    if getattr(args, "key_file", None) is not None:
        settings.key = _key_text(args.key_file)
    elif settings.key is None and not settings.key_provider and os.environ.get(KEY_ENV):
        settings.key = os.environ[KEY_ENV]
    if getattr(args, "prev_key_file", None):
        settings.prev_keys = [_key_text(p) for p in args.prev_key_file]
    elif not settings.prev_keys and os.environ.get(PREV_KEY_ENV):
        # One key a line: the jobs role hands its previous keys to its jobs this way.
        settings.prev_keys = [k for k in os.environ[PREV_KEY_ENV].split("\n") if k.strip()]
    settings.s3_access_key_id = os.environ.get("AWS_ACCESS_KEY_ID", settings.s3_access_key_id)
    settings.s3_secret_access_key = os.environ.get(
        "AWS_SECRET_ACCESS_KEY", settings.s3_secret_access_key
    )
    settings.check()
    return settings
