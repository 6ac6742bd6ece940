"""Where tables live and how the jobs role runs their jobs: catalog URLs as pyiceberg takes them,
the default catalog beside a SQLite metadata store (refused beside etcd), table identifiers by
layout and account, and the jobs role's command line and environment (the catalog's password
never on the command line)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from infinistream.pipeline.lease import Fence
from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.scheduler import job_command, job_env
from infinistream.pipeline.tables.config import (
    CATALOG_ENV,
    TableConfig,
    TableConfigError,
    config_from_args,
    default_catalog,
    io_properties,
    redact,
)
from infinistream.settings import Settings, add_serve_arguments, parse_jobs, settings_from_args


def _serve(*argv: str) -> Settings:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return settings_from_args(parser.parse_args(list(argv)))


def test_catalog_urls_as_pyiceberg_takes_them(tmp_path: Path) -> None:
    def props(url: str) -> dict[str, str]:
        return TableConfig(url, "s3://lake/wh").catalog_properties()

    # The metadata store's spelling (sqlite:///abs) becomes SQLAlchemy's (sqlite:////abs).
    assert props("sqlite:///" + str(tmp_path / "t.db").lstrip("/")) == {
        "warehouse": "s3://lake/wh",
        "type": "sql",
        "uri": "sqlite:///" + str(tmp_path / "t.db"),
    }
    assert props("postgresql://u:pw@db:5432/cat")["uri"] == "postgresql+psycopg2://u:pw@db:5432/cat"
    assert props("http://rest:8181") == {
        "warehouse": "s3://lake/wh",
        "type": "rest",
        "uri": "http://rest:8181",
    }
    with pytest.raises(TableConfigError, match=r"'mysql://u:\*\*\*@db/x'"):
        props("mysql://u:pw@db/x")
    assert redact("postgresql://u:pw@db/cat") == "postgresql://u:***@db/cat"


def test_default_catalog_beside_sqlite_metadata_only(tmp_path: Path) -> None:
    local = StoreOptions(
        objects=(tmp_path / "objects").as_uri(),
        metadata="sqlite:///" + str(tmp_path / "meta.db").lstrip("/"),
    )
    assert default_catalog(local) == "sqlite:///" + str(tmp_path / "tables.db").lstrip("/")
    config = config_from_args(argparse.Namespace(), local)
    assert config.location == f"{(tmp_path / 'objects').as_uri()}/default/tables"
    assert config.io == ()
    shared = StoreOptions(objects="s3://b", metadata="etcd://127.0.0.1:2379")
    with pytest.raises(TableConfigError, match="catalog must be one they share"):
        default_catalog(shared)


def test_identifiers_by_layout_and_account() -> None:
    by_stream = TableConfig("sqlite:///t.db", "s3://b/t")
    by_account = TableConfig("sqlite:///t.db", "s3://b/t", layout="account")
    assert by_stream.identifier("ORDERS") == ("infinistream", "ORDERS")
    assert by_stream.identifier("ORDERS", "ACME.EU") == ("infinistream", "ACME%2EEU", "ORDERS")
    assert by_account.identifier("ORDERS") == ("infinistream", "messages")
    assert by_stream.table_location(("infinistream", "A B")) == "s3://b/t/infinistream/A%20B"


def test_s3_locations_get_the_stores_endpoint_and_credentials() -> None:
    options = StoreOptions(
        objects="s3://b",
        metadata="etcd://e:2379",
        s3_endpoint="http://127.0.0.1:9000",
        s3_access_key_id="id",
        s3_secret_access_key="secret",
    )
    assert dict(io_properties(options, "s3://lake/wh")) == {
        "s3.endpoint": "http://127.0.0.1:9000",
        "s3.access-key-id": "id",
        "s3.secret-access-key": "secret",
        "s3.force-virtual-addressing": "false",
    }
    assert io_properties(options, "file:///data/tables") == ()


def test_the_jobs_role_runs_the_tables_jobs_when_named(tmp_path: Path) -> None:
    conf = tmp_path / "agent.conf"
    conf.write_text(
        "infinistream {\n"
        '  jobs: "tables-upkeep,janitor,tables"\n'
        '  tables_catalog: "postgresql://lake:s3cret@db/catalog"\n'
        '  tables_location: "s3://lake/wh"\n'
        '  tables_args: "--layout account --json"\n'
        "}\n"
    )
    settings = _serve("-c", str(conf))
    assert parse_jobs(settings.jobs) == ("tables", "janitor", "tables-upkeep")
    fence = Fence("default/fences/tables", 7)
    tables = job_command("tables", settings, fence)
    assert tables[tables.index("--location") + 1] == "s3://lake/wh"
    assert tables[-3:] == ["--layout", "account", "--json"]
    upkeep = job_command("tables-upkeep", settings, fence)
    assert "--location" in upkeep and "--json" not in upkeep
    assert "--location" not in job_command("janitor", settings, fence)
    assert not any("s3cret" in arg for arg in tables)
    assert job_env(settings)[CATALOG_ENV] == "postgresql://lake:s3cret@db/catalog"
    # `jobs: true` keeps meaning the jobs that keep the streams.
    conf.write_text("infinistream { jobs: true }\n")
    assert parse_jobs(_serve("-c", str(conf)).jobs) == ("erase", "compact", "janitor")
