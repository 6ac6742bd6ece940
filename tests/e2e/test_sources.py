"""Sources, against the agent and nats-server (the `server` fixture), with nats-py.

- A stream sources several streams, each message with the `Nats-Stream-Source` header nats-server
  writes, filtered or with its subject transformed, from a start sequence.
- Stream info lists each source.
- A KV bucket sourcing two buckets holds the keys of both.
"""

from __future__ import annotations

import asyncio
import json

import nats
from nats.js.api import StreamSource, SubjectTransform

from infinistream.jetstream.identity import short_hash
from support.origins import TIMEOUT, wait_messages
from support.servers import Server


async def test_sources_merge_streams_with_the_source_header(server: Server) -> None:
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="EU", subjects=["eu.>"])
        await js.add_stream(name="US", subjects=["us.>"])
        for i in range(3):
            await js.publish("eu.order", f"eu{i}".encode())
            await js.publish("us.order", f"us{i}".encode())
            await js.publish("us.other", f"x{i}".encode())
        await js.add_stream(
            name="ALL",
            sources=[
                StreamSource(name="EU"),
                StreamSource(name="US", filter_subject="us.order"),
            ],
        )
        info = await wait_messages(js, "ALL", 6)
        assert info.state.messages == 6
        assert sorted(s.name for s in info.sources) == ["EU", "US"]
        seen: dict[str, list[str]] = {}
        for seq in range(1, 7):
            msg = await js.get_msg("ALL", seq)
            assert msg.headers is not None
            # Its fields as nats-server reads them (nats-server adds an identity of its own).
            header = " ".join(msg.headers["Nats-Stream-Source"].split(" ")[:5])
            seen.setdefault(header.split(" ")[0], []).append(header)
            assert msg.subject in ("eu.order", "us.order")
        assert seen["EU"] == [f"EU {n} > > eu.order" for n in (1, 2, 3)]
        assert seen["US"] == [f"US {n} us.order > us.order" for n in (1, 3, 5)]
        # Live: new messages on the origins are sourced too.
        await js.publish("eu.order", b"late")
        await js.publish("us.other", b"left out")
        await js.publish("us.order", b"late")
        info = await wait_messages(js, "ALL", 8)
        assert info.state.messages == 8
    finally:
        await nc.close()


async def test_a_source_transforms_subjects_from_a_start_sequence(server: Server) -> None:
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="RAW", subjects=["raw.>"])
        for i in range(1, 6):
            await js.publish(f"raw.{i}", str(i).encode())
        await js.add_stream(
            name="COOKED",
            subjects=["cooked.>"],
            sources=[
                StreamSource(
                    name="RAW",
                    opt_start_seq=3,
                    subject_transforms=[
                        SubjectTransform(src="raw.*", dest="cooked.{{wildcard(1)}}")
                    ],
                )
            ],
        )
        info = await wait_messages(js, "COOKED", 3)
        assert info.state.messages == 3
        got = [await js.get_msg("COOKED", seq) for seq in (1, 2, 3)]
        assert [m.subject for m in got] == ["cooked.3", "cooked.4", "cooked.5"]
        assert [m.data for m in got] == [b"3", b"4", b"5"]
        # The stream's own subjects still take publishes beside what it sources.
        ack = await js.publish("cooked.own", b"own")
        assert ack.stream == "COOKED" and ack.seq == 4
    finally:
        await nc.close()


async def test_a_kv_bucket_sources_two_buckets(server: Server) -> None:
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream(timeout=10)
        east = await js.create_key_value(bucket="EAST")
        west = await js.create_key_value(bucket="WEST")
        await east.put("e", b"1")
        await west.put("w", b"2")
        # What `nats kv add BOTH --source EAST --source WEST` makes: each source's keys moved
        # to the bucket's own.
        await js.add_stream(
            name="KV_BOTH",
            subjects=["$KV.BOTH.>"],
            max_msgs_per_subject=1,
            allow_rollup_hdrs=True,
            deny_delete=True,
            allow_direct=True,
            sources=[
                StreamSource(
                    name=f"KV_{b}",
                    subject_transforms=[SubjectTransform(src=f"$KV.{b}.>", dest="$KV.BOTH.>")],
                )
                for b in ("EAST", "WEST")
            ],
        )
        await wait_messages(js, "KV_BOTH", 2)
        both = await js.key_value("BOTH")
        assert (await both.get("e")).value == b"1"
        assert (await both.get("w")).value == b"2"
        await east.put("e", b"3")
        deadline = asyncio.get_running_loop().time() + TIMEOUT
        while (await both.get("e")).value != b"3":
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.05)
    finally:
        await nc.close()


async def test_a_recreated_origin_is_sourced_from_its_start(server: Server) -> None:
    """The source header's last field is the origin's identity (a hash of its creation time):
    an origin deleted and made again is a new one, sourced from its first message, where its
    old last sequence would skip the new one's first messages."""
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="AGAIN", subjects=["again.>"])
        for i in range(3):
            await js.publish("again.x", f"old{i}".encode())
        await js.add_stream(name="SINK", sources=[StreamSource(name="AGAIN")])
        await wait_messages(js, "SINK", 3)
        first = await js.get_msg("SINK", 1)
        assert first.headers is not None
        fields = first.headers["Nats-Stream-Source"].split(" ")
        assert len(fields) == 6 and fields[:5] == ["AGAIN", "1", ">", ">", "again.x"]
        await js.delete_stream("AGAIN")
        await js.add_stream(name="AGAIN", subjects=["again.>"])
        for i in range(2):
            await js.publish("again.x", f"new{i}".encode())
        info = await wait_messages(js, "SINK", 5)
        assert info.state.messages == 5
        got = [await js.get_msg("SINK", seq) for seq in (4, 5)]
        assert [m.data for m in got] == [b"new0", b"new1"]
        assert got[0].headers is not None
        renewed = got[0].headers["Nats-Stream-Source"].split(" ")
        assert renewed[:2] == ["AGAIN", "1"] and renewed[5] != fields[5]
        # nats-server's hash of the origin's creation time, as its info gives it.
        answer = await nc.request("$JS.API.STREAM.INFO.AGAIN", b"", timeout=10)
        assert renewed[5] == short_hash(json.loads(answer.data)["created"])
    finally:
        await nc.close()
