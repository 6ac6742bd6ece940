"""A pool of agents on one store: membership (join, kill -9, connect_urls, /varz, client
failover) and roles (what an agent without a role refuses, and with which error)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.errors import APIError, ServiceUnavailableError

from support.agentpool import connected, running_agents
from support.agentproc import AgentProcess, running_agent
from support.polling import until

ROLE_ERR_CODE = 10008  # JSClusterNotAvailErr: "this agent does not ... : it lacks the X role"


async def info_of(agent: AgentProcess) -> dict[str, Any]:
    """The INFO an agent greets a new connection with."""
    reader, writer = await asyncio.open_connection("127.0.0.1", agent.port)
    try:
        line = await asyncio.wait_for(reader.readline(), 10)
    finally:
        writer.close()
    assert line.startswith(b"INFO ")
    info: dict[str, Any] = json.loads(line[5:])
    return info


def varz(agent: AgentProcess) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{agent.http_port}/varz", timeout=10) as r:
        data: dict[str, Any] = json.load(r)
    return data


def address(agent: AgentProcess) -> str:
    return f"127.0.0.1:{agent.port}"


@pytest.fixture
def zoned(store_dir: Path) -> Iterator[list[AgentProcess]]:
    zones = [("--zone", "z1", "-m", "-1"), ("--zone", "z2"), ("--zone", "z1")]
    with running_agents(store_dir, each=zones) as agents:
        yield agents


async def test_connect_urls_list_the_pool_this_zone_first_and_drop_a_killed_agent(
    zoned: list[AgentProcess],
) -> None:
    a, b, c = zoned

    async def all_three() -> bool:
        return len((await info_of(a))["connect_urls"]) == 3

    # C started last: A sees it at its next read of the pool (a second).
    await until(all_three, 10)
    urls = (await info_of(a))["connect_urls"]
    assert set(urls[:2]) == {address(a), address(c)}  # A's zone, z1, first
    assert urls[2] == address(b)
    assert (await info_of(b))["connect_urls"][0] == address(b)  # B alone in z2

    pool = varz(a)["infinistream"]["pool"]
    assert pool["zone"] == "z1"
    assert sorted((m["address"], m["zone"]) for m in pool["members"]) == sorted(
        [(address(a), "z1"), (address(b), "z2"), (address(c), "z1")]
    )
    assert [m["self"] for m in pool["members"]].count(True) == 1

    c.kill()  # kill -9: no goodbye, its lease just stops being renewed

    async def c_gone() -> bool:
        return address(c) not in (await info_of(a))["connect_urls"]

    # The TTL is 3 s and the pool is read every second.
    elapsed = await until(c_gone, 15)
    assert elapsed < 8, f"a killed agent dropped out only after {elapsed:.1f}s"
    assert (await info_of(a))["connect_urls"] == [address(a), address(b)]


async def test_a_client_learns_of_an_agent_that_joins_later_and_fails_over_to_it(
    store_dir: Path,
) -> None:
    with running_agent(store_dir, "--linger", "10ms") as a:
        reconnected = asyncio.Event()

        async def on_reconnect() -> None:
            reconnected.set()

        # The client is told only of A, and A is alone.
        nc = await nats.connect(
            a.url, reconnected_cb=on_reconnect, reconnect_time_wait=0.2, max_reconnect_attempts=-1
        )
        try:
            assert nc.discovered_servers == []
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="FAIL", subjects=["fail.>"])
            assert (await js.publish("fail.a", b"1")).seq == 1
            with running_agent(store_dir) as b:

                async def b_discovered() -> bool:
                    return any(u.port == b.port for u in nc.discovered_servers)

                # B joins: A's next read of the pool sends its clients a new INFO, as a
                # nats-server cluster does when a server joins.
                await until(b_discovered, 10)
                a.kill()
                await asyncio.wait_for(reconnected.wait(), 30)
                assert nc.connected_url is not None and nc.connected_url.port == b.port
                assert (await js.publish("fail.b", b"2")).seq == 2
        finally:
            await nc.close()


async def test_an_agent_without_a_role_refuses_that_work_with_a_clear_error(
    store_dir: Path,
) -> None:
    roles = [("--roles", "publish"), ("--roles", "fetch,cache")]
    with running_agents(store_dir, each=roles) as (pub, fetch):
        async with connected(pub, fetch) as (nc_pub, nc_fetch):
            js_pub, js_fetch = nc_pub.jetstream(timeout=10), nc_fetch.jetstream(timeout=10)
            # Stream management is every agent's.
            await js_fetch.add_stream(name="ROLES", subjects=["roles.>"])
            for i in range(3):
                await js_pub.publish("roles.x", b"%d" % i)

            # No publish role: an error PubAck naming the role; nothing stored.
            with pytest.raises(APIError) as refused:
                await js_fetch.publish("roles.x", b"refused")
            assert refused.value.err_code == ROLE_ERR_CODE
            assert refused.value.code == 503
            assert "publish role" in (refused.value.description or "")
            assert (await js_fetch.stream_info("ROLES")).state.messages == 3

            # No fetch role: creating a consumer is refused...
            with pytest.raises(APIError) as refused:
                await js_pub.add_consumer("ROLES", durable_name="C", ack_policy="explicit")
            assert refused.value.err_code == ROLE_ERR_CODE
            assert "fetch role" in (refused.value.description or "")
            # ...and so are pull requests, even for a consumer made elsewhere.
            await js_fetch.add_consumer("ROLES", durable_name="C", ack_policy="explicit")
            sub = await js_pub.pull_subscribe_bind("C", stream="ROLES")
            # (a status, not JSON: nats-py raises ServiceUnavailableError at once)
            with pytest.raises(ServiceUnavailableError):
                await sub.fetch(1, timeout=5)
            with pytest.raises(ServiceUnavailableError):
                await sub.fetch(3, timeout=5)

            # The agent with the role serves it.
            got = await (await js_fetch.pull_subscribe_bind("C", stream="ROLES")).fetch(3)
            assert [m.data for m in got] == [b"0", b"1", b"2"]


def test_jobs_without_the_jobs_role_is_a_settings_error(store_dir: Path) -> None:
    proc = AgentProcess(["-p", "0", "-sd", str(store_dir), "--roles", "publish", "--jobs"])
    with pytest.raises(RuntimeError, match="jobs role"):
        proc.start()
