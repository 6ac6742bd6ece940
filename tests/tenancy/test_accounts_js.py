"""nats.js, a second client implementation, in two accounts with the same stream, consumer
and bucket names: each sees only its own (tests/js/accounts_client.mjs). Against an agent and
nats-server with one accounts config."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.jsclient import run_js
from support.servers import KINDS, Server, running_server

CONFIG = """
accounts {
  A: { users: [ {user: a, password: a} ], jetstream: enabled }
  B: { users: [ {user: b, password: b} ], jetstream: enabled }
}
"""


@pytest.fixture(params=KINDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp(request.param)
    conf = tmp / "accounts.conf"
    conf.write_text(CONFIG)
    with running_server(request.param, tmp / "store", "-c", str(conf)) as srv:
        yield srv


async def test_nats_js_in_two_accounts_sees_only_its_own(server: Server) -> None:
    run = await run_js("accounts_client.mjs", server.url, server_log=server.log, timeout=60)
    assert run.steps == [
        "connect as a and b",
        "same names in both accounts",
        "publish",
        "fetch",
        "kv",
        "account info",
    ]
