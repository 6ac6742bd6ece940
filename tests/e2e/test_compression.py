"""Streams with `compression: s2`, against an agent and nats-server.

Config and info say "s2" as nats-server's do, an update may turn compression on and off, and
every way of reading a message (API get, direct get, pull consumers) returns what was
published, before and after a kill -9 and restart (when the agent reads from objects again,
not from what it cached while writing). nats.js Key-Value and Object Store buckets created
with `compression: true` work unmodified (tests/js/compressed_client.mjs). The last test looks
inside the agent's object files: the sections of a compressed stream are stored compressed.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, StoreCompression

from infinistream.storage import CODEC_NONE, CODEC_ZSTD, parse_object
from support.agentproc import AgentProcess
from support.jsapi import api
from support.jsclient import run_js
from support.servers import Server
from support.storeinspect import stored_objects

# What nats-server 2.15.1 answers to {"name": "Z", "subjects": ["z.>"], "compression": "s2"}
# (its `metadata`, which the agent does not add, left out).
CREATED = {
    "name": "Z",
    "subjects": ["z.>"],
    "retention": "limits",
    "max_consumers": -1,
    "max_msgs": -1,
    "max_bytes": -1,
    "max_age": 0,
    "max_msgs_per_subject": -1,
    "max_msg_size": -1,
    "discard": "old",
    "storage": "file",
    "num_replicas": 1,
    "duplicate_window": 120_000_000_000,
    "compression": "s2",
    "allow_direct": False,
    "mirror_direct": False,
    "sealed": False,
    "deny_delete": False,
    "deny_purge": False,
    "allow_rollup_hdrs": False,
    "consumer_limits": {},
    "allow_msg_ttl": False,
}


def config_of(resp: dict[str, Any]) -> dict[str, Any]:
    assert "error" not in resp, resp
    config = dict(resp["config"])
    config.pop("metadata", None)
    return config


def body(i: int, repeat: int = 3) -> bytes:
    """A compressible payload (JSON-like text), different for each message."""
    return b'{"order": %d, "status": "accepted", "region": "eu-west"} ' % i * repeat


async def fetch_all(js: JetStreamContext, stream: str, subject: str, n: int) -> list[Any]:
    durable = f"all{uuid.uuid4().hex[:8]}"
    sub = await js.pull_subscribe(
        subject, durable=durable, stream=stream, config=ConsumerConfig(ack_policy=AckPolicy.NONE)
    )
    got: list[Any] = []
    while len(got) < n:
        try:
            got += await sub.fetch(min(100, n - len(got)), timeout=5)
        except TimeoutError:
            break
    await sub.unsubscribe()
    return got


async def test_create_info_and_list_say_s2_as_nats_server_does(server_nc: Client) -> None:
    resp = await api(
        server_nc, "STREAM.CREATE.Z", {"name": "Z", "subjects": ["z.>"], "compression": "s2"}
    )
    assert config_of(resp) == CREATED
    assert config_of(await api(server_nc, "STREAM.INFO.Z")) == CREATED
    listed = await api(server_nc, "STREAM.LIST", {})
    assert [config_of(s)["compression"] for s in listed["streams"]] == ["s2"]
    js = server_nc.jetstream(timeout=10)
    assert (await js.stream_info("Z")).config.compression == StoreCompression.S2
    # Creating it again with the same config is no change; with none it is another config.
    again = await api(
        server_nc, "STREAM.CREATE.Z", {"name": "Z", "subjects": ["z.>"], "compression": "s2"}
    )
    assert config_of(again) == CREATED
    other = await api(
        server_nc, "STREAM.CREATE.Z", {"name": "Z", "subjects": ["z.>"], "compression": "none"}
    )
    assert other["error"]["err_code"] == 10058


async def test_an_update_turns_compression_on_and_off(server_nc: Client) -> None:
    js = server_nc.jetstream(timeout=10)
    await js.add_stream(name="U", subjects=["u.>"])
    sent: list[bytes] = []
    for step, compression in enumerate(["s2", "none", "s2"]):
        for i in range(5):
            data = body(step * 10 + i)
            await js.publish(f"u.{i % 2}", data)
            sent.append(data)
        resp = await api(
            server_nc,
            "STREAM.UPDATE.U",
            {"name": "U", "subjects": ["u.>"], "compression": compression},
        )
        assert config_of(resp)["compression"] == compression
    for i in range(5):
        await js.publish("u.x", body(100 + i))
        sent.append(body(100 + i))
    # Messages stored under each setting read back the same.
    assert [(await js.get_msg("U", seq)).data for seq in range(1, 21)] == sent
    assert [m.data for m in await fetch_all(js, "U", "u.>", 20)] == sent
    info = await js.stream_info("U")
    assert (info.state.messages, info.config.compression) == (20, StoreCompression.S2)


async def test_publish_fetch_get_and_direct_get_on_a_compressed_stream(server: Server) -> None:
    nc = await nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(
            name="Z", subjects=["z.>"], compression=StoreCompression.S2, allow_direct=True
        )
        subjects = [f"z.{i % 7}" for i in range(300)]
        headers = [{"Order": str(i)} if i % 5 == 0 else None for i in range(300)]
        # Large ones too: many kilobytes each, compressible.
        payloads = [body(i, 2000 if i % 50 == 3 else 3) for i in range(300)]
        acks = await asyncio.gather(
            *(
                js.publish(s, p, headers=h)
                for s, p, h in zip(subjects, payloads, headers, strict=True)
            )
        )
        assert sorted(a.seq for a in acks) == list(range(1, 301))
        by_seq = {a.seq: i for i, a in enumerate(acks)}

        async def check_reads() -> None:
            for seq in (1, 4, 150, 254, 300):
                i = by_seq[seq]
                for direct in (False, True):
                    msg = await js.get_msg("Z", seq, direct=direct)
                    assert (msg.seq, msg.subject, msg.data) == (seq, subjects[i], payloads[i])
                    assert {k: v for k, v in (msg.headers or {}).items() if k == "Order"} == (
                        headers[i] or {}
                    )
            for subject in ("z.0", "z.6"):
                last = max(seq for seq, i in by_seq.items() if subjects[i] == subject)
                for direct in (False, True):
                    msg = await js.get_last_msg("Z", subject, direct=direct)
                    assert (msg.seq, msg.data) == (last, payloads[by_seq[last]])
            got = await fetch_all(js, "Z", "z.>", 300)
            assert [m.metadata.sequence.stream for m in got] == list(range(1, 301))
            assert [m.data for m in got] == [payloads[by_seq[s]] for s in range(1, 301)]
            assert [m.headers for m in got] == [headers[by_seq[s]] for s in range(1, 301)]

        await check_reads()
        # kill -9: an agent reads the messages back from its objects with an empty cache.
        server.restart()
        for _ in range(100):  # until the client has reconnected
            try:
                await js.stream_info("Z")
                break
            except (TimeoutError, nats.errors.Error):
                await asyncio.sleep(0.2)
        await check_reads()
        info = await js.stream_info("Z")
        assert (info.state.messages, info.state.last_seq) == (300, 300)
        assert info.config.compression == StoreCompression.S2
    finally:
        await nc.close()


async def test_nats_js_key_value_and_object_store_with_compression(
    server: Server, server_nc: Client
) -> None:
    run = await run_js("compressed_client.mjs", server.url, server_log=server.log)
    assert run.steps == [
        "connect",
        "kv bucket with compression",
        "kv put, get, keys and history",
        "object store put and get",
    ]
    # nats-py reads what nats.js left.
    js = server_nc.jetstream(timeout=10)
    assert (await js.stream_info("KV_ZKV")).config.compression == StoreCompression.S2
    kv = await js.key_value("ZKV")
    assert (await kv.get("users.7")).value == b"changed"
    obj = await js.object_store("ZOBJ")
    assert (await obj.get("text.txt")).data == b"a compressible line of text\n" * 100_000


async def test_compressed_sections_are_smaller_on_disk(
    js: JetStreamContext, agent: AgentProcess, store_dir: Path
) -> None:
    """The same messages to a compressed stream and a plain one, in the same flushes: in the
    object files, the compressed stream's sections are a fraction of the plain one's, and its
    payloads do not appear as they were sent."""
    await js.add_stream(name="Z", subjects=["z.>"], compression=StoreCompression.S2)
    await js.add_stream(name="P", subjects=["p.>"])
    for start in range(0, 400, 100):
        await asyncio.gather(
            *(js.publish(f"{s}.{i % 3}", body(i)) for i in range(start, start + 100) for s in "zp")
        )
    stored = {"Z": 0, "P": 0}
    plain = {"Z": 0, "P": 0}
    objects = stored_objects(store_dir / "objects")
    assert objects
    for data in objects.values():
        for section in parse_object(data):
            stored[section.stream] += section.length
            plain[section.stream] += section.records_length
            raw = data[section.offset : section.end]
            if section.stream == "Z":
                assert section.codec == CODEC_ZSTD
                assert body(7) not in raw and b'"status": "accepted"' not in raw
            else:
                assert section.codec == CODEC_NONE
    assert plain["Z"] == plain["P"] == stored["P"]  # the same records
    assert stored["Z"] * 5 < stored["P"], stored
    # ... and they read back.
    assert (await js.get_msg("Z", 8)).data == body(7)
