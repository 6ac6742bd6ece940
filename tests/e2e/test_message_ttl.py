"""Per-message TTLs (`Nats-TTL`) and subject delete markers, against an agent and nats-server.

What is refused and with which error, when messages go, "never" against max_age, the marker
that replaces a subject's last message when it ages out (and itself goes after its TTL), and
expiry that survives a restart. tests/e2e/test_ttl_agents.py runs expiry with two agents.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from support.jsapi import api, error
from support.servers import Server

S = 1_000_000_000


async def publish(nc: Client, subject: str, data: bytes, ttl: str | None) -> dict[str, Any]:
    """The PubAck (or error) as JSON, for a message with a `Nats-TTL` header if `ttl`."""
    headers = {"Nats-TTL": ttl} if ttl is not None else None
    msg = await nc.request(subject, data, headers=headers, timeout=10)
    return json.loads(msg.data)  # type: ignore[no-any-return]


async def wait_until_gone(js: JetStreamContext, stream: str, seq: int, within: float) -> float:
    """Seconds until message `seq` is gone; fails if it is still there after `within`."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while loop.time() - start < within:
        try:
            await js.get_msg(stream, seq)
        except NotFoundError:
            return loop.time() - start
        await asyncio.sleep(0.1)
    raise AssertionError(f"message {seq} still there after {within}s")


# -- refused ---------------------------------------------------------------------------------


