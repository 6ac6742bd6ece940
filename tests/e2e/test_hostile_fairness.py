"""One connection publishing a million messages nothing captures does not stall another.

The agent holds a publish no stream captures until it has looked at the catalog again
(another agent may just have created the stream), then answers "no responders". It once
replayed every held publish of every connection in one go: a million of them stalled a
bystander for 7.4 s (nats-server: 55 ms). Events, not time, show a stall here: every
`MARK_EVERY` publishes the flood asks a question nothing serves, answered with a 503 in its
turn, so the 503s count the flood's progress through the server. A bystander's acked publish
that spans many of them waited while the server served the flood alone. Runs against an agent
and nats-server.
"""

from __future__ import annotations

import asyncio
import socket

import nats

from support.rawnats import CONNECT_HEADERS, pub
from support.servers import Server

FLOOD = 1_000_000
MARK_EVERY = 50_000
CHUNK = 10_000
# The most flood marks one bystander publish may see answered while it waits: the flood's
# progress through 200,000 publishes.
MOST_MARKS_PER_PUBLISH = 4
SAFETY_NET = 300.0


def flood_chunks() -> list[bytes]:
    chunks = []
    for start in range(0, FLOOD, CHUNK):
        frames = [pub(f"nowhere.{n % 100}", b"x") for n in range(start, start + CHUNK)]
        if (start + CHUNK) % MARK_EVERY == 0:
            frames.append(pub("nowhere.mark", b"", f"_INBOX.mark.{start}"))
        chunks.append(b"".join(frames))
    return chunks


class Flood:
    """The flooding client, on threads of its own so that this test's event loop is free
    for the bystander: one sends, one counts the answered marks."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.marks = 0
        self._chunks = flood_chunks()

    def send(self) -> None:
        self.sock.sendall(CONNECT_HEADERS + b"SUB _INBOX.mark.* 1\r\n")
        for chunk in self._chunks:
            self.sock.sendall(chunk)

    def count(self) -> None:
        tail = b""
        while self.marks < FLOOD // MARK_EVERY:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the flood's connection closed")
            seen = tail + data
            self.marks += seen.count(b"NATS/1.0 503") - tail.count(b"NATS/1.0 503")
            tail = seen[-16:]


async def test_a_flood_nothing_captures_does_not_stall_a_bystander(server: Server) -> None:
    bystander = await nats.connect(server.url)
    js = bystander.jetstream(timeout=SAFETY_NET)
    await js.add_stream(name="B", subjects=["b"])
    flood = Flood(server.port)
    sending = asyncio.create_task(asyncio.to_thread(flood.send))
    counting = asyncio.create_task(asyncio.to_thread(flood.count))
    spans: list[int] = []
    while not counting.done():
        before = flood.marks
        ack = await js.publish("b", b"bystander")
        assert ack.stream == "B"
        spans.append(flood.marks - before)
    await asyncio.wait_for(counting, SAFETY_NET)
    await asyncio.wait_for(sending, SAFETY_NET)
    flood.sock.close()
    print(f"{server.kind}: {len(spans)} publishes, most marks in one: {max(spans)}")
    assert max(spans) <= MOST_MARKS_PER_PUBLISH, spans
    await bystander.close()
