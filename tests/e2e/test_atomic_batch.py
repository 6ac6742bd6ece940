"""Atomic batch publish (`allow_atomic`, `Nats-Batch-Id` / `-Sequence` / `-Commit`) against an
agent and against nats-server: staged messages are answered empty, the commit with the batch's
size, and a batch is stored whole or not at all, with nats-server's errors for bad batches."""

from __future__ import annotations

import json
from typing import Any

from nats.aio.client import Client
from nats.js import JetStreamContext

from support.jsclient import run_js
from support.servers import Server

ERR_INCOMPLETE = {
    "code": 400,
    "err_code": 10176,
    "description": "atomic publish batch is incomplete",
}


async def stream(js: JetStreamContext, **kw: Any) -> None:
    await js.add_stream(name="B", subjects=["b.>"], allow_atomic=True, **kw)


async def send(
    nc: Client,
    subject: str,
    batch: str,
    seq: int | str | None,
    commit: str | None = None,
    data: bytes = b"x",
    **headers: str,
) -> dict[str, Any] | None:
    """Publish one message of a batch; its answer (None for the empty one of a staged one)."""
    hdrs = {"Nats-Batch-Id": batch, **headers}
    if seq is not None:
        hdrs["Nats-Batch-Sequence"] = str(seq)
    if commit is not None:
        hdrs["Nats-Batch-Commit"] = commit
    msg = await nc.request(subject, data, headers=hdrs, timeout=10)
    return json.loads(msg.data) if msg.data else None


async def messages(js: JetStreamContext) -> int:
    return (await js.stream_info("B")).state.messages


async def test_a_batch_is_staged_then_stored_on_its_commit(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js)
    assert await send(server_nc, "b.1", "one", 1) is None
    assert await send(server_nc, "b.2", "one", 2) is None
    assert await messages(js) == 0  # staged, not stored
    ack = await send(server_nc, "b.3", "one", 3, commit="1")
    assert ack == {"stream": "B", "seq": 3, "batch": "one", "count": 3}
    assert await messages(js) == 3
    last = await js.get_msg("B", 3)
    assert last.headers is not None
    assert (last.headers["Nats-Batch-Id"], last.headers["Nats-Batch-Commit"]) == ("one", "1")


async def test_an_end_of_batch_marker_commits_without_being_stored(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js)
    await send(server_nc, "b.1", "e", 1)
    await send(server_nc, "b.2", "e", 2)
    ack = await send(server_nc, "b.x", "e", 3, commit="eob")
    assert ack == {"stream": "B", "seq": 2, "batch": "e", "count": 2}
    assert await messages(js) == 2
    last = await js.get_msg("B", 2)
    assert last.subject == "b.2" and last.headers is not None
    assert last.headers["Nats-Batch-Commit"] == "1"
    # A batch of only an end marker is incomplete.
    assert (await send(server_nc, "b.x", "f", 1, commit="eob"))["error"] == ERR_INCOMPLETE


