"""Where a group's tables live and how they are laid out: the catalog, the warehouse location,
the namespace, one table per stream or one per account, the partitioning, the JSON projection.

The catalog is a URL, as the metadata store's is:

    sqlite:///abs/path/tables.db     pyiceberg's SQL catalog in a SQLite file (the default:
                                     `tables.db` beside a SQLite metadata store's file)
    postgresql://user:pw@host/db     pyiceberg's SQL catalog in PostgreSQL
    http://host:8181, https://...    an Iceberg REST catalog

A SQLite catalog is a file on the driver's machine: fine for agents on one host, but a jobs
role spread over several hosts needs a catalog they share (PostgreSQL or REST). The catalog
URL may hold a password, so the jobs role hands it to its jobs in `$INFINISTREAM_TABLES_CATALOG`,
never on a command line.

Tables lie under the location (default: `tables/` under the group's prefix in the object store,
beside `objects/`, which the janitor alone lists), one directory per table; a location in
another bucket of the same S3 endpoint is reached with the same credentials.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

from infinistream.jetstream.accounts import GLOBAL_ACCOUNT
from infinistream.pipeline.options import StoreOptions

CATALOG_ENV = "INFINISTREAM_TABLES_CATALOG"
CATALOG_NAME = "infinistream"
DEFAULT_NAMESPACE = "infinistream"
LAYOUTS = ("stream", "account")
# The table of every stream of an account, in the account layout.
ACCOUNT_TABLE = "messages"


class TableConfigError(Exception):
    """The tables cannot be configured as asked (the message says what to give)."""


@dataclass(frozen=True)
class TableConfig:
    catalog: str
    location: str
    namespace: tuple[str, ...] = (DEFAULT_NAMESPACE,)
    layout: str = "stream"
    # Partition by the first N tokens of the subject too (0: by day only).
    subject_tokens: int = 0
    # Project a JSON object payload into typed columns (the `json` struct).
    json: bool = False
    # pyiceberg FileIO properties (S3 endpoint and credentials): what executors need to write.
    io: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def io_properties(self) -> dict[str, str]:
        return dict(self.io)

    def catalog_properties(self) -> dict[str, str]:
        """pyiceberg's properties for the catalog (and the FileIO its tables use)."""
        url = self.catalog
        scheme = urlsplit(url).scheme
        props = {**self.io_properties(), "warehouse": self.location}
        if scheme == "sqlite":
            return {**props, "type": "sql", "uri": _sqlalchemy_sqlite(url)}
        if scheme in ("postgresql", "postgres"):
            rest = url.split("://", 1)[1]
            return {**props, "type": "sql", "uri": f"postgresql+psycopg2://{rest}"}
        if scheme.startswith("postgresql+"):
            return {**props, "type": "sql", "uri": url}
        if scheme in ("http", "https"):
            return {**props, "type": "rest", "uri": url}
        raise TableConfigError(
            f"catalog URL {redact(url)!r}: use sqlite:///path, postgresql://... or http(s)://"
        )

    def identifier(self, stream: str, account: str = GLOBAL_ACCOUNT) -> tuple[str, ...]:
        """The table that holds `stream`'s messages."""
        namespace = self.namespace
        if account != GLOBAL_ACCOUNT:
            # Dots separate namespace levels in a catalog: an account's own are escaped.
            namespace = (*namespace, quote(account, safe="_-").replace(".", "%2E"))
        return (*namespace, stream if self.layout == "stream" else ACCOUNT_TABLE)

    def table_location(self, identifier: tuple[str, ...]) -> str:
        return "/".join([self.location.rstrip("/"), *(quote(p, safe="") for p in identifier)])


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return parts._replace(netloc=netloc).geturl()


def _sqlalchemy_sqlite(url: str) -> str:
    """The project's SQLite URL (`sqlite:///abs` absolute, `sqlite://rel` relative, as the
    metadata store's) as SQLAlchemy spells it."""
    path = url.split("://", 1)[1]
    if not path:
        raise TableConfigError(f"catalog URL {url!r} names no file")
    return "sqlite:///" + str(Path(path).resolve())


