"""/metrics: the Prometheus text format, prometheus-nats-exporter's names for varz, connz and
jsz, and InfiniStream's own figures, which follow what the agent did."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.js.api import ConsumerConfig
from prometheus_client.parser import text_string_to_metric_families

from support.agentproc import AgentProcess, running_agent
from support.monitorshape import http_get

PUBLISHED = 20


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    store: Path = tmp_path_factory.mktemp("metrics") / "store"
    with running_agent(store, "-m", "-1", "--linger", "10ms") as proc:

        async def traffic() -> None:
            nc = await nats.connect(proc.url, name="metrics")
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="M", subjects=["m.>"])
            await js.add_consumer("M", ConsumerConfig(durable_name="LAGGING"))
            for i in range(PUBLISHED):
                await js.publish("m.x", b"payload %d" % i)
            await nc.close()

        asyncio.run(traffic())
        yield proc


def _scrape(agent: AgentProcess) -> tuple[str, dict[str, list[tuple[dict[str, str], float]]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.http_port}/metrics", timeout=10) as r:
        content_type, text = r.headers["Content-Type"], r.read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return content_type, samples


def _value(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    (only,) = samples[name]
    return only[1]


def _by_method(
    samples: dict[str, list[tuple[dict[str, str], float]]], name: str
) -> dict[str, float]:
    return {labels["method"]: v for labels, v in samples[name]}


def test_prometheus_text_format(agent: AgentProcess) -> None:
    content_type, samples = _scrape(agent)
    assert content_type.startswith("text/plain; version=0.0.4")
    assert samples


def test_every_varz_number_has_the_exporters_gnatsd_name(agent: AgentProcess) -> None:
    _, _, varz = http_get(agent.http_port, "/varz")
    _, samples = _scrape(agent)
    for field in ("connections", "total_connections", "in_msgs", "out_bytes", "mem", "cpu"):
        assert f"gnatsd_varz_{field}" in samples, field
    assert "gnatsd_varz_jetstream_stats_storage" in samples  # nested fields joined by _
    assert "gnatsd_varz_slow_consumer_stats_clients" in samples
    assert _value(samples, "gnatsd_varz_mem") > 0
    (labels, _), *_ = samples["gnatsd_varz_connections"]
    assert labels == {"server_id": varz["server_id"]}
    assert _value(samples, "gnatsd_varz_start") > 1.7e9  # a Unix time


def test_connz_and_jsz_names(agent: AgentProcess) -> None:
    _, samples = _scrape(agent)
    for name in ("num_connections", "total", "limit", "in_msgs", "out_bytes", "pending_bytes"):
        assert f"gnatsd_connz_{name}" in samples, name
    assert _value(samples, "jetstream_server_total_streams") == 1
    assert _value(samples, "jetstream_server_total_consumers") == 1
    ((labels, messages),) = samples["jetstream_stream_total_messages"]
    assert labels["stream_name"] == "M" and labels["account"] == "$G"
    assert messages == PUBLISHED
    ((labels, pending),) = samples["jetstream_consumer_num_pending"]
    assert labels["consumer_name"] == "LAGGING" and labels["stream_name"] == "M"
    assert pending == PUBLISHED


def test_infinistreams_own_figures_follow_the_traffic(agent: AgentProcess) -> None:
    _, samples = _scrape(agent)
    flushes = _value(samples, "infinistream_flushes_total")
    assert 1 <= flushes <= PUBLISHED
    assert _value(samples, "infinistream_messages_written_total") == PUBLISHED
    assert _value(samples, "infinistream_batch_messages_count") == flushes
    assert _value(samples, "infinistream_batch_messages_sum") == PUBLISHED
    assert _value(samples, "infinistream_commit_seconds_count") == flushes
    assert _value(samples, "infinistream_object_put_seconds_count") == flushes
    inf = [v for labels, v in samples["infinistream_batch_bytes_bucket"] if labels["le"] == "+Inf"]
    assert inf == [flushes]
    puts = _by_method(samples, "infinistream_object_requests_total")["PUT"]
    assert puts >= flushes
    put_bytes = _by_method(samples, "infinistream_object_bytes_total")["PUT"]
    assert put_bytes == _value(samples, "infinistream_batch_bytes_sum")
    assert _value(samples, "infinistream_commit_conflicts_total") == 0
    ((labels, lag),) = samples["infinistream_consumer_lag"]
    assert (labels["stream"], labels["consumer"], lag) == ("M", "LAGGING", PUBLISHED)
    assert 0 <= _value(samples, "infinistream_cache_hit_ratio") <= 1
    # A PUT costs $0.005 per 1,000 (storage/pricing.py): the bill is at least the PUTs'.
    assert _value(samples, "infinistream_object_storage_request_cost_dollars_total") >= (
        puts * 0.005 / 1000
    )
    assert _value(samples, "infinistream_object_storage_monthly_storage_cost_dollars") > 0
    # No job has run in this group: no last-run samples, but the families are there.
    assert "infinistream_pipeline_job_last_exit_code" not in samples
