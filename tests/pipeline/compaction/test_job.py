"""`infinistream pipeline compact` against a real agent subprocess and real stores.

Many streams are published to at once with a short linger, so each flush writes one L0
object holding a section of many streams; compaction (with --min-age 0) then rewrites them as
per-stream objects. Every test reads every message back through the agent afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec
import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, StoreCompression
from nats.js.errors import APIError, NotFoundError

from infinistream.metadata.kv import (
    Compare,
    MetadataStore,
    Op,
    Put,
    TxnResult,
)
from infinistream.pipeline.compaction import job as compact
from infinistream.pipeline.compaction.plan import CompactSettings
from infinistream.pipeline.compaction.swap import SwapOutcome, swap_chunk
from infinistream.pipeline.compaction.tasks import compact_chunk
from infinistream.pipeline.options import StoreOptions, add_store_arguments
from infinistream.storage import CODEC_NONE, CODEC_ZSTD, ObjectStore, parse_object
from infinistream.storage.layout import level_of
from infinistream.stream.loader import StreamSnapshot, read_stream
from infinistream.stream.records import (
    SectionEntry,
    StreamKeys,
    decode_state,
)
from support.agentproc import AgentProcess, running_agent
from support.committers import Forwarding
from support.s3server import S3Server, start_s3_server
from support.storeinspect import damage_object, object_bytes, object_keys

STREAMS = [f"S{i:02d}" for i in range(12)]
# Small targets so that a few hundred messages make several chunks and objects per stream.
SETTINGS = CompactSettings(min_age_ns=0, target_bytes=3 * 1024, entry_bytes=1024)


@dataclass(frozen=True)
class Sent:
    subject: str
    data: bytes
    headers: dict[str, str] | None


Expected = dict[str, dict[int, Sent]]


# -- helpers ----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def client(agent: AgentProcess) -> AsyncIterator[JetStreamContext]:
    nc: Client = await nats.connect(agent.url)
    try:
        yield nc.jetstream(timeout=10)
    finally:
        await nc.close()


async def add_streams(js: JetStreamContext, names: list[str]) -> Expected:
    for name in names:
        await js.add_stream(name=name, subjects=[f"{name.lower()}.>"])
    return {name: {} for name in names}


def message(name: str, r: int, tag: str) -> Sent:
    data = f"{name}-{tag}{r}-".encode() + bytes((r * 7 + i) % 251 for i in range(r * 37 % 300))
    headers = {"Tag": f"{tag}{r}", "X-Stream": name} if r % 4 == 1 else None
    return Sent(f"{name.lower()}.{r % 3}", data, headers)


async def publish_rounds(
    js: JetStreamContext, expected: Expected, rounds: int, tag: str = "m", per: int = 1
) -> None:
    """Each round publishes `per` messages to every stream at once: one L0 object per round
    or so, holding a section of each stream."""
    for r in range(rounds):
        sent = [(name, message(name, r * per + k, tag)) for name in expected for k in range(per)]
        acks = await asyncio.gather(
            *(js.publish(m.subject, m.data, headers=m.headers) for _, m in sent)
        )
        for (name, m), ack in zip(sent, acks, strict=True):
            assert ack.stream == name
            expected[name][ack.seq] = m


async def check_reads(
    js: JetStreamContext, expected: Expected, deleted: dict[str, set[int]] | None = None
) -> None:
    """Every message by MSG.GET: live ones as sent, deleted ones not found."""
    deleted = deleted or {}
    for name, msgs in expected.items():
        for seq, sent in msgs.items():
            if seq in deleted.get(name, set()):
                with pytest.raises(NotFoundError):
                    await js.get_msg(name, seq)
                continue
            got = await js.get_msg(name, seq)
            assert (got.seq, got.subject, got.data) == (seq, sent.subject, sent.data), (name, seq)
            assert (got.headers or None) == sent.headers, (name, seq)


async def fetch_all(js: JetStreamContext, name: str, n: int) -> list[tuple[int, bytes]]:
    """(stream seq, data) of every message, through a new pull consumer."""
    durable = f"all{uuid.uuid4().hex[:8]}"
    sub = await js.pull_subscribe(
        f"{name.lower()}.>",
        durable=durable,
        stream=name,
        config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=60),
    )
    got: list[tuple[int, bytes]] = []
    while len(got) < n:
        try:
            batch = await sub.fetch(min(100, n - len(got)), timeout=3)
        except TimeoutError:  # nats-py raises its own and asyncio's
            break
        for msg in batch:
            got.append((msg.metadata.sequence.stream, msg.data))
            await msg.ack()
    await js.delete_consumer(name, durable)
    return got


async def check_fetch(
    js: JetStreamContext, expected: Expected, deleted: dict[str, set[int]] | None = None
) -> None:
    deleted = deleted or {}
    for name, msgs in expected.items():
        live = [(s, m.data) for s, m in sorted(msgs.items()) if s not in deleted.get(name, set())]
        assert await fetch_all(js, name, len(live)) == live, name


async def snapshots(options: StoreOptions, names: list[str]) -> dict[str, StreamSnapshot]:
    meta = options.open_metadata()
    try:
        out = {}
        for name in names:
            snap = await read_stream(meta, options.group, name)
            assert snap is not None, name
            out[name] = snap
        return out
    finally:
        await meta.close()


async def referenced(options: StoreOptions, names: list[str]) -> set[str]:
    snaps = await snapshots(options, names)
    return {ref.entry.obj for snap in snaps.values() for ref in snap.entries}


async def stream_states(js: JetStreamContext, names: list[str]) -> dict[str, Any]:
    out = {}
    for name in names:
        state = (await js.stream_info(name)).state
        out[name] = (
            state.messages,
            state.bytes,
            state.first_seq,
            state.last_seq,
            state.num_deleted,
        )
    return out


def run_compact(spark: Any, options: StoreOptions, **kwargs: Any) -> compact.Summary:
    settings = kwargs.pop("settings", SETTINGS)
    return compact.compact(spark, options, settings, **kwargs)


def cli_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_store_arguments(parser)
    compact.add_arguments(parser)
    return parser.parse_args(list(argv))


def object_files(store_dir: Path) -> set[str]:
    return object_keys(store_dir / "objects")


# -- tests ------------------------------------------------------------------------------------


async def test_compaction_keeps_every_message_and_drops_deleted_ones(
    spark: Any, agent: AgentProcess, options: StoreOptions, store_dir: Path
) -> None:
    async with client(agent) as js:
        expected = await add_streams(js, STREAMS)
        await publish_rounds(js, expected, 30)
        deleted: dict[str, set[int]] = {name: set() for name in STREAMS}
        # Deletes inside the range (tombstones), at the head, and purges.
        for seq in (3, 4, 10, 17, 29):
            await js.delete_msg("S01", seq)
            deleted["S01"].add(seq)
        await js.delete_msg("S02", 1)
        deleted["S02"].add(1)
        await js.purge_stream("S03", seq=12)  # everything below 12
        deleted["S03"] |= set(range(1, 12))
        await js.purge_stream("S04")
        deleted["S04"] |= set(range(1, 31))
        await js.delete_msg("S05", 30)  # the last one
        deleted["S05"].add(30)
        before_states = await stream_states(js, STREAMS)
        before_objects = await referenced(options, STREAMS)
        files_before = object_files(store_dir)
        assert len(before_objects) >= 20, "expected many small L0 objects"

        summary = await asyncio.to_thread(run_compact, spark, options, report=True)

        assert summary.ok and summary.chunks_failed == 0 and summary.chunks_corrupt == 0
        assert summary.chunks_swapped == summary.chunks_planned >= len(STREAMS) - 1
        assert summary.messages_written == sum(
            len(m) - len(deleted[n]) for n, m in expected.items()
        )
        after_objects = await referenced(options, STREAMS)
        assert len(after_objects) < len(before_objects)
        assert all(level_of(o) == 1 for o in after_objects), after_objects
        assert (summary.objects_before, summary.objects_after) == (
            len(before_objects),
            len(after_objects),
        )
        # Invariant 3: nothing deleted or overwritten, only new objects added.
        files_after = object_files(store_dir)
        assert files_before < files_after
        assert summary.report_before is not None and summary.report_after is not None
        assert summary.report_after.messages == summary.report_before.messages
        assert summary.report_after.gets < summary.report_before.gets
        assert summary.report_after.gets_per_mb < summary.report_before.gets_per_mb

        # Views reloaded (layout bumped); the agent answers as before, message by message.
        assert await stream_states(js, STREAMS) == before_states
        snaps = await snapshots(options, STREAMS)
        assert all(s.state.layout >= 1 for n, s in snaps.items() if n != "S04")
        await check_reads(js, expected, deleted)
        await check_fetch(js, expected, deleted)
        # Messages compaction left out stay deleted, the last one (S05's 30) included.
        for name, seq in (("S01", 10), ("S05", 30), ("S03", 5)):
            with pytest.raises(APIError) as err:
                await js.delete_msg(name, seq)
            assert err.value.err_code in (10043, 10057), err.value  # not an internal error
        info = await js.stream_info("S05")
        assert (info.state.last_seq, info.state.num_deleted) == (30, 1)

        # The streams go on: publish, delete and purge over compacted entries.
        await publish_rounds(js, expected, 3, tag="n")
        await js.delete_msg("S06", 5)
        deleted["S06"].add(5)
        await js.purge_stream("S07", seq=20)
        deleted["S07"] |= set(range(1, 20))
        await check_reads(js, expected, deleted)
        await check_fetch(js, {n: expected[n] for n in ("S01", "S06", "S07")}, deleted)

        # A second run finds only the new L0 entries, and leaves full L1 objects alone.
        again = await asyncio.to_thread(run_compact, spark, options)
        assert again.ok
        assert all(level_of(o) >= 1 for o in await referenced(options, STREAMS))
        await check_reads(js, expected, deleted)


async def test_small_compacted_objects_merge_into_l2(
    spark: Any, agent: AgentProcess, options: StoreOptions
) -> None:
    names = STREAMS[:4]
    async with client(agent) as js:
        expected = await add_streams(js, names)
        await publish_rounds(js, expected, 24)
        await asyncio.to_thread(run_compact, spark, options)
        l1 = await referenced(options, names)
        assert {level_of(o) for o in l1} == {1}
        assert len(l1) > len(names), "expected several L1 objects per stream"
        await publish_rounds(js, expected, 6, tag="late")
        await js.delete_msg("S01", 2)

        # A larger target: the L1 objects are now small (< target/4) and merge, with the new
        # L0 entries, into one L2 object per stream.
        bigger = replace(SETTINGS, target_bytes=512 * 1024, entry_bytes=4096)
        summary = await asyncio.to_thread(run_compact, spark, options, settings=bigger)
        assert summary.ok and summary.chunks_swapped == len(names)
        after = await referenced(options, names)
        assert {level_of(o) for o in after} == {2}
        assert len(after) == len(names)
        await check_reads(js, expected, {"S01": {2}})
        await check_fetch(js, expected, {"S01": {2}})

        # Nothing small is left to merge: a third run rewrites nothing.
        third = await asyncio.to_thread(run_compact, spark, options, settings=bigger)
        assert third.chunks_planned == 0 and third.objects_written == 0


async def test_compressed_streams_stay_compressed_through_compaction(
    spark: Any, agent: AgentProcess, options: StoreOptions, store_dir: Path
) -> None:
    """Streams with compression s2 are compacted into compressed sections (one per index entry,
    each read whole); a stream switched to s2 by an update gets its old plain sections
    compressed by compaction; a plain stream stays plain. Every message reads back."""
    zipped, plain, switched = ["Z1", "Z2"], "P1", "W1"
    names = [*zipped, plain, switched]
    async with client(agent) as js:
        for name in names:
            s2 = name in zipped
            await js.add_stream(
                name=name,
                subjects=[f"{name.lower()}.>"],
                compression=StoreCompression.S2 if s2 else StoreCompression.NONE,
            )
        expected: Expected = {name: {} for name in names}
        for r in range(20):
            sent = [(name, text_message(name, r)) for name in names]
            acks = await asyncio.gather(
                *(js.publish(m.subject, m.data, headers=m.headers) for _, m in sent)
            )
            for (name, m), ack in zip(sent, acks, strict=True):
                expected[name][ack.seq] = m
        await js.delete_msg("Z1", 4)
        info = await js.update_stream(
            name=switched, subjects=[f"{switched.lower()}.>"], compression=StoreCompression.S2
        )
        assert info.config.compression == StoreCompression.S2
        before = await stream_states(js, names)
        snaps = await snapshots(options, names)
        assert {r.entry.codec for n in zipped for r in snaps[n].entries} == {CODEC_ZSTD}
        assert {r.entry.codec for n in (plain, switched) for r in snaps[n].entries} == {CODEC_NONE}

        summary = await asyncio.to_thread(run_compact, spark, options)
        assert summary.ok and summary.chunks_corrupt == 0 and summary.chunks_failed == 0

        snaps = await snapshots(options, names)
        for name in names:
            codec = CODEC_NONE if name == plain else CODEC_ZSTD
            entries = [r.entry for r in snaps[name].entries]
            assert {level_of(e.obj) for e in entries} == {1}, name
            assert {e.codec for e in entries} == {codec}, name
            for obj in {e.obj for e in entries}:
                sections = parse_object(object_bytes(store_dir / "objects", obj))
                mine = [e for e in entries if e.obj == obj]
                # A section per entry, exactly where the entry says, its directory after it.
                assert all(isinstance(e, SectionEntry) for e in mine)
                assert [(s.offset, s.length, s.codec) for s in sections] == [
                    (e.offset, e.length, codec) for e in mine
                ]
                assert [(s.index_offset, s.index_length) for s in sections] == [
                    (e.dir_offset, e.dir_length)
                    for e in mine  # type: ignore[union-attr]
                ]
                assert [s.records_length for s in sections] == [
                    e.plain_length  # type: ignore[union-attr]
                    for e in mine
                ]
        # The same records, stored in a fraction of the plain stream's bytes.
        stored = {n: sum(r.entry.length for r in snaps[n].entries) for n in names}
        assert stored["Z2"] * 3 < stored[plain], stored

        assert await stream_states(js, names) == before
        deleted = {"Z1": {4}}
        await check_reads(js, expected, deleted)
        await check_fetch(js, expected, deleted)

        # Compacting compacted compressed objects again (L1 -> L2) decodes and re-encodes them.
        await publish_rounds(js, {n: expected[n] for n in zipped}, 2, tag="late")
        bigger = replace(SETTINGS, target_bytes=512 * 1024, entry_bytes=4096)
        again = await asyncio.to_thread(run_compact, spark, options, settings=bigger)
        assert again.ok and again.chunks_swapped >= len(zipped)
        snaps = await snapshots(options, zipped)
        for name in zipped:
            assert {(level_of(r.entry.obj), r.entry.codec) for r in snaps[name].entries} == {
                (2, CODEC_ZSTD)
            }
        await check_reads(js, {n: expected[n] for n in zipped}, deleted)


def text_message(name: str, r: int) -> Sent:
    """A compressible message (JSON-like text), with headers on some."""
    data = (b'{"stream": "%s", "round": %d, "status": "ok"} ' % (name.encode(), r)) * (r % 9 + 2)
    headers = {"Round": str(r)} if r % 3 == 0 else None
    return Sent(f"{name.lower()}.{r % 2}", data, headers)


class BumpFirstTxn(Forwarding):
    """A metadata store whose first swap loses a race: just before it, an agent "commits"."""

    def __init__(self, inner: MetadataStore, state_key: str) -> None:
        super().__init__(inner)
        self.state_key = state_key
        self.bumped = False

    async def txn(
        self, compares: list[Compare], ops: list[Op], *, durable: bool = True
    ) -> TxnResult:
        if not self.bumped:
            self.bumped = True
            item = await self.inner.get(self.state_key)
            assert item is not None
            await self.inner.txn([], [Put(self.state_key, item.value)])
        return await self.inner.txn(compares, ops, durable=durable)


async def test_changes_between_snapshot_and_swap_stay(
    spark: Any, agent: AgentProcess, options: StoreOptions
) -> None:
    names = STREAMS[:6]
    async with client(agent) as js:
        expected = await add_streams(js, names)
        await publish_rounds(js, expected, 12, per=2)
        # Two messages per stream per flush: S02's first entry holds seqs 1 and 2.
        first = (await snapshots(options, ["S02"]))["S02"].entries[0].section()
        assert (first.first, first.last) == (1, 2)
        plan = await compact.plan_compaction(options, SETTINGS)
        results = await asyncio.to_thread(compact.run_chunks, spark, options, SETTINGS, plan.chunks)
        assert all(r.obj and not r.error and not r.corrupt for r in results)

        # Meanwhile, the agents go on (between the snapshot and the swap):
        deleted: dict[str, set[int]] = {name: set() for name in names}
        await js.purge_stream("S00")  # every entry deleted
        deleted["S00"] |= set(range(1, 25))
        await js.purge_stream("S01", seq=8)  # entries below 8 deleted
        deleted["S01"] |= set(range(1, 8))
        await js.delete_msg("S02", 5)  # a tombstone inside the chunk
        await js.delete_msg("S02", 1)  # the head moves; the entry of 1 and 2 stays
        deleted["S02"] |= {1, 5}
        await publish_rounds(js, {"S03": expected["S03"]}, 2, tag="x")  # the state moves
        await js.delete_stream("S04")
        await js.add_stream(name="S04", subjects=["s04.>"])  # same name, another stream
        expected["S04"] = {}

        swaps = await compact.swap_all(options, plan.chunks, results)
        outcome: dict[str, set[SwapOutcome]] = {}
        for chunk, swap in zip(plan.chunks, swaps, strict=True):
            assert swap is not None
            outcome.setdefault(chunk.stream, set()).add(swap.outcome)
        assert outcome["S00"] == {SwapOutcome.CHANGED}
        assert SwapOutcome.CHANGED in outcome["S01"]
        assert outcome["S02"] == {SwapOutcome.SWAPPED}
        assert outcome["S03"] == {SwapOutcome.SWAPPED}
        assert outcome["S04"] == {SwapOutcome.GONE}
        assert outcome["S05"] == {SwapOutcome.SWAPPED}

        await check_reads(js, expected, deleted)
        await check_fetch(js, expected, deleted)
        info = await js.stream_info("S02")
        assert (info.state.messages, info.state.first_seq, info.state.num_deleted) == (22, 2, 1)

        # Nothing came back: S00 stays empty, S04 is a new empty stream.
        assert (await js.stream_info("S00")).state.messages == 0
        assert (await js.stream_info("S04")).state.messages == 0

        # A swap that loses the race to an agent's commit (the state moved, the entries did
        # not) reads the state again and retries.
        await publish_rounds(js, {"S05": expected["S05"]}, 1, tag="y")
        plan = await compact.plan_compaction(options, SETTINGS, ["S05"])
        assert plan.chunks
        chunk = plan.chunks[0]
        [result] = await asyncio.to_thread(compact.run_chunks, spark, options, SETTINGS, [chunk])
        keys = StreamKeys(options.group, "S05")
        meta = BumpFirstTxn(options.open_metadata(), keys.state)
        try:
            before = await meta.get(keys.state)
            swap = await swap_chunk(meta, chunk, result)
            after = await meta.get(keys.state)
        finally:
            await meta.close()
        assert (swap.outcome, swap.attempts) == (SwapOutcome.SWAPPED, 2)
        assert before is not None and after is not None
        old_state, new_state = decode_state(before.value), decode_state(after.value)
        assert new_state == msgspec.structs.replace(old_state, layout=old_state.layout + 1)
        await check_reads(js, {"S05": expected["S05"]})


async def test_consumer_sees_every_message_once_during_compaction(
    spark: Any, agent: AgentProcess, options: StoreOptions
) -> None:
    names = STREAMS[:8]
    async with client(agent) as js:
        expected = await add_streams(js, names)
        await publish_rounds(js, expected, 25)
        sub = await js.pull_subscribe(
            "s00.>",
            durable="reader",
            stream="S00",
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=60),
        )
        got: list[tuple[int, bytes]] = []
        compaction = asyncio.create_task(
            asyncio.to_thread(
                run_compact, spark, options, settings=replace(SETTINGS, target_bytes=2048)
            )
        )
        published = 0
        while not compaction.done():
            # Publish and read all the time: the state moves under the swaps.
            if published < 20:
                await publish_rounds(js, expected, 1, tag=f"p{published}-")
                published += 1
            try:
                for msg in await sub.fetch(3, timeout=0.5):
                    got.append((msg.metadata.sequence.stream, msg.data))
                    await msg.ack()
            except TimeoutError:  # nats-py raises its own and asyncio's
                pass
            seq = 1 + len(got) % len(expected["S01"])
            assert (await js.get_msg("S01", seq)).data == expected["S01"][seq].data
        summary = await compaction
        assert summary.ok and summary.chunks_swapped > 0
        # Reads and publishes went on while compaction ran.
        assert got and published > 0
        want = [(s, m.data) for s, m in sorted(expected["S00"].items())]
        while len(got) < len(want):
            for msg in await sub.fetch(len(want) - len(got), timeout=3):
                got.append((msg.metadata.sequence.stream, msg.data))
                await msg.ack()
        assert got == want  # every sequence once, in order, no gap
        await check_reads(js, expected)


async def test_corrupt_object_is_reported_and_left_alone(
    spark: Any,
    agent: AgentProcess,
    options: StoreOptions,
    store_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    names = STREAMS[:5]
    async with client(agent) as js:
        expected = await add_streams(js, names)
        await publish_rounds(js, expected, 20)
        # Flip one byte inside S02's section of the object holding its 10th message.
        snap = (await snapshots(options, ["S02"]))["S02"]
        victim = next(r for r in snap.entries if r.section().holds(10))
        data = object_bytes(store_dir / "objects", victim.entry.obj)
        section = next(s for s in parse_object(data) if s.stream == "S02")
        damage_object(
            store_dir / "objects", victim.entry.obj, section.offset + section.length - 3, 0x55
        )
        held = victim.section()
        lost = set(range(held.first, held.last + 1))

        code = await asyncio.to_thread(
            compact.main,
            cli_args("--min-age", "0", "--target-size", "3KiB", "--entry-size", "1KiB"),
            options,
            spark=spark,
        )
        out = capsys.readouterr()
        assert code == 1
        assert victim.entry.obj in out.err and "checksum mismatch" in out.err
        assert "1 corrupt sections" in out.err
        # The corrupt entry is still in the index, pointing at the same object, still there.
        snap = (await snapshots(options, ["S02"]))["S02"]
        assert any(r.key == victim.key and r.entry == victim.entry for r in snap.entries)
        assert victim.entry.obj in object_keys(store_dir / "objects")
        # The rest of S02 was compacted around it, the other streams entirely.
        levels = {level_of(r.entry.obj) for r in snap.entries}
        assert levels == {0, 1}
        for name in names:
            if name != "S02":
                assert {level_of(o) for o in await referenced(options, [name])} == {1}
        healthy = {n: m for n, m in expected.items() if n != "S02"}
        healthy["S02"] = {s: m for s, m in expected["S02"].items() if s not in lost}
        await check_reads(js, healthy)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = start_s3_server()
    yield server
    server.stop()


async def test_compaction_on_s3(
    spark: Any, s3: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = f"c-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(bucket)
    url = f"s3://{bucket}/pfx"
    store_dir = tmp_path / "store"
    options = StoreOptions(
        objects=url,
        metadata="sqlite:///" + str((store_dir / "meta.db").resolve()).lstrip("/"),
        s3_endpoint=s3.endpoint,
        s3_region=s3.region,
        s3_access_key_id=s3.access_key,
        s3_secret_access_key=s3.secret_key,
    )
    names = STREAMS[:6]
    with running_agent(
        store_dir, "--objects", url, "--s3-endpoint", s3.endpoint, "--linger", "20ms", env=s3.env()
    ) as agent:
        async with client(agent) as js:
            expected = await add_streams(js, names)
            await publish_rounds(js, expected, 15)
            await js.delete_msg("S03", 7)
            before = await referenced(options, names)
            summary = await asyncio.to_thread(run_compact, spark, options, report=True)
            assert summary.ok and summary.chunks_swapped == summary.chunks_planned > 0
            after = await referenced(options, names)
            assert len(after) < len(before)
            assert all(level_of(o) == 1 for o in after)
            await check_reads(js, expected, {"S03": {7}})
            await check_fetch(js, expected, {"S03": {7}})
    store = ObjectStore.from_url(url, **s3.store_options())
    keys = {info.key for info in await store.list()}
    assert before | after <= keys  # nothing deleted
    assert not (store_dir / "objects").exists()

    # A bucket that is not there: named, and nothing written anywhere.
    capsys.readouterr()
    assert (
        await main_(spark, replace(options, objects="s3://no-such-bucket"), "--min-age", "0") == 1
    )
    err = capsys.readouterr().err
    assert "object store s3://no-such-bucket cannot be read" in err
    assert {info.key for info in await store.list()} == keys


async def main_(spark: Any, options: StoreOptions, *argv: str) -> int:
    """The job's entry point, as `infinistream pipeline compact ARGV` calls it."""
    return await asyncio.to_thread(compact.main, cli_args(*argv), options, spark=spark)


