"""The scale benchmark's fill: a stream written through the write path reads back through a
real agent as if its messages had been published."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats

from infinistream.pipeline.options import StoreOptions
from infinistream.settings import Settings
from infinistream_bench.fill import fill
from infinistream_bench.scale import agent, running

SUBJECTS = 7


def subject(i: int) -> str:
    return f"big.{i % SUBJECTS}"


def message(i: int) -> tuple[str, bytes]:
    return subject(i), b"x" * 16


async def create_stream(port: int) -> None:
    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    try:
        await nc.jetstream().add_stream(name="BIG", subjects=["big.>"])
        # One message over the wire first: the fill goes on from where the stream is.
        await nc.jetstream().publish(subject(0), b"w" * 16)
    finally:
        await nc.close()


async def read_back(port: int) -> None:
    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    try:
        js = nc.jetstream()
        info = await js.stream_info("BIG")
        assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (5000, 1, 5000)
        for seq in (1, 2, 1000, 1001, 2500, 4999, 5000):
            msg = await js.get_msg("BIG", seq)
            assert (msg.seq, msg.subject) == (seq, subject(seq - 1))
            assert msg.data == (b"w" if seq == 1 else b"x") * 16
        last = await js.get_last_msg("BIG", subject(3))
        assert last.seq == max(s for s in range(1, 5001) if (s - 1) % SUBJECTS == 3)
        sub = await js.pull_subscribe(subject(5), durable="FIVE", stream="BIG")
        seen: list[int] = []
        while len(seen) < 714:
            seen += [m.metadata.sequence.stream for m in await sub.fetch(500, timeout=10)]
        assert seen == [s for s in range(1, 5001) if (s - 1) % SUBJECTS == 5]
    finally:
        await nc.close()


def test_a_filled_stream_reads_back_through_an_agent(tmp_path: Path) -> None:
    store = tmp_path / "store"
    a = agent(tmp_path, "a", "-sd", str(store))
    with running([a]):
        asyncio.run(create_stream(a.port))
    options = StoreOptions.from_settings(Settings(store_dir=str(store)))
    filled = asyncio.run(fill(options, "BIG", 4999, message, first=1, batch=1000))
    assert (filled.messages, filled.batches, filled.last_seq) == (4999, 5, 5000)
    with running([a]):
        asyncio.run(read_back(a.port))