def default_catalog(options: StoreOptions) -> str:
    """`tables.db` beside the metadata store's SQLite file; none for another metadata store
    (its agents may be on many hosts, which a SQLite file cannot serve)."""
    url = options.metadata
    if not url.startswith("sqlite://") or url.endswith(":memory:"):
        raise TableConfigError(
            f"say where the tables' catalog is (--catalog or ${CATALOG_ENV}): with metadata "
            f"store {redact(url)} the jobs may run on any host, so the catalog must be one "
            "they share (postgresql://... or a REST catalog http(s)://...)"
        )
    meta_file = Path(url.split("://", 1)[1]).resolve()
    return "sqlite:///" + str(meta_file.parent / "tables.db").lstrip("/")


def default_location(options: StoreOptions) -> str:
    return f"{options.objects.rstrip('/')}/{options.group}/tables"


def io_properties(options: StoreOptions, location: str) -> tuple[tuple[str, str], ...]:
    """What pyiceberg's FileIO needs to reach `location`: the store's S3 endpoint and
    credentials when it is in S3 (else the process's own, as pyarrow finds them)."""
    if urlsplit(location).scheme not in ("s3", "s3a"):
        return ()
    props = {
        "s3.endpoint": options.s3_endpoint,
        "s3.region": options.s3_region,
        "s3.access-key-id": options.s3_access_key_id,
        "s3.secret-access-key": options.s3_secret_access_key,
    }
    out = [(k, v) for k, v in props.items() if v]
    if options.s3_endpoint:
        # An S3-compatible server at an endpoint of its own serves buckets by path.
        out.append(("s3.force-virtual-addressing", "false"))
    return tuple(out)


def normalize_location(location: str) -> str:
    """A URL for the location: local paths become absolute file: URLs."""
    if "://" in location:
        return location.rstrip("/")
    return Path(location).expanduser().resolve().as_uri()


def add_catalog_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--catalog",
        help="Iceberg catalog URL: sqlite:///path, postgresql://..., http(s):// (REST) "
        f"(default: ${CATALOG_ENV}, else tables.db beside a SQLite metadata store)",
    )


def catalog_from_args(args: argparse.Namespace, options: StoreOptions) -> str:
    return getattr(args, "catalog", None) or os.environ.get(CATALOG_ENV) or default_catalog(options)


def config_for_location(catalog: str, options: StoreOptions, location: str) -> TableConfig:
    """A config that reaches existing tables (under `location`) through `catalog`."""
    return TableConfig(catalog=catalog, location=location, io=io_properties(options, location))


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    add_catalog_argument(parser)
    add = parser.add_argument
    add(
        "--location",
        help="Where the tables' files go: s3://bucket/prefix or a directory "
        "(default: tables/ under the group's prefix in the object store)",
    )
    add("--namespace", default=DEFAULT_NAMESPACE, help="Catalog namespace (default infinistream)")
    add(
        "--layout",
        choices=LAYOUTS,
        default="stream",
        help="one table per stream (default), or one per account with every stream's messages",
    )
    add(
        "--subject-partition",
        dest="subject_tokens",
        type=int,
        default=0,
        metavar="N",
        help="partition by the first N subject tokens as well as by day (default 0: by day)",
    )
    add(
        "--json",
        action="store_true",
        help="project JSON object payloads into typed columns (struct `json`)",
    )


def config_from_args(args: argparse.Namespace, options: StoreOptions) -> TableConfig:
    catalog = catalog_from_args(args, options)
    location = normalize_location(getattr(args, "location", None) or default_location(options))
    tokens = getattr(args, "subject_tokens", 0)
    if tokens < 0:
        raise TableConfigError("--subject-partition must not be negative")
    namespace = tuple(p for p in getattr(args, "namespace", DEFAULT_NAMESPACE).split(".") if p)
    return TableConfig(
        catalog=catalog,
        location=location,
        namespace=namespace or (DEFAULT_NAMESPACE,),
        layout=getattr(args, "layout", "stream"),
        subject_tokens=tokens,
        json=bool(getattr(args, "json", False)),
        io=io_properties(options, location),
    )
