"""nats-server's HTTP monitoring endpoints on the agent's `-m` port."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from support.agentproc import AgentProcess, running_agent
from support.rawnats import CONNECT_PLAIN, RawClient, pub


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    store: Path = tmp_path_factory.mktemp("monitor") / "store"
    # -m -1: nats-server's "any free port" for monitoring.
    with running_agent(store, "-m", "-1", "--linger", "10ms") as proc:
        yield proc


def _get(agent: AgentProcess, path: str) -> tuple[int, str, Any]:
    url = f"http://127.0.0.1:{agent.http_port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        content_type = exc.headers["Content-Type"]
        return exc.code, content_type, json.loads(body) if "json" in content_type else body


def test_monitor_listens_on_a_random_port_with_m_minus_one(agent: AgentProcess) -> None:
    assert agent.http_port > 0
    assert agent.http_port != agent.port


def test_healthz_reports_ok(agent: AgentProcess) -> None:
    status, content_type, body = _get(agent, "/healthz")
    assert status == 200
    assert content_type == "application/json"
    assert body == {"status": "ok"}


def test_varz_has_the_nats_server_fields(agent: AgentProcess) -> None:
    status, _, varz = _get(agent, "/varz")
    assert status == 200
    for field in (
        "server_id",
        "server_name",
        "version",
        "proto",
        "host",
        "port",
        "http_port",
        "max_payload",
        "start",
        "now",
        "uptime",
        "mem",
        "cores",
        "connections",
        "total_connections",
        "in_msgs",
        "out_msgs",
        "in_bytes",
        "out_bytes",
        "subscriptions",
        "jetstream",
    ):
        assert field in varz, field
    assert varz["port"] == agent.port
    assert varz["http_port"] == agent.http_port
    assert varz["proto"] == 1
    assert varz["max_payload"] == 1024 * 1024


async def test_varz_server_id_is_the_one_clients_see(agent: AgentProcess) -> None:
    client = await RawClient.open(agent.port)
    try:
        assert _get(agent, "/varz")[2]["server_id"] == client.info["server_id"]
    finally:
        await client.close()


async def test_varz_counts_open_connections(agent: AgentProcess) -> None:
    before = _get(agent, "/varz")[2]
    clients = [await RawClient.open(agent.port) for _ in range(3)]
    try:
        during = _get(agent, "/varz")[2]
        assert during["connections"] == before["connections"] + 3
        assert during["total_connections"] >= before["total_connections"] + 3
    finally:
        for c in clients:
            await c.close()


async def test_varz_counts_messages_in_and_out(agent: AgentProcess) -> None:
    nc = await nats.connect(agent.url)
    try:
        js = nc.jetstream(timeout=5)
        await js.add_stream(name="COUNTED", subjects=["counted.>"])
        before = _get(agent, "/varz")[2]
        for i in range(5):
            await js.publish("counted.x", b"%d" % i)
        after = _get(agent, "/varz")[2]
        assert after["in_msgs"] >= before["in_msgs"] + 5
        assert after["in_bytes"] >= before["in_bytes"] + 5
        assert after["out_msgs"] >= before["out_msgs"] + 5  # the PubAcks
    finally:
        await nc.close()


async def test_varz_message_counters_survive_the_client_disconnecting(
    agent: AgentProcess,
) -> None:
    # nats-server's in_msgs/in_bytes are server totals, not a sum over open connections.
    before = _get(agent, "/varz")[2]
    client = await RawClient.open(agent.port)
    client.send(CONNECT_PLAIN + pub("nobody.home", b"12345") * 3)
    await client.ping()
    await client.close()
    after = _get(agent, "/varz")[2]
    assert after["in_msgs"] >= before["in_msgs"] + 3
    assert after["in_bytes"] >= before["in_bytes"] + 15


def test_unknown_path_is_404(agent: AgentProcess) -> None:
    status, _, _ = _get(agent, "/nope")
    assert status == 404


def test_query_string_is_ignored(agent: AgentProcess) -> None:
    status, _, body = _get(agent, "/healthz?js-enabled-only=true")
    assert status == 200
    assert body == {"status": "ok"}


def test_no_monitor_without_m(tmp_path: Path) -> None:
    with running_agent(tmp_path / "store") as proc:
        assert proc.http_port == 0
        assert "http monitor" not in proc.log()


def _proc_status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


def test_varz_mem_is_the_current_resident_set(agent: AgentProcess) -> None:
    assert agent.process is not None
    mem = _get(agent, "/varz")[2]["mem"]
    rss = _proc_status_kb(agent.process.pid, "VmRSS") * 1024
    # Read a moment apart: close, not equal (the peak, VmHWM, is what it used to report).
    assert abs(mem - rss) < rss * 0.25, (mem, rss)


def test_varz_cpu_is_measured(agent: AgentProcess) -> None:
    # Starting the agent took CPU, and the first sample covers the whole process life.
    varz = _get(agent, "/varz")[2]
    assert isinstance(varz["cpu"], float | int)
    assert 0 <= varz["cpu"] <= 100 * varz["cores"]
    assert varz["http_req_stats"]["/varz"] >= 1


def test_connz_remembers_closed_connections(agent: AgentProcess) -> None:
    async def connect_and_leave() -> None:
        nc = await nats.connect(agent.url, name="leaver")
        await nc.close()

    asyncio.run(connect_and_leave())
    closed = _get(agent, "/connz?state=closed&sort=stop")[2]["connections"]
    leaver = [c for c in closed if c.get("name") == "leaver"]
    assert leaver and leaver[0]["reason"] == "Client Closed"
    assert "stop" in leaver[0]
