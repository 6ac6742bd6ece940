"""Metadata: an ordered key-value store with compare-and-set transactions, and its backends.

`open_metadata(url)` picks the backend from the URL scheme:

- `sqlite:///abs/path/meta.db`: an absolute path (everything after `sqlite://`).
- `sqlite://data/meta.db`: a path relative to the working directory at open time.
- `sqlite://:memory:`: a private in-memory store (one process, one handle; for tests).
- `etcd://host:port[,host:port...]`: an etcd v3 cluster through its JSON gateway over HTTP, with
  failover across the listed members (port 2379 when omitted); `etcd+https://...` for TLS,
  verified against the system CAs. Query options: `max_txn_ops=N` (the servers'
  `--max-txn-ops`, default 128; splits get_many), `timeout=SECONDS` (per request, default 30),
  `history=SECONDS` (how old etcd's history gets before the store compacts it, default 10; 0
  leaves it to etcd's own auto-compaction);
  for a cluster with TLS and authentication (etcd_access.py) `cacert=PATH` (the CA that signed
  the members' certificates), `cert=PATH&key=PATH` (the client certificate), `user=NAME` and
  `password_file=PATH` (or `password=...`, which then shows in process lists).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote

from infinistream.metadata import kv
from infinistream.metadata.kv import *  # noqa: F403 - kv's contract is the package's API
from infinistream.metadata.sqlite import MEMORY, SqliteMetadataStore

if TYPE_CHECKING:
    from infinistream.metadata.etcd import EtcdMetadataStore

__all__ = ["EtcdMetadataStore", "SqliteMetadataStore", "open_metadata"]
__all__ += kv.__all__

_EXAMPLES = (
    "sqlite:///abs/path/meta.db, sqlite://relative/meta.db, sqlite://:memory:"
    " or etcd://host:2379,host2:2379"
)
_ETCD_DEFAULT_PORT = 2379


def open_metadata(url: str) -> kv.MetadataStore:
    """The metadata store that `url` names. Does no I/O: errors reaching it come on first use.

    Raises ValueError for a URL this build cannot interpret.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"metadata URL {url!r} has no scheme; expected e.g. {_EXAMPLES}")
    scheme = scheme.lower()
    if scheme == "sqlite":
        return SqliteMetadataStore(_sqlite_path(url, rest))
    if scheme in ("etcd", "etcd+http", "etcd+https"):
        # Imported here: an agent on SQLite never loads the HTTP client.
        from infinistream.metadata.etcd import EtcdMetadataStore

        http = "https" if scheme == "etcd+https" else "http"
        endpoints, options = _etcd_endpoints(url, rest, http)
        return EtcdMetadataStore(endpoints, **options)
    raise ValueError(
        f"unknown metadata URL scheme {scheme!r} in {url!r}; supported: sqlite, etcd,"
        f" etcd+https (e.g. {_EXAMPLES})"
    )


def __getattr__(name: str) -> Any:
    if name == "EtcdMetadataStore":
        from infinistream.metadata.etcd import EtcdMetadataStore

        return EtcdMetadataStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _etcd_endpoints(url: str, rest: str, http: str) -> tuple[list[str], dict[str, Any]]:
    hosts, _, query = rest.partition("?")
    if "#" in query or "#" in hosts:
        raise ValueError(f"metadata URL {url!r}: etcd URLs take no fragment")
    hosts = hosts.rstrip("/")
    if "/" in hosts:
        raise ValueError(f"metadata URL {url!r}: etcd URLs take no path (key namespaces)")
    endpoints = []
    for host in hosts.split(","):
        host = host.strip()
        if not host:
            raise ValueError(f"metadata URL {url!r} has an empty endpoint; expected host:port,...")
        # host, host:port, [v6], [v6]:port
        has_port = host.rsplit("]", 1)[-1].count(":") == 1
        endpoints.append(f"{http}://{host}" + ("" if has_port else f":{_ETCD_DEFAULT_PORT}"))
    options: dict[str, Any] = {}
    access: dict[str, str] = {}
    for name, value in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
        try:
            if name == "max_txn_ops":
                options[name] = int(value)
            elif name in ("timeout", "history"):
                options[name] = float(value)
            elif name in _ACCESS_OPTIONS:
                access[_ACCESS_OPTIONS[name]] = value
            else:
                known = ", ".join(["max_txn_ops", "timeout", "history", *_ACCESS_OPTIONS])
                raise ValueError(f"unknown option {name!r} (known: {known})")
        except ValueError as e:
            raise ValueError(f"metadata URL {_shown(url)!r}: {e}") from e
    if access:
        from infinistream.metadata.etcd_access import EtcdAccess

        try:
            options["access"] = EtcdAccess(**access)
        except ValueError as e:
            raise ValueError(f"metadata URL {_shown(url)!r}: {e}") from e
    return endpoints, options


# The URL's names for the TLS and authentication settings (EtcdAccess's fields).
_ACCESS_OPTIONS = {
    "cacert": "ca_file",
    "cert": "cert_file",
    "key": "key_file",
    "user": "user",
    "password": "password",
    "password_file": "password_file",
}


def _shown(url: str) -> str:
    """The URL as an error may print it: a password in it is masked."""
    base, sep, query = url.partition("?")
    if not sep:
        return url
    pairs = parse_qsl(query, keep_blank_values=True)
    return base + "?" + "&".join(f"{k}={'***' if k == 'password' else v}" for k, v in pairs)


def _sqlite_path(url: str, rest: str) -> str:
    if "?" in rest or "#" in rest:
        raise ValueError(f"metadata URL {url!r}: sqlite URLs take no query or fragment")
    if rest == MEMORY:
        return MEMORY
    path = unquote(rest)  # so a path with spaces can be written as %20
    if not path or path.endswith("/"):
        raise ValueError(f"metadata URL {url!r} names no file; expected e.g. {_EXAMPLES}")
    return path
