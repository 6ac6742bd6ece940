"""Two agent processes on one store (same -sd, different ports): any agent serves any stream."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js.errors import NotFoundError

from support.agentpool import connected, running_agents
from support.storeinspect import stream_info_json


async def test_stream_created_through_one_agent_takes_publishes_through_the_other(
    two_clients: list[Client],
) -> None:
    nc_a, nc_b = two_clients
    js_a, js_b = nc_a.jetstream(timeout=10), nc_b.jetstream(timeout=10)
    await js_a.add_stream(name="SHARED", subjects=["shared.>"])
    # B has not heard of SHARED yet: it must look it up rather than refuse the publish.
    acks = [await js_b.publish("shared.b", b"via-b-%d" % i) for i in range(3)]
    assert [a.seq for a in acks] == [1, 2, 3]
    for i in range(3):
        msg = await js_a.get_msg("SHARED", i + 1)
        assert (msg.subject, msg.data) == ("shared.b", b"via-b-%d" % i)


async def test_both_agents_report_the_same_stream_info(two_clients: list[Client]) -> None:
    nc_a, nc_b = two_clients
    js_a, js_b = nc_a.jetstream(timeout=10), nc_b.jetstream(timeout=10)
    await js_a.add_stream(name="INFO", subjects=["info.>"])
    for i in range(4):
        await (js_a if i % 2 else js_b).publish("info.x", b"%d" % i)
    info_a = await stream_info_json(nc_a, "INFO")
    info_b = await stream_info_json(nc_b, "INFO")
    assert info_a == info_b
    assert info_a["state"]["messages"] == 4
    names_b = [s.config.name for s in await js_b.streams_info()]
    assert "INFO" in names_b


async def test_purge_through_one_agent_is_seen_by_the_other(
    two_clients: list[Client],
) -> None:
    nc_a, nc_b = two_clients
    js_a, js_b = nc_a.jetstream(timeout=10), nc_b.jetstream(timeout=10)
    await js_a.add_stream(name="PURGE", subjects=["purge.>"])
    for i in range(5):
        await js_b.publish("purge.x", b"%d" % i)
    assert (await js_b.get_msg("PURGE", 5)).data == b"4"  # B has the stream in view
    await js_a.purge_stream("PURGE")
    info_b = await js_b.stream_info("PURGE")
    assert info_b.state.messages == 0
    assert info_b.state.first_seq == 6
    with pytest.raises(NotFoundError):
        await js_b.get_msg("PURGE", 5)
    assert (await js_b.publish("purge.x", b"after")).seq == 6


async def test_stream_deleted_through_one_agent_is_gone_on_the_other(
    two_clients: list[Client],
) -> None:
    nc_a, nc_b = two_clients
    js_a, js_b = nc_a.jetstream(timeout=10), nc_b.jetstream(timeout=10)
    await js_a.add_stream(name="GONE", subjects=["gone.>"])
    await js_b.publish("gone.x", b"x")
    await js_a.delete_stream("GONE")
    with pytest.raises(NotFoundError):
        await js_b.stream_info("GONE")


async def test_concurrent_publishes_through_both_agents_get_distinct_contiguous_sequences(
    two_clients: list[Client],
) -> None:
    nc_a, nc_b = two_clients
    js_a, js_b = nc_a.jetstream(timeout=20), nc_b.jetstream(timeout=20)
    await js_a.add_stream(name="BOTH", subjects=["both.>"])
    await js_b.stream_info("BOTH")
    workers, rounds = 4, 40  # many small batches from each agent, racing to commit

    async def worker(js: nats.js.JetStreamContext, tag: str) -> dict[int, bytes]:
        got = {}
        for i in range(rounds):
            payload = f"{tag}-{i}".encode()
            got[(await js.publish(f"both.{tag}", payload)).seq] = payload
        return got

    results = await asyncio.gather(
        *(
            worker(js, f"{name}{w}")
            for js, name in ((js_a, "a"), (js_b, "b"))
            for w in range(workers)
        )
    )
    total = 2 * workers * rounds
    every = {seq: p for r in results for seq, p in r.items()}
    assert len(every) == total, "two publishes acked with the same sequence"
    assert sorted(every) == list(range(1, total + 1)), "sequences have gaps"
    for js in (js_a, js_b):
        info = await js.stream_info("BOTH")
        assert (info.state.messages, info.state.last_seq) == (total, total)
        for seq, payload in every.items():
            assert (await js.get_msg("BOTH", seq)).data == payload


async def test_one_connection_keeps_its_order_while_another_agent_publishes(
    two_clients: list[Client],
) -> None:
    nc_a, nc_b = two_clients
    js_a, js_b = nc_a.jetstream(timeout=20), nc_b.jetstream(timeout=20)
    await js_a.add_stream(name="ORD", subjects=["ord.>"])
    acks_a, acks_b = await asyncio.gather(
        asyncio.gather(*(js_a.publish("ord.a", b"%d" % i) for i in range(100))),
        asyncio.gather(*(js_b.publish("ord.b", b"%d" % i) for i in range(100))),
    )
    # Invariant 2: each connection's messages to one stream keep the order they were sent in.
    for acks in (acks_a, acks_b):
        seqs = [a.seq for a in acks]
        assert seqs == sorted(seqs)


async def test_stream_recreated_through_one_agent_is_new_on_the_other(
    two_clients: list[Client],
) -> None:
    nc_a, nc_b = two_clients
    js_a, js_b = nc_a.jetstream(timeout=10), nc_b.jetstream(timeout=10)
    await js_a.add_stream(name="AGAIN", subjects=["again.>"])
    for i in range(3):
        await js_b.publish("again.x", b"old-%d" % i)
    assert (await js_b.get_msg("AGAIN", 3)).data == b"old-2"  # B holds a view of it
    await js_a.delete_stream("AGAIN")
    await js_a.add_stream(name="AGAIN", subjects=["again.>"])
    assert (await js_b.publish("again.x", b"new-0")).seq == 1
    assert (await js_a.get_msg("AGAIN", 1)).data == b"new-0"
    assert (await js_b.get_msg("AGAIN", 1)).data == b"new-0"
    assert (await js_b.stream_info("AGAIN")).state.messages == 1


async def test_kill_9_of_one_agent_leaves_every_acked_message_with_the_other(
    store_dir: Path,
) -> None:
    with running_agents(store_dir, linger="5ms") as (victim, survivor):
        async with connected(victim, survivor, allow_reconnect=False) as (nc_v, nc_s):
            js_v, js_s = nc_v.jetstream(timeout=10), nc_s.jetstream(timeout=10)
            await js_s.add_stream(name="HALF", subjects=["half.>"])
            acked: dict[int, bytes] = {}
            enough = asyncio.Event()

            async def publisher(js: nats.js.JetStreamContext, tag: str, rounds: int) -> None:
                for n in range(rounds):
                    payload = f"{tag}-{n}".encode()
                    try:
                        seq = (await js.publish("half.x", payload, timeout=1.5)).seq
                    except Exception:
                        return  # its agent is gone
                    assert seq not in acked, "two publishes acked with the same sequence"
                    acked[seq] = payload
                    if len(acked) >= 150:
                        enough.set()

            tasks = [asyncio.create_task(publisher(js_v, f"v{w}", 10_000)) for w in range(8)]
            tasks += [asyncio.create_task(publisher(js_s, f"s{w}", 60)) for w in range(4)]
            await asyncio.wait_for(enough.wait(), 30)
            victim.kill()
            await asyncio.wait_for(asyncio.gather(*tasks), 30)
            assert any(p.startswith(b"s") for p in acked.values())
            assert any(p.startswith(b"v") for p in acked.values())
            for seq, payload in acked.items():
                assert (await js_s.get_msg("HALF", seq)).data == payload
