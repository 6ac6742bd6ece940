"""Metadata: an ordered key-value store with compare-and-set transactions, and its backends.

`open_metadata(url)` picks the backend from the URL scheme:

- `sqlite:///abs/path/meta.db`: an absolute path (everything after `sqlite://`).
- `sqlite://data/meta.db`: a path relative to the working directory at open time.
- `sqlite://:memory:`: a private in-memory store (one process, one handle; for tests).
"""

from __future__ import annotations

from urllib.parse import unquote

from infinistream.metadata.kv import (
    Compare,
    Delete,
    DeletePrefix,
    Item,
    MetadataError,
    MetadataStore,
    Op,
    Put,
    TxnResult,
)
from infinistream.metadata.sqlite import MEMORY, SqliteMetadataStore, prefix_end

__all__ = [
    "Compare",
    "Delete",
    "DeletePrefix",
    "Item",
    "MetadataError",
    "MetadataStore",
    "Op",
    "Put",
    "SqliteMetadataStore",
    "TxnResult",
    "open_metadata",
    "prefix_end",
]

_EXAMPLES = "sqlite:///abs/path/meta.db, sqlite://relative/meta.db or sqlite://:memory:"


def open_metadata(url: str) -> MetadataStore:
    """The metadata store that `url` names. Does no I/O: errors reaching it come on first use.

    Raises ValueError for a URL this build cannot interpret.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"metadata URL {url!r} has no scheme; expected e.g. {_EXAMPLES}")
    scheme = scheme.lower()
    if scheme == "sqlite":
        return SqliteMetadataStore(_sqlite_path(url, rest))
    # Next backend: "etcd://host:port,host:port" -> split `rest` on "," into endpoints and
    # return the etcd store here (import it inside this branch: its client is an optional extra).
    raise ValueError(
        f"unknown metadata URL scheme {scheme!r} in {url!r}; supported: sqlite (e.g. {_EXAMPLES})"
    )


def _sqlite_path(url: str, rest: str) -> str:
    if "?" in rest or "#" in rest:
        raise ValueError(f"metadata URL {url!r}: sqlite URLs take no query or fragment")
    if rest == MEMORY:
        return MEMORY
    path = unquote(rest)  # so a path with spaces can be written as %20
    if not path or path.endswith("/"):
        raise ValueError(f"metadata URL {url!r} names no file; expected e.g. {_EXAMPLES}")
    return path
