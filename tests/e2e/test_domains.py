"""JetStream domains (`jetstream { domain: hub }`): the API answers on `$JS.hub.API.>` as well
as `$JS.API.>`, and INFO, account info, stream infos and PubAcks name the domain, on an agent
and on nats-server with the same config, with raw requests, nats-py and nats.js."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client

from support.jsclient import run_js
from support.servers import KINDS, Server, running_server

DOMAIN = "hub"


@pytest.fixture(params=KINDS)
def domain_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    conf = tmp_path / "server.conf"
    conf.write_text(f"jetstream {{ domain: {DOMAIN} }}\n")
    with running_server(request.param, tmp_path / "store", "-c", str(conf)) as srv:
        yield srv


@pytest.fixture
async def nc(domain_server: Server) -> AsyncIterator[Client]:
    client = await nats.connect(domain_server.url)
    yield client
    await client.close()


async def request(nc: Client, subject: str, body: object = b"") -> dict[str, object]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    reply = await nc.request(subject, data, timeout=10)
    return json.loads(reply.data)  # type: ignore[no-any-return]


async def test_the_api_answers_under_the_domain_and_without_it(nc: Client) -> None:
    assert nc._server_info.get("domain") == DOMAIN
    for prefix in (f"$JS.{DOMAIN}.API", "$JS.API"):
        info = await request(nc, f"{prefix}.INFO")
        assert info["type"] == "io.nats.jetstream.api.v1.account_info_response"
        assert info["domain"] == DOMAIN
    created = await request(
        nc, f"$JS.{DOMAIN}.API.STREAM.CREATE.D", {"name": "D", "subjects": ["d.>"]}
    )
    assert "domain" not in created  # as a lone nats-server answers a create
    updated = await request(
        nc, f"$JS.{DOMAIN}.API.STREAM.UPDATE.D", {"name": "D", "subjects": ["d.>"]}
    )
    assert updated["domain"] == DOMAIN
    ack = await request(nc, "d.x", b"1")
    assert ack == {"stream": "D", "domain": DOMAIN, "seq": 1}
    info = await request(nc, "$JS.API.STREAM.INFO.D")
    assert info["domain"] == DOMAIN and info["state"]["messages"] == 1  # type: ignore[index]
    listed = await request(nc, f"$JS.{DOMAIN}.API.STREAM.LIST")
    assert [s["domain"] for s in listed["streams"]] == [DOMAIN]  # type: ignore[union-attr]


async def test_another_domain_finds_no_one(nc: Client) -> None:
    with pytest.raises(nats.errors.NoRespondersError):
        await nc.request("$JS.other.API.INFO", b"", timeout=5)


async def test_nats_py_through_the_domain(nc: Client) -> None:
    js = nc.jetstream(domain=DOMAIN, timeout=10)
    await js.add_stream(name="D", subjects=["d.>"])
    ack = await js.publish("d.a", b"1")
    assert (ack.stream, ack.seq, ack.domain) == ("D", 1, DOMAIN)
    info = await js.stream_info("D")
    assert info.state.messages == 1
    assert (await js.get_msg("D", 1)).data == b"1"
    # Key-Value through a domain publishes to $JS.hub.API.$KV.<bucket>.<key>.
    kv = await js.create_key_value(bucket="K")
    assert await kv.put("k", b"v") == 1
    entry = await kv.get("k")
    assert entry.value == b"v"
    sub = await js.pull_subscribe("d.>", "C")
    [msg] = await sub.fetch(1, timeout=5)
    await msg.ack()
    assert msg.data == b"1"


async def test_nats_js_through_the_domain(domain_server: Server) -> None:
    run = await run_js("domain_client.mjs", domain_server.url, DOMAIN, server_log=domain_server.log)
    assert run.steps == ["connect", "account", "stream", "kv"]
