"""Clients guessing a bcrypt user's password do not slow down a client already connected.

A bcrypt check takes a core for a large fraction of a second by design. nats-server runs each
in the connection's own goroutine; the agent once ran them on its event loop, so while four
clients sent wrong passwords a bystander's round trip waited behind one check after another
(p50 1,260 ms against nats-server's 38 ms). The bystander here counts events, not time: for
each of its round trips, whether an attacker's refusal arrived while it was in flight. With
checks on the loop nearly every round trip spans one; with checks off the loop most of them
do not. Each test runs against an agent and against nats-server.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import bcrypt
import nats
import pytest

from support.rawnats import RawClient
from support.servers import KINDS, Server, running_server

# nats-server's default bcrypt cost (the `nats server passwd` tool's).
HASH = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=11)).decode()
CONFIG = f'authorization {{ users: [ {{user: app, password: "{HASH}"}} ] }}\n'
ATTACKERS = 4
ATTEMPTS = 12
SAFETY_NET = 60.0
WRONG = b'CONNECT {"verbose":false,"user":"app","pass":"wrong"}\r\nPING\r\n'
# What a wrong password gets: refused, or (when its turn comes late) timed out; never silence.
REFUSALS = (b"-ERR 'Authorization Violation'\r\n", b"-ERR 'Authentication Timeout'\r\n")


@pytest.fixture(params=KINDS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    conf = tmp_path / "auth.conf"
    conf.write_text(CONFIG)
    with running_server(request.param, tmp_path / "store", "-c", str(conf)) as srv:
        yield srv


@dataclass
class Attack:
    answers: list[bytes] = field(default_factory=list)

    async def attacker(self, port: int) -> None:
        while len(self.answers) < ATTEMPTS:
            raw = await RawClient.open(port)
            raw.send(WRONG)
            self.answers.append(await raw.read_until_closed(timeout=SAFETY_NET))
            await raw.close()


async def test_wrong_passwords_do_not_hold_up_a_bystander(server: Server) -> None:
    bystander = await nats.connect(server.url, user="app", password="right")
    attack = Attack()
    # For each round trip: how many refusals arrived while it was in flight, and its time.
    spans: list[tuple[int, float]] = []
    attackers = asyncio.gather(*(attack.attacker(server.port) for _ in range(ATTACKERS)))
    while not attackers.done():
        before, started = len(attack.answers), time.perf_counter()
        await bystander.flush(timeout=SAFETY_NET)
        spans.append((len(attack.answers) - before, time.perf_counter() - started))
    await attackers
    await bystander.close()
    # (nats-server may send its first PING before the refusal.)
    assert all(a.replace(b"PING\r\n", b"") in REFUSALS for a in attack.answers), attack.answers
    quiet = sum(1 for refusals, _ in spans if refusals == 0)
    p50 = statistics.median(seconds for _, seconds in spans)
    print(f"{server.kind}: {len(spans)} round trips, {quiet} quiet, p50 {p50 * 1000:.1f} ms")
    assert len(spans) >= 2 * ATTEMPTS
    assert quiet >= len(spans) / 2
    # The right password, from the same address as the guesses, still gets in.
    again = await nats.connect(server.url, user="app", password="right")
    await again.flush(timeout=SAFETY_NET)
    await again.close()


async def test_what_follows_a_checked_connect_is_handled_in_order(server: Server) -> None:
    # The CONNECT's check goes off the loop: what came after it waits, then runs in order.
    raw = await RawClient.open(server.port)
    raw.send(
        b'CONNECT {"verbose":true,"user":"app","pass":"right"}\r\n'
        b"SUB r 1\r\nPUB $JS.API.INFO r 0\r\n\r\nPING\r\n"
    )
    got = await raw.read_until(b"PONG\r\n", timeout=SAFETY_NET)
    if b"MSG r 1 " not in got:
        got += await raw.read_until(b"}\r\n", timeout=SAFETY_NET)
    # The request went out after the subscription: its answer comes to it, before the PONG or
    # after (nats-server answers JetStream requests on a goroutine of their own).
    before, _, answer = got.partition(b"MSG r 1 ")
    assert b"account_info_response" in answer
    after = answer[answer.index(b"}\r\n") + len(b"}\r\n") :]
    assert (before + after).replace(b"PING\r\n", b"") == b"+OK\r\n+OK\r\n+OK\r\nPONG\r\n"
    await raw.close()
    # A wrong password with more behind it: refused, and nothing after it is handled.
    raw = await RawClient.open(server.port)
    raw.send(WRONG.replace(b"PING", b"SUB s 1\r\nPING"))
    refused = await raw.read_until_closed(timeout=SAFETY_NET)
    assert refused.replace(b"PING\r\n", b"") == REFUSALS[0]
    await raw.close()
