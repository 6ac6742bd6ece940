"""Clients that ask for more than they read are cut at `max_pending`, as nats-server cuts them.

Three clients each pull a batch several times `max_pending` and never read. nats-server closes
each once `max_pending` bytes wait for it, logs "Slow Consumer Detected: MaxPending of N
Exceeded" and counts it in /varz and /connz. The agent once built each batch whole in memory
(246 MB per client for 250 x 1 MB, RSS 2 GB) before its transport noticed. The server's
resident size is printed for the record. Runs against an agent and nats-server with one
config file.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from support.monitorshape import http_get
from support.polling import until
from support.rawnats import CONNECT_HEADERS, pub
from support.servers import KINDS, Server, free_port, running_server

MAX_PENDING = 16 * 1024 * 1024
MESSAGES = 60
SIZE = 1_000_000
READERS = 3
SAFETY_NET = 120.0


@pytest.fixture(params=KINDS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Server, int]]:
    conf = tmp_path / "limits.conf"
    # A deadline that only a client that reads nothing at all can miss.
    conf.write_text(f'max_pending: {MAX_PENDING}\nwrite_deadline: "2s"\n')
    http = free_port()
    with running_server(request.param, tmp_path / "store", "-c", str(conf), "-m", str(http)) as srv:
        yield srv, http


def resident_mb(server: Server) -> int:
    assert server.process is not None and server.process.process is not None
    status = Path(f"/proc/{server.process.process.pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) // 1024


def never_reading(port: int, n: int, batch: int = MESSAGES) -> socket.socket:
    """A client that asks for `batch` messages and then reads nothing."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    request = json.dumps({"batch": batch, "expires": 60_000_000_000}).encode()
    sock.sendall(
        CONNECT_HEADERS
        + f"SUB _INBOX.r{n} 1\r\n".encode()
        + pub(f"$JS.API.CONSUMER.MSG.NEXT.S.C{n}", request, f"_INBOX.r{n}")
    )
    return sock


def slow_consumers(http: int) -> int:
    status, _, varz = http_get(http, "/varz")
    assert status == 200
    return int(varz["slow_consumers"])


async def test_clients_that_never_read_are_cut_at_max_pending(
    server: tuple[Server, int],
) -> None:
    srv, http = server
    nc = await nats.connect(srv.url)
    js = nc.jetstream(timeout=SAFETY_NET)
    await js.add_stream(name="S", subjects=["s"])
    for n in range(READERS):  # a consumer each: each is sent the whole stream
        await js.add_consumer("S", durable_name=f"C{n}", ack_policy="none")
    for _ in range(MESSAGES):
        await js.publish("s", b"x" * SIZE)
    before = resident_mb(srv)
    readers = [never_reading(srv.port, n) for n in range(READERS)]
    peak = before

    async def all_cut() -> bool:
        nonlocal peak
        peak = max(peak, resident_mb(srv))
        _, _, connz = await asyncio.to_thread(http_get, http, "/connz")
        return len(connz["connections"]) == 1  # only the publisher is left

    await until(all_cut, SAFETY_NET, "every reader cut as a slow consumer")
    print(f"{srv.kind}: RSS {before} MB before, {peak} MB at most while cutting")
    # Cut by nats-server's rules, in its words: MaxPending, or the write deadline.
    assert srv.log().count("Slow Consumer Detected: ") >= READERS
    assert slow_consumers(http) >= READERS
    _, _, connz = http_get(http, "/connz?state=closed")
    reasons = [c.get("reason", "") for c in connz["connections"]]
    assert sum(r.startswith("Slow Consumer") for r in reasons) == READERS, reasons
    # The others go on being served.
    assert (await js.publish("s", b"after")).seq == MESSAGES + 1
    for sock in readers:
        sock.close()
    await nc.close()


async def test_a_client_that_takes_nothing_misses_the_write_deadline(
    server: tuple[Server, int],
) -> None:
    # Less than max_pending waits for it: only the write deadline can cut it.
    srv, http = server
    nc = await nats.connect(srv.url)
    js = nc.jetstream(timeout=SAFETY_NET)
    await js.add_stream(name="S", subjects=["s"])
    await js.add_consumer("S", durable_name="C0", ack_policy="none")
    for _ in range(12):
        await js.publish("s", b"x" * SIZE)
    reader = never_reading(srv.port, 0, batch=12)

    async def cut() -> bool:
        _, _, connz = await asyncio.to_thread(http_get, http, "/connz")
        return len(connz["connections"]) == 1

    await until(cut, SAFETY_NET, "the reader cut by the write deadline")
    assert "Slow Consumer Detected: WriteDeadline of 2s exceeded with" in srv.log()
    assert slow_consumers(http) == 1
    reader.close()
    await nc.close()
