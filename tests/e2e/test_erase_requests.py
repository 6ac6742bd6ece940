"""Erase requests on the wire, against an agent and nats-server alike: `STREAM.MSG.DELETE`
without `no_erase` (nats-server's secure delete, what nats-py's `delete_msg` and nats.js's
`deleteMessage` send), with nats-server's answers to bad sequences, and the purge extension
(the header `InfiniStream-Erase: true`), which nats-server ignores.

The agent's erase status, InfiniStream's own, is tested in test_erase_status.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from support.jsclient import run_js
from support.servers import KINDS, Server, running_server


@pytest.fixture(scope="module", params=KINDS)
def module_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """An agent, then nats-server, each shared by the module's tests."""
    with running_server(request.param, tmp_path_factory.mktemp(request.param)) as srv:
        yield srv


@pytest.fixture
def server_url(module_server: Server) -> str:
    return module_server.url


API = "$JS.API."
ERASE = {"InfiniStream-Erase": "true"}
DELETE_TYPE = "io.nats.jetstream.api.v1.stream_msg_delete_response"


@pytest.fixture
async def nc(server_url: str) -> AsyncIterator[Client]:
    client = await nats.connect(server_url)
    yield client
    await client.close()


async def api(
    nc: Client, subject: str, body: Any = b"", headers: dict[str, str] | None = None
) -> dict[str, Any]:
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    msg = await nc.request(API + subject, body, timeout=10, headers=headers)
    return json.loads(msg.data)


async def stream_of_five(nc: Client, name: str) -> None:
    js = nc.jetstream(timeout=10)
    await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
    for i in range(1, 6):
        await js.publish(f"{name.lower()}.{i % 2}", f"m{i}".encode())


def error(code: int, err_code: int, description: str) -> dict[str, Any]:
    return {
        "type": DELETE_TYPE,
        "error": {"code": code, "err_code": err_code, "description": description},
    }


@pytest.mark.parametrize("erase", [True, False], ids=["erase", "no_erase"])
async def test_bad_sequences_get_nats_servers_answers(nc: Client, erase: bool) -> None:
    name = "BAD" + ("E" if erase else "N")
    await stream_of_five(nc, name)
    extra = {} if erase else {"no_erase": True}

    async def delete(seq: int) -> dict[str, Any]:
        return await api(nc, f"STREAM.MSG.DELETE.{name}", {"seq": seq, **extra})

    assert await delete(3) == {"type": DELETE_TYPE, "success": True}
    # Already deleted: the sequence is inside the stream, and gone.
    assert await delete(3) == error(400, 10043, "sequence 3 not found")
    # Past the end, far past it, and the largest sequence there is.
    assert await delete(6) == error(500, 10057, "stream store EOF")
    assert await delete(2**63) == error(500, 10057, "stream store EOF")
    assert await delete(2**64 - 1) == error(500, 10057, "stream store EOF")
    # Zero, and below the first sequence after a purge.
    assert await delete(0) == error(500, 10057, "no message found")
    await api(nc, f"STREAM.PURGE.{name}", {"seq": 3})
    assert await delete(2) == error(500, 10057, "no message found")
    # Missing body, and a stream that does not exist.
    missing = await nc.request(f"{API}STREAM.MSG.DELETE.{name}", b"", timeout=10)
    assert json.loads(missing.data)["error"]["err_code"] == 10003
    assert (await api(nc, "STREAM.MSG.DELETE.NOPE", {"seq": 1, **extra}))["error"] == {
        "code": 404,
        "err_code": 10059,
        "description": "stream not found",
    }
    # Nothing but seq 3 and what the purge took went: the rest still reads back.
    got = await api(nc, f"STREAM.MSG.GET.{name}", {"seq": 4})
    assert got["message"]["seq"] == 4


async def test_purge_with_erase_purges_on_both_servers(nc: Client) -> None:
    await stream_of_five(nc, "PURGEE")
    resp = await api(nc, "STREAM.PURGE.PURGEE", {"filter": "purgee.1"}, ERASE)
    assert resp == {
        "type": "io.nats.jetstream.api.v1.stream_purge_response",
        "success": True,
        "purged": 3,
    }
    info = await api(nc, "STREAM.INFO.PURGEE")
    assert info["state"]["messages"] == 2


async def test_nats_js_deletes_and_the_purge_header(nc: Client, module_server: Server) -> None:
    run = await run_js(
        "erase_client.mjs", module_server.url, "JSERASE", server_log=module_server.log
    )
    assert run.steps == [
        "connect",
        "stream with six messages",
        "deleteMessage with and without erase",
        "purge with the erase header",
        "state",
    ]
    if not module_server.is_agent:
        return  # nats-server has no erase status to look at
    reply = await nc.request(f"{API}STREAM.ERASE.STATUS.JSERASE", b"", timeout=10)
    status = json.loads(reply.data)
    # The erase and the purge are requests; the delete with erase=false is not. (The purge
    # took 1, 3 and 5 and moved the head past 2 and 4, deleted before: 1..5.)
    assert [(e["kind"], e["ranges"]) for e in status["erasures"]] == [
        ("delete", [[2, 2]]),
        ("purge", [[1, 5]]),
    ]
