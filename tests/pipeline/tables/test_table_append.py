"""`pipeline tables`: streams appended to Iceberg tables, read back by pyiceberg (Arrow), DuckDB
over that Arrow data, and Spark over the data files; incrementally from the table's own marks;
partitioned by day and subject prefix; one table per account; the JSON projection's schema
evolution and its report of a field that changed type; the lag the agents' monitoring reads."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import urllib.request
from pathlib import Path
from typing import Any

import duckdb
import nats
import pytest
from nats.aio.client import Client

from infinistream.pipeline.options import StoreOptions
from infinistream.pipeline.tables.append import append_tables
from infinistream.pipeline.tables.catalog import open_catalog
from infinistream.pipeline.tables.config import TableConfig, default_catalog, default_location
from infinistream.pipeline.tables.lag import table_lags
from infinistream.pipeline.tables.progress import read_records
from support.agentproc import running_agent

pytestmark = pytest.mark.timeout(300)


def _config(options: StoreOptions, **kw: Any) -> TableConfig:
    return TableConfig(catalog=default_catalog(options), location=default_location(options), **kw)


def _append(spark: Any, options: StoreOptions, config: TableConfig) -> Any:
    lines: list[str] = []
    report = append_tables(spark, options, config, say=lines.append)
    return report, lines


async def _js_api(nc: Client, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = await nc.request("$JS.API." + subject, json.dumps(body).encode(), timeout=10)
    answer: dict[str, Any] = json.loads(reply.data)
    return answer


async def test_streams_become_tables_read_back_three_ways(
    spark: Any, nc: Client, options: StoreOptions, store_dir: Path
) -> None:
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    await js.add_stream(name="EVENTS", subjects=["events.>"])
    sent = {}
    for i in range(30):
        region = "eu" if i % 3 else "us"
        headers = {"Trace": f"t{i}"} if i % 2 else None
        ack = await js.publish(f"orders.{region}.{i}", f"order {i}".encode(), headers=headers)
        sent[ack.seq] = (f"orders.{region}.{i}", f"order {i}".encode(), headers)
    for i in range(5):
        await js.publish(f"events.e{i}", b"event")
    config = _config(options, subject_tokens=2)

    report, lines = await asyncio.to_thread(_append, spark, options, config)
    assert [t.rows for t in report.tables] == [5, 30], lines  # EVENTS, ORDERS
    assert not report.problems
    catalog = open_catalog(config)
    table = catalog.load_table(("infinistream", "ORDERS"))
    rows = table.scan().to_arrow()
    # pyiceberg: every message once, with its subject, payload, headers and time.
    assert sorted(rows.column("seq").to_pylist()) == list(range(1, 31))
    for row in rows.to_pylist():
        subject, data, headers = sent[row["seq"]]
        assert (row["stream"], row["subject"], row["payload"]) == ("ORDERS", subject, data)
        assert row["headers"] == ([("Trace", [headers["Trace"]])] if headers else None)
        assert row["subject_prefix"] == ".".join(subject.split(".")[:2])
        assert abs(row["time"] - dt.datetime.now(dt.UTC)) < dt.timedelta(minutes=5)
    # Partitioned by day and subject prefix: the files say so in their paths.
    paths = [task.file.file_path for task in table.scan().plan_files()]
    prefixes = {p.split("/")[-2] for p in paths}
    assert prefixes == {"subject_prefix=orders.eu", "subject_prefix=orders.us"}
    assert all(p.split("/")[-3].startswith("day=") for p in paths)
    assert all(p.startswith(default_location(options)) for p in paths)

    # DuckDB over the Arrow data pyiceberg returned.
    counts = duckdb.sql(
        "SELECT subject_prefix, count(*) FROM rows GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert counts == [("orders.eu", 20), ("orders.us", 10)]

    # Spark over the data files themselves.
    frame = spark.read.parquet(*paths)
    assert sorted(r.seq for r in frame.select("seq").collect()) == list(range(1, 31))

    # More messages, one deleted (not erased) before the next run: only the new live ones go in.
    for i in range(30, 40):
        await js.publish(f"orders.eu.{i}", f"order {i}".encode())
    deleted = await _js_api(nc, "STREAM.MSG.DELETE.ORDERS", {"seq": 35, "no_erase": True})
    assert deleted["success"] is True
    report, lines = await asyncio.to_thread(_append, spark, options, config)
    orders = next(t for t in report.tables if t.table == "infinistream.ORDERS")
    assert (orders.ranges, orders.rows) == ({"ORDERS": (31, 40)}, 9), lines
    table.refresh()
    seqs = sorted(table.scan().to_arrow().column("seq").to_pylist())
    assert seqs == [s for s in range(1, 41) if s != 35]
    summary = table.current_snapshot().summary
    assert summary["infinistream.last-seq.ORDERS"] == "40"

    # Nothing new: no new snapshot.
    before = table.current_snapshot().snapshot_id
    report, _ = await asyncio.to_thread(_append, spark, options, config)
    assert [t.snapshot_id for t in report.tables] == [None, None]
    table.refresh()
    assert table.current_snapshot().snapshot_id == before

    # The lag the agents' /metrics and console read: none now; some after a publish.
    meta = options.open_metadata()
    try:
        assert {(lag.stream, lag.messages) for lag in await table_lags(meta, "default")} == {
            ("ORDERS", 0),
            ("EVENTS", 0),
        }
        await js.publish("orders.eu.late", b"late")
        lags = {lag.stream: lag for lag in await table_lags(meta, "default")}
        assert lags["ORDERS"].messages == 1 and lags["ORDERS"].seconds > 0
    finally:
        await meta.close()


async def test_one_table_per_account_with_json_columns(
    spark: Any, nc: Client, options: StoreOptions
) -> None:
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="CARTS", subjects=["carts.>"])
    await js.add_stream(name="PAYMENTS", subjects=["payments.>"])
    for i in range(4):
        await js.publish(f"carts.{i}", json.dumps({"n": i, "name": f"c{i}"}).encode())
        await js.publish(f"payments.{i}", json.dumps({"n": i * 10, "ok": True}).encode())
    await js.publish("carts.raw", b"not json")
    config = _config(options, layout="account", json=True)

    report, lines = await asyncio.to_thread(_append, spark, options, config)
    (run,) = report.tables
    assert run.table == "infinistream.messages" and run.rows == 9, lines
    assert sorted(run.new_columns) == ["json.n long", "json.name string", "json.ok boolean"]
    table = open_catalog(config).load_table(("infinistream", "messages"))
    rows = table.scan().to_arrow().to_pylist()
    by_key = {(r["stream"], r["seq"]): r["json"] for r in rows}
    assert by_key[("CARTS", 1)] == {"n": 0, "name": "c0", "ok": None}
    assert by_key[("PAYMENTS", 2)] == {"n": 10, "name": None, "ok": True}
    assert by_key[("CARTS", 5)] is None  # not a JSON object
    summary = table.current_snapshot().summary
    assert (summary["infinistream.last-seq.CARTS"], summary["infinistream.last-seq.PAYMENTS"]) == (
        "5",
        "4",
    )

    # A new field becomes a column (schema evolution); a field that changes type is reported
    # and stored as null, and the rest of the message is kept.
    await js.publish("carts.new", json.dumps({"n": 7, "coupon": "X1", "nested": {"a": 1}}).encode())
    changed = await js.publish("carts.bad", json.dumps({"n": "seven", "name": "c7"}).encode())
    await js.publish("payments.half", json.dumps({"n": 2.5}).encode())
    report, lines = await asyncio.to_thread(_append, spark, options, config)
    (run,) = report.tables
    assert sorted(run.new_columns) == ["json.coupon string", "json.nested string"]
    assert sorted(run.conflicts) == [
        f"JSON field 'n' of stream 'CARTS' is long in the table, but seq {changed.seq} has a "
        "string: stored as null (change the column or the producer)",
        "JSON field 'n' of stream 'PAYMENTS' is long in the table, but seq 5 has a "
        "double: stored as null (change the column or the producer)",
    ]
    assert any("is long in the table" in line for line in lines)
    table.refresh()
    rows = {(r["stream"], r["seq"]): r for r in table.scan().to_arrow().to_pylist()}
    assert rows[("CARTS", changed.seq)]["json"]["n"] is None
    assert rows[("CARTS", changed.seq)]["json"]["name"] == "c7"
    assert rows[("CARTS", changed.seq - 1)]["json"]["nested"] == '{"a":1}'
    # A long column keeps its type: 2.5 does not fit it.
    assert rows[("PAYMENTS", 5)]["json"]["n"] is None
    # Rows appended before the new columns read them as null.
    assert rows[("CARTS", 1)]["json"]["coupon"] is None


async def test_a_stream_made_again_is_refused(
    spark: Any, nc: Client, options: StoreOptions
) -> None:
    js = nc.jetstream(timeout=10)
    await js.add_stream(name="AGAIN", subjects=["again.>"])
    await js.publish("again.1", b"first life")
    config = _config(options)
    report, _ = await asyncio.to_thread(_append, spark, options, config)
    assert report.tables[0].rows == 1
    await js.delete_stream("AGAIN")
    await js.add_stream(name="AGAIN", subjects=["again.>"])
    await js.publish("again.1", b"second life")
    report, _ = await asyncio.to_thread(_append, spark, options, config)
    (problem,) = report.problems
    assert "was deleted and created again" in problem
    table = open_catalog(config).load_table(("infinistream", "AGAIN"))
    assert table.scan().to_arrow().column("payload").to_pylist() == [b"first life"]
    meta = options.open_metadata()
    try:
        (record,) = await read_records(meta, "default")
        assert record.pending_run == "" and record.marks["AGAIN"].last_seq == 1
    finally:
        await meta.close()


async def test_metrics_and_console_show_each_tables_lag(spark: Any, tmp_path: Path) -> None:
    store = tmp_path / "store"
    options = StoreOptions(
        objects=(store / "objects").resolve().as_uri(),
        metadata="sqlite:///" + str((store / "meta.db").resolve()).lstrip("/"),
    )
    with running_agent(store, "-m", "-1", "--linger", "20ms") as agent:
        nc = await nats.connect(agent.url)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="SEEN", subjects=["seen.>"])
        for i in range(3):
            await js.publish(f"seen.{i}", b"x")
        await asyncio.to_thread(_append, spark, options, _config(options))
        for i in range(2):
            await js.publish(f"seen.late.{i}", b"x")
        await nc.close()
        base = f"http://127.0.0.1:{agent.http_port}"
        metrics = await asyncio.to_thread(_get, f"{base}/metrics")
        labels = '{stream="SEEN",table="infinistream.SEEN"}'
        assert f"infinistream_table_lag_messages{labels} 2.0" in metrics
        assert f"infinistream_table_lag_seconds{labels}" in metrics
        overview = json.loads(await asyncio.to_thread(_get, f"{base}/console/api/overview"))
        (row,) = overview["jobs"]["tables"]
        assert (row["table"], row["stream"], row["messages"]) == ("infinistream.SEEN", "SEEN", 2)
        assert row["seconds"] > 0 and row["committed"] > 0


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        text: str = response.read().decode()
        return text