async def test_bad_input_is_named(
    spark: Any,
    agent: AgentProcess,
    options: StoreOptions,
    store_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async with client(agent) as js:
        expected = await add_streams(js, STREAMS[:2])
        await publish_rounds(js, expected, 3)
    files = object_files(store_dir)

    nowhere = tmp_path / "nowhere"
    missing = StoreOptions(
        objects=(nowhere / "objects").as_uri(),
        metadata="sqlite:///" + str(nowhere / "meta.db").lstrip("/"),
    )
    assert await main_(spark, missing, "--min-age", "0") == 1
    err = capsys.readouterr().err
    assert f"object store {nowhere.as_uri()}/objects does not exist" in err
    assert not nowhere.exists()
    missing = replace(missing, objects=options.objects)
    assert await main_(spark, missing, "--min-age", "0") == 1
    assert f"metadata store {missing.metadata} does not exist" in capsys.readouterr().err
    assert not nowhere.exists()

    assert await main_(spark, options, "--stream", "NOPE") == 1
    assert "stream 'NOPE' does not exist in group 'default'" in capsys.readouterr().err

    with pytest.raises(SystemExit) as exc:
        cli_args("--target-size", "lots")
    assert exc.value.code == 2
    assert "invalid size 'lots'" in capsys.readouterr().err
    assert await main_(spark, options, "--target-size", "1KiB", "--entry-size", "4KiB") == 2

    # A dry run prints the plan and writes nothing.
    assert await main_(spark, options, "--min-age", "0", "--dry-run") == 0
    assert "would rewrite stream 'S00'" in capsys.readouterr().out
    # Nothing old enough: nothing to do.
    assert await main_(spark, options, "--min-age", "1h") == 0
    assert "planned 0 chunks" in capsys.readouterr().out
    assert object_files(store_dir) == files

    # The real command, with no Java to start Spark on.
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYSPARK_PYTHON")}
    env["PATH"] = str(tmp_path)
    command = ["pipeline", "compact", "-sd", str(store_dir), "--min-age", "0"]
    proc = subprocess.run(
        [sys.executable, "-m", "infinistream", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Spark needs Java" in proc.stderr
    assert object_files(store_dir) == files


async def test_a_chunk_task_releases_the_files_it_read(
    agent: AgentProcess, options: StoreOptions, store_dir: Path
) -> None:
    # An executor's worker process runs task after task: a task that kept the local store's
    # pack files open ran a 100-million-message compaction out of file descriptors.
    names = STREAMS[:3]
    async with client(agent) as js:
        await publish_rounds(js, await add_streams(js, names), 12)
    plan = await compact.plan_compaction(options, SETTINGS, names)
    assert len(plan.chunks) >= len(names)

    store = os.path.realpath(store_dir) + os.sep

    def store_files_open() -> list[str]:
        """The files of the store this process has open, by name: a count of all descriptors
        also counts the others of the process, and one of them (an earlier agent's pipe) may
        close meanwhile."""
        names = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):  # closed since the listing
                target = os.readlink(f"/proc/self/fd/{fd}")
                if target.startswith(store):
                    names.append(target)
        return sorted(names)

    before = store_files_open()
    for chunk in plan.chunks:
        result = await asyncio.to_thread(
            compact_chunk, chunk, options, SETTINGS.entry_bytes, SETTINGS.entry_records
        )
        assert not result.error and result.bytes_read > 0
        assert store_files_open() == before
        # Its object is a file of its own, not a pack of one object.
        assert (store_dir / "objects" / result.obj).is_file()
