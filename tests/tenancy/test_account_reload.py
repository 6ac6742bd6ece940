"""SIGHUP with changed accounts: an account that gains JetStream is served, and new limits
hold from the next request, as nats-server's reload does. Same test on both servers."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from support.servers import KINDS, Server, running_server

BEFORE = """
accounts {
  A: { users: [ {user: a, password: a} ], jetstream: { max_streams: 1 } }
  B: { users: [ {user: b, password: b} ] }
}
"""
AFTER = """
accounts {
  A: { users: [ {user: a, password: a} ], jetstream: { max_streams: 2 } }
  B: { users: [ {user: b, password: b} ], jetstream: enabled }
}
"""


@pytest.fixture(params=KINDS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    conf = tmp_path / "accounts.conf"
    conf.write_text(BEFORE)
    with running_server(request.param, tmp_path / "store", "-c", str(conf)) as srv:
        yield srv, conf


async def api(srv: Server, user: str, subject: str, body: Any = None) -> dict[str, Any]:
    nc = await nats.connect(srv.url, user=user, password=user)
    try:
        data = b"" if body is None else json.dumps(body).encode()
        answer: dict[str, Any] = json.loads((await nc.request(subject, data, timeout=10)).data)
        return answer
    finally:
        await nc.close()


def create(name: str) -> tuple[str, dict[str, Any]]:
    return f"$JS.API.STREAM.CREATE.{name}", {"name": name, "subjects": [name.lower()]}


async def test_sighup_gives_an_account_jetstream_and_new_limits(
    server: tuple[Server, Path],
) -> None:
    srv, conf = server
    assert "error" not in await api(srv, "a", *create("S1"))
    assert (await api(srv, "a", *create("S2")))["error"]["err_code"] == 10027
    assert (await api(srv, "b", "$JS.API.INFO"))["error"]["err_code"] == 10039

    conf.write_text(AFTER)
    assert srv.process is not None and srv.process.process is not None
    srv.process.process.send_signal(signal.SIGHUP)
    deadline = asyncio.get_running_loop().time() + 10

    # nats-server applies a reload account by account, and while it does an account's API
    # may find no responders: wait until both accounts have it.
    async def reloaded() -> dict[str, Any]:
        try:
            info = await api(srv, "b", "$JS.API.INFO")
            limits = (await api(srv, "a", "$JS.API.INFO")).get("limits", {})
        except nats.errors.NoRespondersError as exc:
            return {"error": str(exc)}
        return info if limits.get("max_streams") == 2 else {"error": "a not reloaded"}

    while "error" in (info := await reloaded()):
        assert asyncio.get_running_loop().time() < deadline, info
        await asyncio.sleep(0.1)
    assert info["streams"] == 0
    assert "error" not in await api(srv, "a", *create("S2"))
    assert (await api(srv, "a", "$JS.API.INFO"))["limits"]["max_streams"] == 2
