"""/metrics: the Prometheus text format, with prometheus-nats-exporter's metric names for the
same data (so its dashboards work against an agent) and InfiniStream's own.

- `gnatsd_varz_<field>`: every number of /varz, nested fields joined by `_` (the exporter's
  flattening), labelled `server_id`; `start` and `config_load_time` as Unix seconds.
- `gnatsd_connz_<field>`: /connz's counts and the sums over its connections.
- `jetstream_server_*`, `jetstream_account_*`, `jetstream_stream_*`, `jetstream_consumer_*`:
  /jsz with streams and consumers, with the exporter's labels.
- `infinistream_*`: flushes and failed batches, batch sizes (bytes, messages), PUT and commit
  latency, commit conflicts, object requests and bytes by method, the section cache's hits and
  misses, consumer lag (messages pending), the pipeline jobs' last runs, and an estimated
  object-storage bill (storage/pricing.py).

Everything is read when scraped, from the same parts the endpoints read: nothing is counted
twice and nothing is kept between scrapes.
"""

from __future__ import annotations

import calendar
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from infinistream.metadata.kv import MetadataStore
from infinistream.pipeline.scheduler import JobScheduler, LastRun, read_last_run
from infinistream.pipeline.tables.lag import TableLag, table_lags
from infinistream.server.monitoring.connz import Connz, ConnzOptions
from infinistream.server.monitoring.figures import AgentFigures
from infinistream.server.monitoring.jsz import Jsz, JszOptions
from infinistream.server.monitoring.varz import Varz
from infinistream.settings import JOBS
from infinistream.storage import pricing
from infinistream.stream.distribution import Distribution

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# The exporter turns these /varz strings into Unix seconds.
TIME_FIELDS = ("start", "config_load_time")
# And these into a gauge of 1 labelled with the value.
LABEL_FIELDS = ("server_name", "version")
CONNZ_SUMS = ("pending_bytes", "subscriptions", "in_bytes", "out_bytes", "in_msgs", "out_msgs")
SERVER_LABELS = ("server_id", "server_name", "cluster", "domain", "meta_leader", "is_meta_leader")
ACCOUNT_LABELS = (*SERVER_LABELS, "account", "account_name", "account_id")
STREAM_LABELS = (
    *SERVER_LABELS,
    "account",
    "account_name",
    "account_id",
    "stream_name",
    "stream_leader",
    "is_stream_leader",
    "stream_raft_group",
)
CONSUMER_LABELS = (
    *STREAM_LABELS,
    "consumer_name",
    "consumer_leader",
    "is_consumer_leader",
    "consumer_desc",
)
_UNSAFE = re.compile(r"[^a-zA-Z0-9_:]")


class _Snapshot(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


@dataclass(eq=False)
class Metrics:
    varz: Varz
    connz: Connz
    jsz: Jsz
    figures: AgentFigures
    # The group's pipeline jobs' last runs are read from its metadata.
    meta: MetadataStore
    group: str
    # The jobs role's scheduler, when this agent has it: its runs by outcome.
    jobs: JobScheduler | None

    async def render(self) -> bytes:
        """The Prometheus text exposition of everything, read now."""
        varz = await self.varz.answer()
        connz = self.connz.answer(ConnzOptions())
        jsz = await self.jsz.answer(JszOptions(consumer=True, config=True))
        runs = {job: await read_last_run(self.meta, self.group, job) for job in JOBS}
        lags = await table_lags(self.meta, self.group)
        families: list[Metric] = []
        families += _varz(varz)
        families += _connz(connz)
        families += _jsz(jsz, varz["server_name"])
        families += _writes(self.figures)
        families += _objects_and_cache(self.figures)
        families.append(_lag(jsz))
        families += _jobs(runs, self.jobs)
        families += _costs(self.figures, jsz)
        families += _table_lags(lags)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Snapshot(families))
        return generate_latest(registry)


# -- the exporter's names ---------------------------------------------------------------------


def _fq(path: Sequence[str]) -> str:
    name = "_".join(path).replace("/", "_").strip("_")
    while "__" in name:
        name = name.replace("__", "_")
    return _UNSAFE.sub("_", name)


