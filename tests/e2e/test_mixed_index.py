"""A store that mixes both index forms: sections written by an agent that still writes the
per-record index entries of earlier versions (`--index-format 1`, as during a rolling
upgrade), then sections with record directories by an agent of this version, served by a
fresh agent of this version (cold: nothing cached).

Every read a client can make comes back the same across the boundary: gets by sequence and
last by subject, stream info with its subjects, consumers from the start, by time and
filtered, KV history and watch, Object Store reads, purge by subject and deletes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StreamConfig

from support.agentproc import AgentProcess, running_agent
from support.storeinspect import index_forms

SUBJECTS = [f"m.{i}" for i in range(5)]


def _agent(store_dir: Path, index_format: int) -> Iterator[AgentProcess]:
    return running_agent(
        store_dir, "--linger", "20ms", "-m", "0", "--index-format", str(index_format)
    )


async def _publish_round(js: JetStreamContext, tag: str, n: int) -> list[tuple[str, bytes]]:
    sent = []
    for i in range(n):
        subject = SUBJECTS[i % len(SUBJECTS)]
        data = f"{tag}-{i}".encode()
        await js.publish(subject, data)
        sent.append((subject, data))
    return sent


async def _write_rounds(store_dir: Path) -> list[tuple[str, bytes]]:
    """Messages, a KV bucket and an object written half in each form."""
    sent: list[tuple[str, bytes]] = []
    for index_format, tag in ((1, "old"), (2, "new")):
        with _agent(store_dir, index_format) as agent:
            nc = await nats.connect(agent.url)
            try:
                js = nc.jetstream(timeout=10)
                if index_format == 1:
                    await js.add_stream(StreamConfig(name="S", subjects=["m.>"]))
                    kv = await js.create_key_value(bucket="CFG", history=10)
                    obs = await js.create_object_store(bucket="FILES")
                else:
                    kv = await js.key_value("CFG")
                    obs = await js.object_store("FILES")
                sent += await _publish_round(js, tag, 40)
                await kv.put("k", f"{tag}-1".encode())
                await kv.put("k", f"{tag}-2".encode())
                await obs.put(f"{tag}.bin", bytes(range(256)) * 200)
            finally:
                await nc.close()
    return sent


async def _state(nc: Client) -> dict[str, Any]:
    """Stream S's state, with its subjects, as STREAM.INFO sends it."""
    ask = json.dumps({"subjects_filter": ">"}).encode()
    answer = await nc.request("$JS.API.STREAM.INFO.S", ask, timeout=5)
    state: dict[str, Any] = json.loads(answer.data)["state"]
    return state


async def test_a_store_of_both_forms_serves_everything(store_dir: Path) -> None:
    sent = await _write_rounds(store_dir)
    forms = index_forms(store_dir / "meta.db", "S")
    assert "entry" in forms and "section" in forms, forms
    # The boundary: every entry of the first form comes before any of the second.
    assert forms == sorted(forms), forms

    with _agent(store_dir, 2) as agent:
        nc = await nats.connect(agent.url)
        try:
            js = nc.jetstream(timeout=10)
            # Every message by sequence, across both forms.
            for seq, (subject, data) in enumerate(sent, start=1):
                msg = await js.get_msg("S", seq)
                assert (msg.subject, msg.data) == (subject, data), seq
            # Last by subject: in the newer form for each subject.
            for subject in SUBJECTS:
                last = await js.get_last_msg("S", subject)
                want = max(i for i, (s, _) in enumerate(sent, start=1) if s == subject)
                assert last.seq == want
            # Stream info with its subjects (num_subjects and per-subject counts).
            state = await _state(nc)
            assert state["messages"] == len(sent)
            assert state["num_subjects"] == len(SUBJECTS)
            assert state["subjects"] == {s: len(sent) // len(SUBJECTS) for s in SUBJECTS}

            # A consumer from the start gets all of it in order; a filtered one its subject's.
            await js.add_consumer(
                "S", ConsumerConfig(durable_name="ALL", ack_policy=AckPolicy.EXPLICIT)
            )
            sub = await js.pull_subscribe_bind("ALL", "S")
            got = []
            while len(got) < len(sent):
                for m in await sub.fetch(25, timeout=5):
                    got.append((m.subject, m.data))
                    await m.ack()
            assert got == sent
            await js.add_consumer(
                "S",
                ConsumerConfig(
                    durable_name="ONE", filter_subject="m.3", ack_policy=AckPolicy.EXPLICIT
                ),
            )
            one = await js.pull_subscribe_bind("ONE", "S")
            mine = [m.data for m in await one.fetch(100, timeout=2)]
            assert mine == [d for s, d in sent if s == "m.3"]

            # By start time: from the first message of the newer form.
            first_new = await js.get_msg("S", 41)
            await js.add_consumer(
                "S",
                ConsumerConfig(
                    durable_name="LATER",
                    deliver_policy=DeliverPolicy.BY_START_TIME,
                    opt_start_time=first_new.time.isoformat().replace("+00:00", "Z"),
                    ack_policy=AckPolicy.EXPLICIT,
                ),
            )
            later = await js.pull_subscribe_bind("LATER", "S")
            assert (await later.fetch(1, timeout=5))[0].metadata.sequence.stream == 41

            # KV: the value, its history across both forms, a watch that starts with it.
            kv = await js.key_value("CFG")
            assert (await kv.get("k")).value == b"new-2"
            history = [e.value for e in await kv.history("k")]
            assert history == [b"old-1", b"old-2", b"new-1", b"new-2"]
            watcher = await kv.watchall()
            first = await watcher.updates(timeout=5)
            assert first is not None and first.value == b"new-2"
            await watcher.stop()

            # Object Store: an object of each form.
            obs = await js.object_store("FILES")
            for tag in ("old", "new"):
                assert (await obs.get(f"{tag}.bin")).data == bytes(range(256)) * 200

            # Delete one message of each form, purge one subject: the counts follow.
            await js.delete_msg("S", 2)
            await js.delete_msg("S", 42)
            await js.purge_stream("S", subject="m.0")
            state = await _state(nc)
            per = len(sent) // len(SUBJECTS)
            assert state["num_subjects"] == len(SUBJECTS) - 1
            assert state["subjects"] == {
                "m.1": per - 2,
                "m.2": per,
                "m.3": per,
                "m.4": per,
            }
            assert state["messages"] == len(sent) - per - 2
            answer = await nc.request(
                "$JS.API.STREAM.MSG.GET.S", json.dumps({"seq": 2}).encode(), timeout=5
            )
            assert json.loads(answer.data)["error"]["err_code"] == 10037
        finally:
            await nc.close()


@pytest.mark.parametrize("index_format", ["0", "3"])
def test_an_unknown_index_format_is_refused(store_dir: Path, index_format: str) -> None:
    agent = AgentProcess(["-p", "0", "-sd", str(store_dir), "--index-format", index_format])
    with pytest.raises(RuntimeError, match="index_format must be 1 or 2"):
        agent.start()
