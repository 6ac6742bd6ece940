"""A pull request for a large batch is read and sent in chunks, as its client reads it.

One request asks for 200 messages of 256 KiB (50 MiB) with a max_bytes far above that. A client
that reads nothing must not make the agent read the batch into memory and hold it for the
socket: the agent's resident size grows by about a chunk and a connection's low-water mark,
far less than the batch (it grew by the whole batch, twice over, when a request was claimed and
read whole). A client that reads gets all 200, in order, each with its ack reply, and its acks
are taken.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from support.agentproc import AgentProcess, running_agent
from support.polling import until
from support.rawnats import CONNECT_HEADERS, pub

MESSAGES = 200
SIZE = 256 * 1024
BATCH_MB = MESSAGES * SIZE // (1024 * 1024)
# Growth allowed while a client reads nothing: half the batch. The chunked agent grows by a few
# MB (a chunk is 1 MiB, the low-water mark 1 MiB); reading the batch whole grows it by more
# than the batch.
GROWTH_MB = BATCH_MB // 2
# Polls of the consumer's delivered count, without change, that say delivery has stopped.
STILL_POLLS = 20
SAFETY_NET = 120.0


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    conf = tmp_path / "agent.conf"
    # A deadline no test here reaches: what a client that does not read costs is measured
    # before it is cut.
    conf.write_text('write_deadline: "120s"\n')
    with running_agent(tmp_path / "store", "-c", str(conf)) as a:
        yield a


def resident_mb(agent: AgentProcess) -> float:
    assert agent.process is not None
    status = Path(f"/proc/{agent.process.pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


async def stream_of_large_messages(agent: AgentProcess) -> nats.NATS:
    nc = await nats.connect(agent.url)
    js = nc.jetstream(timeout=SAFETY_NET)
    await js.add_stream(name="S", subjects=["s.*"])
    await js.add_consumer("S", ConsumerConfig(durable_name="C", ack_policy=AckPolicy.EXPLICIT))
    for i in range(MESSAGES):
        # Each message's first bytes say which it is.
        await js.publish(f"s.{i}", i.to_bytes(4, "big") * (SIZE // 4))
    return nc


def pull_request(inbox: str) -> bytes:
    request = {"batch": MESSAGES, "max_bytes": 1 << 30, "expires": 100_000_000_000}
    return pub("$JS.API.CONSUMER.MSG.NEXT.S.C", json.dumps(request).encode(), inbox)


async def delivered(nc: nats.NATS) -> int:
    info = await nc.jetstream().consumer_info("S", "C")
    return info.delivered.consumer_seq


async def test_a_client_that_reads_nothing_holds_about_a_chunk_of_memory(
    agent: AgentProcess,
) -> None:
    nc = await stream_of_large_messages(agent)
    before = resident_mb(agent)
    sock = socket.create_connection(("127.0.0.1", agent.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(CONNECT_HEADERS + b"SUB _INBOX.r 1\r\n" + pull_request("_INBOX.r"))
    peak = before
    seen = [-1]
    still = 0

    async def delivery_stopped() -> bool:
        # Until the agent has handed out something and then nothing more for a while.
        nonlocal peak, still
        peak = max(peak, resident_mb(agent))
        now = await delivered(nc)
        still = still + 1 if now == seen[0] and now > 0 else 0
        seen[0] = now
        return still >= STILL_POLLS

    await until(delivery_stopped, SAFETY_NET, "delivery to the idle client stopping")
    growth = peak - before
    print(
        f"RSS {before:.0f} MB before, {peak:.0f} MB at most (+{growth:.1f} MB) for a "
        f"{BATCH_MB} MB batch; {seen[0]} messages handed out"
    )
    assert growth < GROWTH_MB
    sock.close()
    await nc.close()


async def read_message(reader: asyncio.StreamReader) -> tuple[str, str, bytes, bytes]:
    """The next MSG or HMSG (PINGs answered on the way): subject, reply, headers, payload."""
    while True:
        line = (await reader.readline()).decode().split()
        if not line:
            raise ConnectionError("closed")
        if line[0] in ("MSG", "HMSG"):
            break
    total = int(line[-1])
    header_len = int(line[-2]) if line[0] == "HMSG" else 0
    reply = line[3] if len(line) == (6 if line[0] == "HMSG" else 5) else ""
    body = (await reader.readexactly(total + 2))[:total]
    return line[1], reply, body[:header_len], body[header_len:]


async def test_a_client_that_reads_gets_the_whole_batch_in_order_and_acks_it(
    agent: AgentProcess,
) -> None:
    nc = await stream_of_large_messages(agent)
    reader, writer = await asyncio.open_connection("127.0.0.1", agent.port)
    await reader.readline()  # INFO
    writer.write(CONNECT_HEADERS + b"SUB _INBOX.r 1\r\n" + pull_request("_INBOX.r"))
    async with asyncio.timeout(SAFETY_NET):
        for i in range(MESSAGES):
            subject, reply, headers, payload = await read_message(reader)
            assert subject == f"s.{i}" and headers == b""
            assert payload == i.to_bytes(4, "big") * (SIZE // 4)
            # $JS.ACK.S.C.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>
            tokens = reply.split(".")
            assert tokens[:4] == ["$JS", "ACK", "S", "C"]
            assert (tokens[4], tokens[5], tokens[6], tokens[8]) == (
                "1",
                str(i + 1),
                str(i + 1),
                str(MESSAGES - i - 1),
            )
            writer.write(pub(reply, b"+ACK"))
        # Its batch done with bytes to spare: nats-server says so.
        _, _, headers, _ = await read_message(reader)
        assert headers.startswith(b"NATS/1.0 409 Batch Completed")

    async def all_acked() -> bool:
        info = await nc.jetstream().consumer_info("S", "C")
        return info.ack_floor.stream_seq == MESSAGES and info.num_ack_pending == 0

    await until(all_acked, SAFETY_NET, "every message acked")
    writer.close()
    await nc.close()
