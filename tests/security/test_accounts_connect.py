"""Users of accounts connect with their passwords (plain and bcrypt); anything else is an
Authorization Violation. Run against an agent and nats-server with one config file."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import nats
import pytest
from nats.errors import Error as NatsError

from support.rawnats import RawClient
from support.servers import AGENT, KINDS, Server, running_server, start_command

HASH = bcrypt.hashpw(b"b-secret", bcrypt.gensalt(rounds=4)).decode()
# A bcrypt hash whose cost (99) no implementation accepts: nobody logs in with it.
BAD_COST = "$2a$99$" + HASH[7:]

CONFIG = f"""
accounts {{
  ORDERS: {{ users: [ {{user: alice, password: a-secret}} ], jetstream: enabled }}
  BILLING: {{ users: [ {{user: bob, password: "{HASH}"}}, {{user: eve, password: "{BAD_COST}"}} ] }}
}}
"""


@pytest.fixture(scope="module", params=KINDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp(request.param)
    conf = tmp / "accounts.conf"
    conf.write_text(CONFIG)
    with running_server(request.param, tmp / "store", "-c", str(conf)) as srv:
        yield srv


async def test_account_users_connect(server: Server) -> None:
    for user, password in (("alice", "a-secret"), ("bob", "b-secret")):
        nc = await nats.connect(server.url, user=user, password=password)
        await nc.flush()
        await nc.close()


@pytest.mark.parametrize(
    "connect",
    [
        b'CONNECT {"verbose":false,"user":"alice","pass":"wrong"}\r\n',
        b'CONNECT {"verbose":false,"user":"bob","pass":"a-secret"}\r\n',
        b'CONNECT {"verbose":false,"user":"eve","pass":"b-secret"}\r\n',
        b'CONNECT {"verbose":false,"user":"mallory","pass":"x"}\r\n',
        b'CONNECT {"verbose":false}\r\n',
    ],
    ids=["wrong-password", "other-users-password", "bcrypt-bad-cost", "unknown-user", "none"],
)
async def test_anything_else_is_an_authorization_violation(server: Server, connect: bytes) -> None:
    client = await RawClient.open(server.port)
    try:
        assert client.info["auth_required"] is True
        client.send(connect + b"PING\r\n")
        assert await client.read_until_closed() == b"-ERR 'Authorization Violation'\r\n"
    finally:
        await client.close()


async def test_nats_py_sees_the_violation_and_the_server_stays_up(server: Server) -> None:
    with pytest.raises(NatsError):
        await nats.connect(
            server.url,
            user="alice",
            password="nope",
            allow_reconnect=False,
            max_reconnect_attempts=0,
        )
    nc = await nats.connect(server.url, user="alice", password="a-secret")
    await nc.flush()
    await nc.close()


DUPLICATE = """accounts {
 A: {users: [{user: x, password: "1"}]}
 B: {users: [{user: x, password: "2"}]}
}
"""


@pytest.mark.parametrize("kind", KINDS)
def test_duplicate_users_across_accounts_refuse_to_start(kind: str, tmp_path: Path) -> None:
    conf = tmp_path / "dup.conf"
    conf.write_text(DUPLICATE)
    command = [*start_command(kind), "-c", str(conf), "-p", "-1", "-sd", str(tmp_path / "s")]
    done = subprocess.run(command, capture_output=True, timeout=60, check=False)
    assert done.returncode != 0
    # Both name the file, the line and column of an account's users, and the user (which of
    # the two accounts nats-server names depends on Go's map order; the agent names the second).
    assert re.search(
        rf'{re.escape(str(conf))}:[23]:6: Duplicate user "x" detected', done.stderr.decode()
    )


def test_a_bcrypt_hash_with_a_wrong_cost_is_reported_at_start(tmp_path: Path) -> None:
    # The agent says so at start (nats-server says nothing); the refusal is tested above.
    conf = tmp_path / "accounts.conf"
    conf.write_text(CONFIG)
    with running_server(AGENT, tmp_path / "store", "-c", str(conf)) as agent:
        assert "bcrypt password or token has a cost outside 4-31" in agent.log()
