"""Acks to consumers nobody created: nothing is made or kept for them.

nats-server drops an ack nobody listens on. The agent looks each made-up consumer up and
refuses the ack; it once kept a finished task per consumer for good, so 100,000 made-up
consumers grew it from 90 to 236 MB, never returned. The ack with a reply that ends each round
is answered "no responders" once the round before it is refused: the resident size is read
then, and it stays where it was. Runs against an agent and nats-server.
"""

from __future__ import annotations

from pathlib import Path

from support.rawnats import CONNECT_HEADERS, RawClient, pub
from support.servers import Server

ACKS = 100_000
CHUNK = 5_000
SAFETY_NET = 300.0
# Growth allowed over a round of made-up acks once the first round has settled the heap.
ALLOWED_GROWTH = 16 * 1024 * 1024


def resident_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def ack_round(raw: RawClient, round_no: int) -> None:
    for start in range(0, ACKS, CHUNK):
        raw.send(
            b"".join(
                pub(f"$JS.ACK.S.made-up-{round_no}-{n}.1.1.1.0.0", b"")
                for n in range(start, start + CHUNK)
            )
        )
        await raw.writer.drain()
    raw.send(
        b"SUB _INBOX.done 1\r\n" + pub(f"$JS.ACK.S.last-{round_no}.1.1.1.0.0", b"", "_INBOX.done")
    )
    answer = await raw.read_until(b"\r\n\r\n", timeout=SAFETY_NET)
    assert b"503" in answer  # no responders: nothing serves a made-up consumer


async def test_acks_to_made_up_consumers_keep_nothing(server: Server) -> None:
    assert server.process is not None and server.process.process is not None
    pid = server.process.process.pid
    raw = await RawClient.open(server.port)
    raw.send(CONNECT_HEADERS)
    raw.send(
        pub("$JS.API.STREAM.CREATE.S", b'{"name":"S","subjects":["s"]}', "_INBOX.created").replace(
            b"PUB", b"SUB _INBOX.created 2\r\nPUB", 1
        )
    )
    await raw.read_until(b"stream_create_response", timeout=SAFETY_NET)
    await raw.ping(timeout=SAFETY_NET)
    await ack_round(raw, 0)
    settled = resident_bytes(pid)
    await ack_round(raw, 1)
    grown = resident_bytes(pid) - settled
    print(f"{server.kind}: {settled >> 20} MB after {ACKS:,} acks, +{grown >> 20} MB after more")
    assert grown < ALLOWED_GROWTH
    await raw.close()
