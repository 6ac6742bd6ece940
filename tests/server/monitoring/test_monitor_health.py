"""/healthz probes the stores: it turns unavailable within a few seconds of object storage (S3
behind a fault-injecting proxy) or the metadata store (etcd) going away, says why in
nats-server's shape, and is healthy again once the store is back. `js-server-only` asks about
the server alone, so it stays ok throughout.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.agentproc import AgentProcess, running_agent
from support.etcdserver import EtcdServer
from support.monitorshape import http_get
from support.s3proxy import Fault, S3FaultProxy
from support.s3server import S3Server, start_s3_server

# "Within a few seconds": the probe answers within its 3 s timeout; polling adds little.
TURNS_WITHIN = 8.0


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = start_s3_server()
    yield server
    server.stop()


async def _health(agent: AgentProcess, query: str = "") -> tuple[int, Any]:
    status, _, body = await asyncio.to_thread(http_get, agent.http_port, "/healthz" + query)
    return status, body


async def _until(agent: AgentProcess, status: int, within: float) -> tuple[float, Any]:
    """Seconds until /healthz answers `status`, and its body then."""
    start = time.monotonic()
    while True:
        got, body = await _health(agent)
        if got == status:
            return time.monotonic() - start, body
        assert time.monotonic() - start < within, (got, body)
        await asyncio.sleep(0.2)


@pytest.mark.timeout(90)
@pytest.mark.parametrize("fault", [Fault.UNAVAILABLE, Fault.HANG])
async def test_healthz_follows_object_storage(s3: S3Server, tmp_path: Path, fault: Fault) -> None:
    bucket = f"health-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(bucket)
    with (
        S3FaultProxy(s3.endpoint) as proxy,
        running_agent(
            tmp_path / "store",
            "--objects",
            f"s3://{bucket}",
            "--s3-endpoint",
            proxy.endpoint,
            "--s3-timeout",
            "1s",
            "--s3-retries",
            "1",
            "-m",
            "-1",
            env=s3.env(),
        ) as agent,
    ):
        assert await _health(agent) == (200, {"status": "ok"})
        proxy.fault = fault
        _, body = await _until(agent, 503, TURNS_WITHIN)
        assert body["status"] == "unavailable"
        assert "object storage unavailable" in body["error"]
        assert "status_code" not in body  # over HTTP the status says it, as nats-server
        # The server itself still takes clients.
        assert await _health(agent, "?js-server-only=true") == (200, {"status": "ok"})
        status, detailed = await _health(agent, "?details=true")
        assert status == 503
        assert detailed["status"] == "error"
        assert [e["type"] for e in detailed["errors"]] == ["JETSTREAM"]
        proxy.fault = Fault.NONE
        await _until(agent, 200, TURNS_WITHIN)


@pytest.mark.timeout(120)
async def test_healthz_follows_the_metadata_store(tmp_path: Path) -> None:
    etcd = EtcdServer(tmp_path / "etcd")
    etcd.start()
    try:
        with running_agent(tmp_path / "store", "--metadata", etcd.url, "-m", "-1") as agent:
            assert await _health(agent) == (200, {"status": "ok"})
            _, _, before = await asyncio.to_thread(http_get, agent.http_port, "/varz")
            etcd.stop_member(0, kill=True)
            _, body = await _until(agent, 503, TURNS_WITHIN)
            assert body["status"] == "unavailable"
            assert "metadata store unavailable" in body["error"] or "no answer" in body["error"]
            # /varz still answers (with the last figures read); /jsz cannot, and says so.
            status, _, varz = await asyncio.to_thread(http_get, agent.http_port, "/varz")
            assert status == 200
            assert varz["jetstream"]["stats"] == before["jetstream"]["stats"]
            status, content_type, text = await asyncio.to_thread(http_get, agent.http_port, "/jsz")
            assert (status, content_type) == (503, "text/plain; charset=utf-8")
            assert text == "unavailable"  # the detail is in the log, not the answer
            await asyncio.to_thread(etcd.start_member, 0)
            await _until(agent, 200, 30.0)
    finally:
        etcd.close()


@pytest.mark.timeout(60)
async def test_concurrent_healthz_share_one_probe(s3: S3Server, tmp_path: Path) -> None:
    bucket = f"health-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(bucket)
    with (
        S3FaultProxy(s3.endpoint) as proxy,
        running_agent(
            tmp_path / "store",
            "--objects",
            f"s3://{bucket}",
            "--s3-endpoint",
            proxy.endpoint,
            "-m",
            "-1",
            env=s3.env(),
        ) as agent,
    ):
        heads_before = sum(n for (method, _), n in proxy.requests.items() if method == "HEAD")
        answers = await asyncio.gather(*(_health(agent) for _ in range(20)))
        assert answers == [(200, {"status": "ok"})] * 20
        heads = sum(n for (method, _), n in proxy.requests.items() if method == "HEAD")
        # One round of probes a second at most: 20 requests within a second or two.
        assert 1 <= heads - heads_before <= 3


@pytest.mark.timeout(60)
async def test_healthz_follows_a_local_object_store(tmp_path: Path) -> None:
    with running_agent(tmp_path / "store", "-m", "-1") as agent:
        objects = tmp_path / "store" / "objects"
        assert objects.is_dir()
        assert await _health(agent) == (200, {"status": "ok"})
        objects.rename(tmp_path / "moved")
        _, body = await _until(agent, 503, TURNS_WITHIN)
        assert body == {
            "status": "unavailable",
            "error": f"object storage unavailable: directory {objects.resolve()} is missing",
        }
        (tmp_path / "moved").rename(objects)
        await _until(agent, 200, TURNS_WITHIN)
