"""`$JS.API.STREAM.ERASE.STATUS.<stream>`: InfiniStream's own API (nats-server has none), the
erase requests a stream has had and where each stands. The pipeline's part (rewritten, then
complete) is tested with the bytes, in tests/pipeline/erase/test_erase_job.py."""

from __future__ import annotations

import json
from typing import Any

from nats.aio.client import Client
from nats.js import JetStreamContext

from support.moduleagent import one_agent_per_module

agent, no_streams = one_agent_per_module()

API = "$JS.API."
ERASE = {"InfiniStream-Erase": "true"}


async def api(
    nc: Client, subject: str, body: Any = b"", headers: dict[str, str] | None = None
) -> dict[str, Any]:
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    msg = await nc.request(API + subject, body, timeout=10, headers=headers)
    return json.loads(msg.data)


async def stream_of_five(js: JetStreamContext, name: str) -> None:
    await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
    for i in range(1, 6):
        await js.publish(f"{name.lower()}.{i % 2}", f"m{i}".encode())


async def test_status_lists_each_erase_request(nc: Client, js: JetStreamContext) -> None:
    await stream_of_five(js, "STAT")
    await js.delete_msg("STAT", 2)  # nats-py sends no no_erase: an erase, as on nats-server
    await api(nc, "STREAM.MSG.DELETE.STAT", {"seq": 3, "no_erase": True})
    await api(nc, "STREAM.PURGE.STAT", {"filter": "stat.1"}, ERASE)
    await api(nc, "STREAM.PURGE.STAT", {"filter": "stat.0"})  # no erase: no request
    got = await api(nc, "STREAM.ERASE.STATUS.STAT")
    assert got["type"] == "io.infinistream.api.v1.stream_erase_status_response"
    assert (got["stream"], got["total"], got["pending"]) == ("STAT", 2, 2)
    delete, purge = got["erasures"]
    assert (delete["kind"], delete["ranges"], delete["sequences"]) == ("delete", [[2, 2]], 1)
    # stat.1 held 1, 3 and 5; 3 was deleted already (without erase), so the purge took 1 and 5,
    # and moved the stream's head past 2 and 3: their bytes go as well.
    assert (purge["kind"], purge["ranges"], purge["sequences"]) == ("purge", [[1, 3], [5, 5]], 4)
    # One publish at a time: each message went in an object of its own.
    assert (delete["holders"], purge["holders"]) == (1, 4)
    for request in (delete, purge):
        assert request["state"] == "pending"
        assert request["requested"].endswith("Z")
        assert "completed" not in request and "rewritten" not in request
    # A request names sequences, never subjects or filters (they may be the personal data).
    assert "stat.1" not in json.dumps(got)


async def test_status_outlives_the_stream(nc: Client, js: JetStreamContext) -> None:
    await stream_of_five(js, "GONE")
    await js.delete_msg("GONE", 1)
    await js.delete_stream("GONE")
    # Its objects still hold the bytes until the janitor deletes them: the request stays.
    got = await api(nc, "STREAM.ERASE.STATUS.GONE")
    assert (got["total"], got["pending"]) == (1, 1)


async def test_status_of_unknown_stream_and_bad_body(nc: Client, js: JetStreamContext) -> None:
    got = await api(nc, "STREAM.ERASE.STATUS.NOSUCH")
    assert got["error"] == {"code": 404, "err_code": 10059, "description": "stream not found"}
    await stream_of_five(js, "STATB")
    got = await api(nc, "STREAM.ERASE.STATUS.STATB", {"seq": 1})
    assert got["error"] == {
        "code": 400,
        "err_code": 10038,
        "description": "expected an empty request payload",
    }
    got = await api(nc, "STREAM.ERASE.STATUS.STATB")
    assert (got["total"], got["pending"], got["erasures"]) == (0, 0, [])


async def test_a_whole_purge_erases_the_range_it_drops(nc: Client, js: JetStreamContext) -> None:
    await stream_of_five(js, "WHOLE")
    resp = await api(nc, "STREAM.PURGE.WHOLE", {"seq": 4}, ERASE)  # everything below 4
    assert resp["purged"] == 3
    await api(nc, "STREAM.PURGE.WHOLE", {}, ERASE)  # the rest
    got = await api(nc, "STREAM.ERASE.STATUS.WHOLE")
    assert [(e["ranges"], e["holders"]) for e in got["erasures"]] == [
        ([[1, 3]], 3),
        ([[4, 5]], 2),
    ]
    # A purge that drops nothing records nothing.
    await api(nc, "STREAM.PURGE.WHOLE", {}, ERASE)
    assert (await api(nc, "STREAM.ERASE.STATUS.WHOLE"))["total"] == 2