async def test_ttl_on_a_stream_without_allow_msg_ttl_is_refused(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await js.add_stream(name="T", subjects=["t.>"])
    resp = await publish(server_nc, "t.a", b"x", "5s")
    assert resp["error"] == {
        "code": 400,
        "err_code": 10166,
        "description": "per-message TTL is disabled",
    }
    resp = await publish(server_nc, "t.a", b"x", "never")
    assert resp["error"]["err_code"] == 10166
    # A malformed TTL asks for none: it is reported as invalid, not as disabled.
    resp = await publish(server_nc, "t.a", b"x", "500ms")
    assert resp["error"] == {
        "code": 400,
        "err_code": 10165,
        "description": "invalid per-message TTL",
    }
    assert (await js.stream_info("T")).state.messages == 0


@pytest.mark.parametrize("ttl", ["500ms", "0", "0s", "-1", "-5s", "abc", "1.5", "1x"])
async def test_ttl_under_a_second_or_malformed_is_invalid(server_nc: Client, ttl: str) -> None:
    js = server_nc.jetstream(timeout=10)
    await js.add_stream(name="T", subjects=["t.>"], allow_msg_ttl=True)
    resp = await publish(server_nc, "t.a", b"x", ttl)
    assert resp["error"] == {
        "code": 400,
        "err_code": 10165,
        "description": "invalid per-message TTL",
    }


@pytest.mark.parametrize("ttl", ["1s", "90s", "1m30s", "2h", "60", "1", "never", "NEVER"])
async def test_ttls_nats_server_accepts(server_nc: Client, ttl: str) -> None:
    js = server_nc.jetstream(timeout=10)
    await js.add_stream(name="T", subjects=["t.>"], allow_msg_ttl=True)
    resp = await publish(server_nc, "t.a", b"x", ttl)
    assert resp == {"stream": "T", "seq": 1}
    msg = await js.get_msg("T", 1)
    assert msg.headers is not None and msg.headers["Nats-TTL"] == ttl


@pytest.mark.parametrize(
    ("config", "description"),
    [
        (
            {"subject_delete_marker_ttl": S // 2},
            "subject delete marker TTL must be at least 1 second",
        ),
        (
            {"subject_delete_marker_ttl": -S},
            "subject delete marker TTL must not be negative",
        ),
    ],
)
async def test_subject_delete_marker_configs_refused(
    server_nc: Client, config: dict[str, Any], description: str
) -> None:
    body = {"name": "T", "subjects": ["t.>"], **config}
    resp = await api(server_nc, "STREAM.CREATE.T", body)
    assert error(resp) == (500, 10052, description)


async def test_markers_turn_on_ttls_and_rollups(server_nc: Client) -> None:
    body = {"name": "T", "subjects": ["t.>"], "subject_delete_marker_ttl": S, "deny_purge": True}
    cfg = (await api(server_nc, "STREAM.CREATE.T", body))["config"]
    assert cfg["subject_delete_marker_ttl"] == S
    assert (cfg["allow_msg_ttl"], cfg["allow_rollup_hdrs"], cfg["deny_purge"]) == (
        True,
        True,
        False,
    )


async def test_message_ttls_can_not_be_turned_off(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await js.add_stream(name="T", subjects=["t.>"], allow_msg_ttl=True)
    resp = await api(
        server_nc, "STREAM.UPDATE.T", {"name": "T", "subjects": ["t.>"], "allow_msg_ttl": False}
    )
    assert error(resp) == (
        500,
        10052,
        "message TTL status can not be disabled",
    )
    # Turning them on later is allowed.
    await js.add_stream(name="U", subjects=["u.>"])
    resp = await api(
        server_nc, "STREAM.UPDATE.U", {"name": "U", "subjects": ["u.>"], "allow_msg_ttl": True}
    )
    assert resp["config"]["allow_msg_ttl"] is True


# -- expiry ----------------------------------------------------------------------------------


async def test_a_message_goes_after_its_ttl(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await js.add_stream(name="T", subjects=["t.>"], allow_msg_ttl=True)
    assert (await publish(server_nc, "t.short", b"1", "1s"))["seq"] == 1
    assert (await publish(server_nc, "t.long", b"2", "1h"))["seq"] == 2
    assert (await publish(server_nc, "t.none", b"3", None))["seq"] == 3
    waited = await wait_until_gone(js, "T", 1, within=10)
    assert waited > 0.5
    state = (await js.stream_info("T")).state
    assert (state.messages, state.first_seq, state.last_seq) == (2, 2, 3)
    assert (await js.get_msg("T", 2)).data == b"2"


async def test_never_outlives_max_age(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await js.add_stream(name="T", subjects=["t.>"], allow_msg_ttl=True, max_age=1.0)
    await publish(server_nc, "t.forever", b"keep", "never")
    await publish(server_nc, "t.plain", b"go", None)
    await publish(server_nc, "t.after", b"go too", None)
    await wait_until_gone(js, "T", 3, within=10)
    await wait_until_gone(js, "T", 2, within=10)
    await asyncio.sleep(1.5)
    state = (await js.stream_info("T")).state
    assert (state.messages, state.first_seq, state.last_seq) == (1, 1, 3)
    assert (await js.get_msg("T", 1)).data == b"keep"


async def test_a_ttl_outlives_max_age_no_longer(server_nc: Client) -> None:
    # A long TTL does not keep a message past max_age: whichever comes first.
    js = server_nc.jetstream(timeout=10)
    await js.add_stream(name="T", subjects=["t.>"], allow_msg_ttl=True, max_age=1.0)
    await publish(server_nc, "t.a", b"x", "1h")
    await wait_until_gone(js, "T", 1, within=10)


async def test_a_subjects_last_message_is_replaced_by_a_delete_marker(
    server_nc: Client,
) -> None:
    js = server_nc.jetstream(timeout=10)
    body = {
        "name": "T",
        "subjects": ["t.>"],
        "max_age": S,
        "subject_delete_marker_ttl": S,
        "allow_direct": True,
    }
    await api(server_nc, "STREAM.CREATE.T", body)
    await publish(server_nc, "t.a", b"a1", None)
    await publish(server_nc, "t.a", b"a2", None)
    await publish(server_nc, "t.b", b"b1", None)
    # Once aged out, each subject has a marker where its last message was.
    markers: dict[str, Any] = {}
    for _ in range(100):
        await asyncio.sleep(0.1)
        markers = {}
        for subject in ("t.a", "t.b"):
            try:
                msg = await js.get_msg("T", subject=subject)
            except NotFoundError:
                continue
            if msg.headers and "Nats-Marker-Reason" in msg.headers:
                markers[subject] = msg
        if len(markers) == 2:
            break
    assert sorted(markers) == ["t.a", "t.b"]
    for msg in markers.values():
        assert not msg.data
        assert dict(msg.headers) == {
            "Nats-Marker-Reason": "MaxAge",
            "Nats-TTL": "1s",
            "Nats-Rollup": "sub",
        }
        assert msg.seq > 3
    # The markers are the only messages left, and they go after their own TTL.
    assert (await js.stream_info("T")).state.messages == 2
    for msg in markers.values():
        await wait_until_gone(js, "T", msg.seq, within=10)
    state = (await js.stream_info("T")).state
    assert (state.messages, state.last_seq) == (0, 5)


async def test_a_short_ttl_is_raised_to_the_marker_ttl(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    body = {"name": "T", "subjects": ["t.>"], "subject_delete_marker_ttl": 3 * S}
    await api(server_nc, "STREAM.CREATE.T", body)
    await publish(server_nc, "t.a", b"x", "1s")
    msg = await js.get_msg("T", 1)
    assert msg.headers is not None and msg.headers["Nats-TTL"] == "3"


async def test_expiry_survives_a_restart(server: Server) -> None:
    nc = await nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="T", subjects=["t.>"], allow_msg_ttl=True)
        await publish(nc, "t.a", b"x", "2s")
        await publish(nc, "t.b", b"y", None)
        server.restart()
        for _ in range(100):
            try:
                await js.stream_info("T")
                break
            except (TimeoutError, nats.errors.Error):
                await asyncio.sleep(0.2)
        await wait_until_gone(js, "T", 1, within=15)
        assert (await js.get_msg("T", 2)).data == b"y"
    finally:
        await nc.close()
