"""Invariants 1 and 4: no ack before the bytes are stored and the sequence committed, and an
agent holds nothing that a restart (clean or kill -9) could lose."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js.errors import APIError, NotFoundError

from support.agentproc import AgentProcess, running_agent
from support.storeinspect import (
    committed_state,
    object_holding,
    object_keys,
    stored_objects,
    stream_info_json,
)


async def _connect(agent: AgentProcess) -> Client:
    # No reconnecting: a publish to a dead agent must fail, not wait for a new one.
    return await nats.connect(agent.url, allow_reconnect=False, max_reconnect_attempts=0)


@contextlib.asynccontextmanager
async def _client(agent: AgentProcess):  # type: ignore[no-untyped-def]
    nc = await _connect(agent)
    try:
        yield nc
    finally:
        with contextlib.suppress(Exception):
            await nc.close()


async def test_everything_survives_a_restart(store_dir: Path) -> None:
    with running_agent(store_dir, "--linger", "10ms") as first:
        async with _client(first) as nc:
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="KEEP", subjects=["keep.>"])
            for i in range(30):
                await js.publish(f"keep.{i % 3}", b"payload-%d" % i, headers={"N": str(i)})
            await js.delete_msg("KEEP", 7)
            before = await stream_info_json(nc, "KEEP")
        assert first.stop() == 0

    with running_agent(store_dir, "--linger", "10ms") as second:
        async with _client(second) as nc:
            js = nc.jetstream(timeout=10)
            assert await stream_info_json(nc, "KEEP") == before
            assert before["state"]["messages"] == 29
            for i in range(30):
                if i + 1 == 7:
                    with pytest.raises(NotFoundError):
                        await js.get_msg("KEEP", 7)
                    continue
                msg = await js.get_msg("KEEP", i + 1)
                assert msg.data == b"payload-%d" % i
                assert msg.subject == f"keep.{i % 3}"
                assert msg.headers is not None and msg.headers["N"] == str(i)
            # The restarted agent carries on the sequence.
            ack = await js.publish("keep.0", b"after")
            assert ack.seq == 31


async def test_kill_9_loses_no_acknowledged_message(store_dir: Path) -> None:
    acked: dict[int, bytes] = {}
    with running_agent(store_dir, "--linger", "5ms") as victim:
        nc = await _connect(victim)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="K9", subjects=["k9.>"])
        enough = asyncio.Event()

        async def publisher(worker: int) -> None:
            for n in range(100_000):
                payload = b"w%d-n%d" % (worker, n)
                try:
                    ack = await js.publish(f"k9.{worker}", payload, timeout=1.5)
                except Exception:
                    return  # the agent is gone
                assert ack.seq not in acked, "two publishes acked with the same sequence"
                acked[ack.seq] = payload
                if len(acked) >= 400:
                    enough.set()

        # 16 publishers keep ~16 publishes in flight when the agent dies.
        workers = [asyncio.create_task(publisher(w)) for w in range(16)]
        await asyncio.wait_for(enough.wait(), 30)
        victim.kill()  # kill -9, right after an ack arrived
        await asyncio.wait_for(asyncio.gather(*workers), 30)
        with contextlib.suppress(Exception):
            await nc.close()
    assert len(acked) >= 400

    with running_agent(store_dir) as survivor:
        async with _client(survivor) as nc:
            js = nc.jetstream(timeout=10)
            info = await js.stream_info("K9")
            assert info.state.last_seq >= max(acked)
            for seq, payload in sorted(acked.items()):
                msg = await js.get_msg("K9", seq)
                assert msg.data == payload, f"seq {seq}"


async def test_sigterm_answers_every_pending_publish_then_exits_0(store_dir: Path) -> None:
    # A long linger: the publishes are still in the write buffer when SIGTERM arrives.
    with running_agent(store_dir, "--linger", "3s") as agent:
        nc = await _connect(agent)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="TERM", subjects=["term.>"])
        pending = [
            asyncio.create_task(js.publish("term.x", b"m%d" % i, timeout=10)) for i in range(50)
        ]
        await nc.flush()  # PONG: the agent has read every publish before it
        assert not any(p.done() for p in pending)
        exit_code = asyncio.create_task(asyncio.to_thread(agent.stop))
        acks = await asyncio.gather(*pending)
        assert await exit_code == 0
        with contextlib.suppress(Exception):
            await nc.close()
    assert sorted(a.seq for a in acks) == list(range(1, 51))
    assert "Traceback" not in agent.log()

    with running_agent(store_dir) as again:
        async with _client(again) as nc:
            js = nc.jetstream(timeout=10)
            for ack in acks:
                assert (await js.get_msg("TERM", ack.seq)).data == b"m%d" % (ack.seq - 1)


async def test_failed_object_put_answers_every_publisher_with_an_error(store_dir: Path) -> None:
    l0 = store_dir / "objects" / "default" / "objects" / "l0"
    with running_agent(store_dir, "--linger", "50ms") as agent:
        async with _client(agent) as nc:
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="FAIL", subjects=["fail.>"])
            assert (await js.publish("fail.ok", b"first")).seq == 1
            # Break the object store: where the next object's directory is, put a file.
            # (A read-only directory would not stop a root user.)
            shutil.move(l0, l0.with_name("l0.aside"))
            l0.write_bytes(b"not a directory")
            # Published together, so they share one batch and one failed PUT.
            results = await asyncio.gather(
                *(js.publish("fail.x", b"lost-%d" % i) for i in range(10)),
                return_exceptions=True,
            )
            for result in results:
                assert isinstance(result, APIError), f"acked despite the failed PUT: {result}"
            l0.unlink()
            shutil.move(l0.with_name("l0.aside"), l0)

            info = await js.stream_info("FAIL")
            assert (info.state.messages, info.state.last_seq) == (1, 1)
            with pytest.raises(NotFoundError):
                await js.get_msg("FAIL", 2)
            # The failed batch took no sequence numbers.
            assert (await js.publish("fail.ok", b"second")).seq == 2


async def test_ack_arrives_only_after_object_and_commit_exist(store_dir: Path) -> None:
    objects = store_dir / "objects"
    meta_db = store_dir / "meta.db"
    with running_agent(store_dir, "--linger", "50ms") as agent:
        async with _client(agent) as nc:
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="ORDER", subjects=["order.>"])

            async def publish_and_check(i: int) -> None:
                ack = await js.publish("order.x", b"m%d" % i)
                # Checked synchronously the moment the ack is here, straight in the store.
                state = committed_state(meta_db, "ORDER")
                assert state is not None and state.last_seq >= ack.seq
                key, end = object_holding(meta_db, "ORDER", ack.seq)
                data = stored_objects(objects).get(key)
                assert data is not None, f"acked seq {ack.seq} but object {key} is missing"
                assert len(data) >= end

            for i in range(5):  # one at a time: one batch each
                before = len(object_keys(objects))
                await publish_and_check(i)
                assert len(object_keys(objects)) == before + 1
            # And many at once, sharing batches.
            await asyncio.gather(*(publish_and_check(i) for i in range(5, 60)))