async def test_bad_batches_get_nats_server_errors(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await js.add_stream(name="OFF", subjects=["off.>"])
    resp = await send(server_nc, "off.1", "x", 1, commit="1")
    assert resp is not None
    assert resp["error"] == {
        "code": 400,
        "err_code": 10174,
        "description": "atomic publish is disabled",
    }
    await stream(js)
    missing = await send(server_nc, "b.1", "x", None)
    assert missing is not None and missing["error"]["err_code"] == 10175
    long_id = await send(server_nc, "b.1", "i" * 65, 1)
    assert long_id is not None and long_id["error"]["err_code"] == 10179
    # A batch starts at 1, and goes on without gaps.
    assert (await send(server_nc, "b.1", "late", 2))["error"] == ERR_INCOMPLETE
    huge = await send(server_nc, "b.1", "huge", 1001)
    assert huge is not None and huge["error"] == {
        "code": 400,
        "err_code": 10199,
        "description": "atomic publish batch is too large: 1000",
    }
    await send(server_nc, "b.1", "gap", 1)
    assert (await send(server_nc, "b.3", "gap", 3, commit="1"))["error"] == ERR_INCOMPLETE
    # The gap ended that batch: its next message starts nothing.
    assert (await send(server_nc, "b.2", "gap", 2, commit="1"))["error"] == ERR_INCOMPLETE
    await send(server_nc, "b.1", "c", 1)
    bad_commit = await send(server_nc, "b.2", "c", 2, commit="yes")
    assert bad_commit is not None and bad_commit["error"]["err_code"] == 10200
    assert await messages(js) == 0


async def test_a_batch_is_stored_whole_or_not_at_all(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js)
    await js.publish("b.k", b"before")  # seq 1
    await send(server_nc, "b.a", "w", 1)
    await send(server_nc, "b.k", "w", 2, **{"Nats-Expected-Last-Subject-Sequence": "7"})
    resp = await send(server_nc, "b.c", "w", 3, commit="1")
    assert resp is not None
    assert resp["error"] == {
        "code": 400,
        "err_code": 10071,
        "description": "wrong last sequence: 1",
    }
    assert await messages(js) == 1
    # The same batch with the right expectation goes in whole.
    await send(server_nc, "b.a", "r", 1)
    await send(server_nc, "b.k", "r", 2, **{"Nats-Expected-Last-Subject-Sequence": "1"})
    ack = await send(server_nc, "b.c", "r", 3, commit="1")
    assert ack == {"stream": "B", "seq": 4, "batch": "r", "count": 3}
    assert await messages(js) == 4


async def test_what_a_batch_may_not_expect_of_itself(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await stream(js)
    # Only the first message may expect a last sequence.
    await send(server_nc, "b.1", "s", 1, **{"Nats-Expected-Last-Sequence": "0"})
    resp = await send(server_nc, "b.2", "s", 2, commit="1", **{"Nats-Expected-Last-Sequence": "1"})
    assert resp is not None
    assert resp["error"] == {
        "code": 400,
        "err_code": 10164,
        "description": "wrong last sequence",
    }
    # Nor a subject it wrote itself.
    await send(server_nc, "b.x", "t", 1)
    resp = await send(
        server_nc, "b.x", "t", 2, commit="1", **{"Nats-Expected-Last-Subject-Sequence": "1"}
    )
    assert resp is not None and resp["error"]["err_code"] == 10164
    # The same message id twice.
    await send(server_nc, "b.1", "d", 1, **{"Nats-Msg-Id": "m"})
    resp = await send(server_nc, "b.2", "d", 2, commit="1", **{"Nats-Msg-Id": "m"})
    assert resp is not None and resp["error"]["err_code"] == 10201
    # Expected last message ids are not for batches.
    await send(server_nc, "b.1", "u", 1)
    resp = await send(server_nc, "b.2", "u", 2, commit="1", **{"Nats-Expected-Last-Msg-Id": "m"})
    assert resp is not None
    assert resp["error"] == {
        "code": 400,
        "err_code": 10177,
        "description": "atomic publish unsupported header used: Nats-Expected-Last-Msg-Id",
    }
    assert await messages(js) == 0


async def test_a_large_batch_commits_in_one_piece(server: Server, server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=20)
    await stream(js)
    count = 400
    for i in range(1, count):
        await send(server_nc, f"b.{i}", "big", i, data=b"z" * 16_000)
    ack = await send(server_nc, "b.last", "big", count, commit="1", data=b"z" * 16_000)
    assert ack == {"stream": "B", "seq": count, "batch": "big", "count": count}
    info = (await js.stream_info("B")).state
    assert (info.messages, info.first_seq, info.last_seq) == (count, 1, count)


async def test_nats_js_batch_publisher(server: Server) -> None:
    run = await run_js("batch_client.mjs", server.url, server_log=server.log)
    assert run.steps == ["connect", "committed batch", "refused batch"]
