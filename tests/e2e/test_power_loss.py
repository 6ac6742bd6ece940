"""Invariant 1 across a power loss: a flush's metadata commit is synced by its pack alone, so a
power loss may take it from the SQLite WAL; the agent makes it again from the pack's commit
record before it serves, and nothing acknowledged is lost.

The loss is simulated at its worst: the database and its WAL go back to their bytes as of the
last sync of the WAL (the stream's creation, a durable commit), so every flush commit since is
gone from them. The packs stay as written: every flush here was acknowledged, so each pack was
synced after its last entry (kill -9 first, so that nothing is written afterwards).

An agent that starts retires the records its database is durably past: the next recovery reads
only the records after them, and still finds every flush it needs. A pipeline job that opens the
stores before any agent has started makes the lost commits again first, as the agent would.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import nats
import pytest
from nats.js import JetStreamContext

from infinistream.metadata.commitrecord import decode_record
from infinistream.storage.packcommits import commit_records
from support.agentproc import running_agent

_DB = "meta.db"


def _revision(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT revision FROM meta WHERE id = 1").fetchone()[0])
    finally:
        conn.close()


async def test_acknowledged_publishes_survive_losing_the_unsynced_wal(store_dir: Path) -> None:
    saved = store_dir.parent / "synced"
    saved.mkdir()
    acked: dict[int, bytes] = {}
    with running_agent(store_dir, "--linger", "1ms") as victim:
        nc = await nats.connect(victim.url, allow_reconnect=False, max_reconnect_attempts=0)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="PL", subjects=["pl.>"])
        # The stream's creation synced the WAL: this is what a power loss keeps of it.
        for name in (_DB, _DB + "-wal"):
            shutil.copy2(store_dir / name, saved / name)
        for i in range(25):
            payload = b"acked-%d" % i
            ack = await js.publish(f"pl.{i % 4}", payload)
            acked[ack.seq] = payload
        victim.kill()
        await nc.close()

    for name in (_DB, _DB + "-wal"):
        shutil.copy2(saved / name, store_dir / name)
    (store_dir / (_DB + "-shm")).unlink(missing_ok=True)
    # What the loss took: the flush commits are in the packs' records alone.
    lost = _revision(store_dir / _DB)
    records = [r for r in map(decode_record, commit_records(str(store_dir))) if r is not None]
    assert len([r for r in records if r.revision > lost]) >= len(acked)

    with running_agent(store_dir, "--linger", "1ms") as survivor:
        nc = await nats.connect(survivor.url)
        try:
            js = nc.jetstream(timeout=10)
            info = await js.stream_info("PL")
            assert info.state.messages == len(acked)
            assert info.state.last_seq == max(acked) == len(acked)
            for seq, payload in sorted(acked.items()):
                msg = await js.get_msg("PL", seq)
                assert msg.data == payload, f"seq {seq}"
            # The store carries on where it was: the next publish takes the next sequence.
            ack = await js.publish("pl.0", b"after")
            assert ack.seq == len(acked) + 1
        finally:
            await nc.close()


def _save(store_dir: Path, saved: Path) -> None:
    saved.mkdir(exist_ok=True)
    for name in (_DB, _DB + "-wal"):
        shutil.copy2(store_dir / name, saved / name)


def _lose_unsynced(store_dir: Path, saved: Path) -> int:
    """Put the database back as `saved` kept it; the revision it is at."""
    for name in (_DB, _DB + "-wal"):
        shutil.copy2(saved / name, store_dir / name)
    (store_dir / (_DB + "-shm")).unlink(missing_ok=True)
    return _revision(store_dir / _DB)


async def _publish(url: str, subject: str, count: int, acked: dict[int, bytes]) -> None:
    nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        js = nc.jetstream(timeout=10)
        if not acked:
            await js.add_stream(name="PL", subjects=["pl.>"])
        for i in range(count):
            payload = b"%s-%d" % (subject.encode(), i)
            acked[(await js.publish(subject, payload)).seq] = payload
    finally:
        await nc.close()


async def test_records_retired_at_start_are_passed_over_by_the_next_recovery(
    store_dir: Path,
) -> None:
    saved = store_dir.parent / "synced"
    acked: dict[int, bytes] = {}
    with running_agent(store_dir, "--linger", "1ms") as first:
        await _publish(first.url, "pl.before", 10, acked)
        first.kill()
    before = [r for r in map(decode_record, commit_records(str(store_dir))) if r is not None]
    assert len(before) >= 10

    with running_agent(store_dir, "--linger", "1ms") as second:
        # Its start synced the database past every record there was, and retired them all.
        assert list(commit_records(str(store_dir))) == []
        _save(store_dir, saved)
        await _publish(second.url, "pl.after", 15, acked)
        second.kill()

    lost = _lose_unsynced(store_dir, saved)
    assert lost >= max(r.revision for r in before)
    records = [r for r in map(decode_record, commit_records(str(store_dir))) if r is not None]
    assert len(records) >= 15 and min(r.revision for r in records) > lost

    with running_agent(store_dir, "--linger", "1ms") as survivor:
        nc = await nats.connect(survivor.url)
        try:
            js = nc.jetstream(timeout=10)
            await _holds_exactly(js, acked)
        finally:
            await nc.close()
    assert list(commit_records(str(store_dir))) == []


# The job starts a Spark JVM of its own: minutes on a busy machine.
@pytest.mark.timeout(900)
async def test_a_job_before_any_agent_replays_what_the_wal_lost(store_dir: Path) -> None:
    saved = store_dir.parent / "synced"
    acked: dict[int, bytes] = {}
    with running_agent(store_dir, "--linger", "1ms") as victim:
        nc = await nats.connect(victim.url, allow_reconnect=False, max_reconnect_attempts=0)
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="PL", subjects=["pl.>"])
        _save(store_dir, saved)
        for i in range(20):
            payload = b"lost-%d" % i
            acked[(await js.publish(f"pl.{i % 4}", payload)).seq] = payload
        victim.kill()
        await nc.close()

    lost = _lose_unsynced(store_dir, saved)
    records = [r for r in map(decode_record, commit_records(str(store_dir))) if r is not None]
    assert len([r for r in records if r.revision > lost]) >= len(acked)

    # The janitor first, before any agent: on the database as the loss left it, every lost
    # flush's object would look unreferenced, and with no grace period it would delete them.
    janitor = [sys.executable, "-m", "infinistream", "pipeline", "janitor"]
    args = ["-sd", str(store_dir), "--grace", "0s", "--master", "local[1]", "--partitions", "1"]
    job = subprocess.run([*janitor, *args], capture_output=True, text=True, timeout=600)
    assert job.returncode == 0, job.stderr
    # It made the lost commits again, in their revisions, before it read anything; and then
    # retired every record, the database being durably past them.
    assert _revision(store_dir / _DB) == max(r.revision for r in records)
    assert list(commit_records(str(store_dir))) == []

    with running_agent(store_dir, "--linger", "1ms") as survivor:
        nc = await nats.connect(survivor.url)
        try:
            js = nc.jetstream(timeout=10)
            await _holds_exactly(js, acked)
            ack = await js.publish("pl.0", b"after")
            assert ack.seq == len(acked) + 1
        finally:
            await nc.close()
    # The agent's commits went on from the revisions the replay restored.
    assert _revision(store_dir / _DB) > max(r.revision for r in records)


async def _holds_exactly(js: JetStreamContext, acked: dict[int, bytes]) -> None:
    """Stream PL holds every acked publish at its sequence, and nothing else."""
    info = await js.stream_info("PL")
    assert (info.state.messages, info.state.last_seq) == (len(acked), len(acked))
    for seq, payload in sorted(acked.items()):
        assert (await js.get_msg("PL", seq)).data == payload, f"seq {seq}"