def _numbers(obj: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[str, float]]:
    for key, value in obj.items():
        here = (*path, key)
        if isinstance(value, bool):
            continue  # the exporter reads JSON numbers only
        if isinstance(value, int | float):
            yield _fq(here), float(value)
        elif isinstance(value, dict):
            yield from _numbers(value, here)


def _unix(text: str) -> float:
    whole, _, frac = text.rstrip("Z").partition(".")
    seconds = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
    return seconds + (float("0." + frac) if frac else 0.0)


def _varz(varz: dict[str, Any]) -> list[Metric]:
    server_id = varz["server_id"]
    gnatsd = {k: v for k, v in varz.items() if k != "infinistream"}
    out: list[Metric] = []
    for name, value in sorted(_numbers(gnatsd)):
        g = GaugeMetricFamily(f"gnatsd_varz_{name}", name, labels=["server_id"])
        g.add_metric([server_id], value)
        out.append(g)
    for name in TIME_FIELDS:
        g = GaugeMetricFamily(f"gnatsd_varz_{name}", name, labels=["server_id"])
        g.add_metric([server_id], _unix(varz[name]))
        out.append(g)
    for name in LABEL_FIELDS:
        g = GaugeMetricFamily(f"gnatsd_varz_{name}", name, labels=["server_id", "value"])
        g.add_metric([server_id, str(varz[name])], 1)
        out.append(g)
    return out


def _connz(connz: dict[str, Any]) -> list[Metric]:
    server_id = connz["server_id"]
    values = {k: float(connz[k]) for k in ("num_connections", "offset", "total", "limit")}
    for key in CONNZ_SUMS:
        values[key] = float(sum(c[key] for c in connz["connections"]))
    out: list[Metric] = []
    for name, value in values.items():
        g = GaugeMetricFamily(f"gnatsd_connz_{name}", name, labels=["server_id"])
        g.add_metric([server_id], value)
        out.append(g)
    return out


# What each /jsz family reports: its figures by name (the exporter's), each read from the part
# of /jsz it describes (the whole of it, an account, a stream, a consumer).
_Figure = Callable[[dict[str, Any]], Any]
_Figures = dict[str, _Figure]


def _at(*path: str, missing: int | None = None) -> _Figure:
    """The figure at `path` in its part of /jsz; `missing` where the part may lack it."""

    def figure(part: dict[str, Any]) -> Any:
        value: Any = part
        for key in path:
            if missing is not None and key not in value:
                return missing
            value = value[key]
        return value

    return figure


_SERVER_FIGURES: Final[_Figures] = {
    "jetstream_disabled": lambda jsz: 0,
    "total_streams": _at("streams"),
    "total_consumers": _at("consumers"),
    "total_messages": _at("messages"),
    "total_message_bytes": _at("bytes"),
    "max_memory": _at("config", "max_memory"),
    "max_storage": _at("config", "max_storage"),
}
_ACCOUNT_FIGURES: Final[_Figures] = {
    "max_memory": lambda account: 0,
    "max_storage": lambda account: -1,
    "storage_used": _at("storage"),
    "memory_used": _at("memory"),
}
_STREAM_FIGURES: Final[_Figures] = {
    "total_messages": _at("state", "messages"),
    "total_bytes": _at("state", "bytes"),
    "first_seq": _at("state", "first_seq"),
    "last_seq": _at("state", "last_seq"),
    "consumer_count": _at("state", "consumer_count"),
    "subject_count": _at("state", "num_subjects", missing=0),
    "limit_bytes": _at("config", "max_bytes", missing=-1),
    "limit_messages": _at("config", "max_msgs", missing=-1),
}
_CONSUMER_FIGURES: Final[_Figures] = {
    "delivered_consumer_seq": _at("delivered", "consumer_seq"),
    "delivered_stream_seq": _at("delivered", "stream_seq"),
    "num_ack_pending": _at("num_ack_pending"),
    "num_redelivered": _at("num_redelivered"),
    "num_waiting": _at("num_waiting"),
    "num_pending": _at("num_pending"),
    "ack_floor_stream_seq": _at("ack_floor", "stream_seq"),
    "ack_floor_consumer_seq": _at("ack_floor", "consumer_seq"),
}


