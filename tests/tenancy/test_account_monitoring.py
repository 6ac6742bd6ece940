"""Monitoring per account: /jsz?acc=NAME shows that account's streams and figures only, with
two accounts that both have a stream of the same name. Against an agent and nats-server with
one accounts config."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import nats
import pytest

from support.monitorshape import http_get
from support.servers import KINDS, Server, free_port, running_server

CONFIG = """
accounts {
  A: { users: [ {user: a, password: a} ], jetstream: enabled }
  B: { users: [ {user: b, password: b} ], jetstream: enabled }
}
"""


@pytest.fixture(scope="module", params=KINDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp(request.param)
    conf = tmp / "accounts.conf"
    conf.write_text(CONFIG)
    args = ("-c", str(conf), "-m", str(free_port()))
    with running_server(request.param, tmp / "store", *args) as srv:
        yield srv


async def jsz(server: Server, query: str) -> dict[str, Any]:
    assert server.process is not None
    status, _, body = await asyncio.to_thread(http_get, server.process.http_port, f"/jsz?{query}")
    assert status == 200, body
    answer: dict[str, Any] = body
    return answer


async def test_jsz_of_one_account_shows_its_streams_only(server: Server) -> None:
    for user, own, n in (("a", "A_ONLY", 3), ("b", "B_ONLY", 2)):
        nc = await nats.connect(server.url, user=user, password=user)
        js = nc.jetstream()
        await js.add_stream(name="ORDERS", subjects=["orders.>"])
        await js.add_stream(name=own, subjects=[f"{own.lower()}.>"])
        for i in range(n):
            await js.publish("orders.x", f"{user}{i}".encode())
        await js.pull_subscribe("orders.>", durable="C", stream="ORDERS")
        await nc.close()

    for account, own, n in (("A", "A_ONLY", 3), ("B", "B_ONLY", 2)):
        answer = await jsz(server, f"acc={account}&streams=true&consumers=true")
        [detail] = answer["account_details"]
        assert detail["name"] == account
        streams = {s["name"]: s for s in detail["stream_detail"]}
        assert sorted(streams) == sorted(["ORDERS", own])
        assert streams["ORDERS"]["state"]["messages"] == n
        assert streams["ORDERS"]["state"]["consumer_count"] == 1
        assert [c["name"] for c in streams["ORDERS"]["consumer_detail"]] == ["C"]

    everyone = await jsz(server, "accounts=true")
    names = {d["name"] for d in everyone["account_details"]}
    assert {"A", "B"} <= names
    assert everyone["streams"] == 4 and everyone["messages"] == 5