class _Gauges:
    """A family's gauges, `<prefix>_<figure>`: each part of /jsz it describes adds a sample
    of every figure."""

    def __init__(self, prefix: str, figures: _Figures, labels: Sequence[str]) -> None:
        self.figures = figures
        self.gauges = [
            GaugeMetricFamily(f"{prefix}_{name}", name, labels=list(labels)) for name in figures
        ]

    def add(self, labels: list[str], part: dict[str, Any]) -> None:
        for gauge, figure in zip(self.gauges, self.figures.values(), strict=True):
            gauge.add_metric(labels, figure(part))


def _jsz(jsz: dict[str, Any], server_name: str) -> list[Metric]:
    server = [jsz["server_id"], server_name, "", "", "", "true"]
    s = _Gauges("jetstream_server", _SERVER_FIGURES, SERVER_LABELS)
    a = _Gauges("jetstream_account", _ACCOUNT_FIGURES, ACCOUNT_LABELS)
    st = _Gauges("jetstream_stream", _STREAM_FIGURES, STREAM_LABELS)
    c = _Gauges("jetstream_consumer", _CONSUMER_FIGURES, CONSUMER_LABELS)
    s.add(server, jsz)
    for account in jsz.get("account_details", []):
        name = account["name"]
        labels = [*server, name, name, account["id"]]
        a.add(labels, account)
        for stream in account.get("stream_detail", []):
            slabels = [*labels, stream["name"], server_name, "true", ""]
            st.add(slabels, stream)
            for consumer in stream.get("consumer_detail", []):
                description = consumer.get("config", {}).get("description", "")
                clabels = [*slabels, consumer["name"], server_name, "true", description]
                c.add(clabels, consumer)
    return [*s.gauges, *a.gauges, *st.gauges, *c.gauges]


# -- InfiniStream's own --------------------------------------------------------------------------


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _histogram(name: str, doc: str, d: Distribution) -> HistogramMetricFamily:
    buckets = [("+Inf" if b == float("inf") else repr(b), n) for b, n in d.cumulative()]
    return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=d.total)


def _writes(figures: AgentFigures) -> list[Metric]:
    stats = figures.write_buffer.stats
    return [
        _counter("infinistream_flushes", "Batches written and committed", stats.flushes),
        _counter(
            "infinistream_failed_batches",
            "Batches refused (object write or commit failed)",
            stats.failed_batches,
        ),
        _counter("infinistream_messages_written", "Messages in committed batches", stats.messages),
        _histogram("infinistream_batch_bytes", "Bytes of a batch object", stats.batch_bytes),
        _histogram(
            "infinistream_batch_messages", "Messages in a batch object", stats.batch_messages
        ),
        _histogram(
            "infinistream_object_put_seconds",
            "Seconds a batch object's PUT took",
            stats.put_seconds,
        ),
        _histogram(
            "infinistream_commit_seconds",
            "Seconds a batch's metadata commit took",
            stats.commit_seconds,
        ),
        _counter(
            "infinistream_commit_conflicts",
            "Metadata commits retried after another agent's",
            figures.committer.conflicts,
        ),
        _counter(
            "infinistream_consumer_commits",
            "Consumer state commits",
            figures.consumer_store.commits,
        ),
        _counter(
            "infinistream_consumer_commit_conflicts",
            "Consumer state commits retried after a conflict",
            figures.consumer_store.conflicts,
        ),
    ]


def _objects_and_cache(figures: AgentFigures) -> list[Metric]:
    requests = figures.objects.stats
    cache = figures.cache
    by_method = CounterMetricFamily(
        "infinistream_object_requests", "Object storage requests", labels=["method"]
    )
    for method, count in (
        ("PUT", requests.puts),
        ("GET", requests.gets),
        ("HEAD", requests.heads),
        ("LIST", requests.lists),
        ("DELETE", requests.deletes),
    ):
        by_method.add_metric([method], count)
    moved = CounterMetricFamily(
        "infinistream_object_bytes", "Payload bytes to and from object storage", labels=["method"]
    )
    moved.add_metric(["PUT"], requests.bytes_put)
    moved.add_metric(["GET"], requests.bytes_got)
    looked_up = cache.hits + cache.misses
    return [
        by_method,
        moved,
        _counter("infinistream_cache_hits", "Section cache hits", cache.hits),
        _counter("infinistream_cache_misses", "Section cache misses", cache.misses),
        _gauge(
            "infinistream_cache_hit_ratio",
            "Section cache hits over lookups, since the agent started",
            cache.hits / looked_up if looked_up else 0.0,
        ),
        _gauge("infinistream_cache_bytes", "Bytes in the section cache", cache.size_bytes),
    ]


def _lag(jsz: dict[str, Any]) -> Metric:
    lag = GaugeMetricFamily(
        "infinistream_consumer_lag",
        "Messages of the stream the consumer has yet to deliver",
        labels=["account", "stream", "consumer"],
    )
    for account in jsz.get("account_details", []):
        for stream in account.get("stream_detail", []):
            for consumer in stream.get("consumer_detail", []):
                lag.add_metric(
                    [account["name"], stream["name"], consumer["name"]], consumer["num_pending"]
                )
    return lag


def _jobs(runs: dict[str, LastRun | None], scheduler: JobScheduler | None) -> list[Metric]:
    def by_job(name: str, doc: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=["job"])

    last_run = by_job(
        "infinistream_pipeline_job_last_run_timestamp_seconds",
        "When the group's last run of the job finished",
    )
    last_seconds = by_job(
        "infinistream_pipeline_job_last_run_seconds",
        "How long the group's last run of the job took",
    )
    last_exit = by_job(
        "infinistream_pipeline_job_last_exit_code",
        "Exit code of the group's last run of the job",
    )
    for job, run in runs.items():
        if run is not None:
            last_run.add_metric([job], run.finished_ns / 1e9)
            last_seconds.add_metric([job], (run.finished_ns - run.started_ns) / 1e9)
            last_exit.add_metric([job], run.exit_code)
    runs_total = CounterMetricFamily(
        "infinistream_pipeline_job_runs",
        "Runs of the job by this agent (jobs role), by outcome",
        labels=["job", "outcome"],
    )
    if scheduler is not None:
        for (job, outcome), count in sorted(scheduler.runs.items()):
            runs_total.add_metric([job, outcome], count)
    return [last_run, last_seconds, last_exit, runs_total]


def _costs(figures: AgentFigures, jsz: dict[str, Any]) -> list[Metric]:
    requests = figures.objects.stats
    request_cost = pricing.request_cost(
        puts=requests.puts,
        gets=requests.gets,
        heads=requests.heads,
        lists=requests.lists,
        deletes=requests.deletes,
    )
    return [
        _counter(
            "infinistream_object_storage_request_cost_dollars",
            "Estimated cost of this agent's object storage requests (S3 Standard prices)",
            request_cost,
        ),
        _gauge(
            "infinistream_object_storage_monthly_storage_cost_dollars",
            "Estimated monthly cost of the bytes the group's streams store (S3 Standard)",
            pricing.monthly_storage_cost(jsz["bytes"]),
        ),
        _gauge("infinistream_stored_bytes", "Bytes the group's streams store", float(jsz["bytes"])),
    ]


def _table_lags(lags: list[TableLag]) -> list[Metric]:
    """Each Iceberg table's lag behind each of its streams (pipeline/tables/lag.py)."""
    messages = GaugeMetricFamily(
        "infinistream_table_lag_messages",
        "Sequences of the stream not yet appended to its Iceberg table",
        labels=["table", "stream"],
    )
    seconds = GaugeMetricFamily(
        "infinistream_table_lag_seconds",
        "How much older the table's newest message is than the stream's (0: caught up)",
        labels=["table", "stream"],
    )
    for lag in lags:
        messages.add_metric([lag.table, lag.stream], lag.messages)
        seconds.add_metric([lag.table, lag.stream], lag.seconds)
    return [messages, seconds]
