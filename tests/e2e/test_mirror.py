"""Mirrors, against the agent and nats-server (the `server` fixture), with nats-py.

- A mirror keeps its origin's sequences and timestamps, skips what the origin deleted, and
  follows the origin live.
- A filtered mirror holds only what its filter takes, at the origin's sequences.
- A KV bucket's mirror (what `nats kv add --mirror` makes) answers the bucket's keys.
- Stream info reports the mirror with its lag; a mirror's config can not be updated.
"""

from __future__ import annotations

import nats
from nats.js.api import StreamSource
from nats.js.errors import BadRequestError, NotFoundError

from support.origins import raw_get, wait_last_seq
from support.servers import Server

# A safety net only: every wait below ends on what it counts.


async def test_a_mirror_keeps_sequences_and_times_and_skips_deletes(server: Server) -> None:
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="ORIGIN", subjects=["o.>"])
        for i in range(1, 11):
            await js.publish(f"o.{i % 3}", f"m{i}".encode(), headers={"k": str(i)})
        await js.delete_msg("ORIGIN", 3)
        await js.delete_msg("ORIGIN", 7)
        await js.add_stream(name="MIRROR", mirror=StreamSource(name="ORIGIN"))
        info = await wait_last_seq(js, "MIRROR", 10)
        assert (info.state.messages, info.state.first_seq, info.state.last_seq) == (8, 1, 10)
        assert info.mirror is not None and info.mirror.name == "ORIGIN"
        for seq in range(1, 11):
            copy = await raw_get(nc, "MIRROR", seq)
            original = await raw_get(nc, "ORIGIN", seq)
            if seq in (3, 7):
                assert copy is None and original is None
                continue
            assert copy is not None and original is not None
            assert copy == original
        # It follows live.
        for i in range(11, 14):
            await js.publish("o.x", f"m{i}".encode())
        info = await wait_last_seq(js, "MIRROR", 13)
        assert info.state.messages == 11
        for seq in (11, 12, 13):
            assert await raw_get(nc, "MIRROR", seq) == await raw_get(nc, "ORIGIN", seq)
        assert info.mirror.lag == 0
    finally:
        await nc.close()


async def test_a_filtered_mirror_keeps_the_origins_sequences(server: Server) -> None:
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="ALL", subjects=["all.>"])
        for i in range(1, 9):
            await js.publish("all.even" if i % 2 == 0 else "all.odd", str(i).encode())
        await js.add_stream(name="EVEN", mirror=StreamSource(name="ALL", filter_subject="all.even"))
        info = await wait_last_seq(js, "EVEN", 8)
        assert (info.state.messages, info.state.last_seq) == (4, 8)
        got = [await raw_get(nc, "EVEN", seq) for seq in range(1, 9)]
        assert [m["seq"] for m in got if m is not None] == [2, 4, 6, 8]
    finally:
        await nc.close()


async def test_a_mirror_config_can_not_be_updated_and_refuses_subjects(server: Server) -> None:
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="UP", subjects=["up.>"])
        await js.add_stream(name="UPM", mirror=StreamSource(name="UP"))
        try:
            await js.update_stream(
                name="UPM", mirror=StreamSource(name="UP", filter_subject="up.a")
            )
        except BadRequestError as exc:
            assert exc.err_code == 10055
        else:
            raise AssertionError("a mirror's update was accepted")
        try:
            await js.add_stream(name="BAD", subjects=["bad"], mirror=StreamSource(name="UP"))
        except BadRequestError as exc:
            assert exc.err_code == 10034
        else:
            raise AssertionError("a mirror with subjects was accepted")
    finally:
        await nc.close()


async def test_a_kv_mirror_answers_the_buckets_keys(server: Server) -> None:
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream(timeout=10)
        kv = await js.create_key_value(bucket="CONF", history=5)
        await kv.put("a", b"1")
        await kv.put("b", b"2")
        await kv.put("a", b"3")
        await kv.delete("b")
        # What `nats kv add EDGE --mirror CONF` makes: a stream mirroring the bucket's.
        await js.add_stream(
            name="KV_EDGE",
            mirror=StreamSource(name="KV_CONF"),
            max_msgs_per_subject=5,
            allow_rollup_hdrs=True,
            deny_delete=True,
            allow_direct=True,
            mirror_direct=True,
        )
        await wait_last_seq(js, "KV_EDGE", 4)
        latest = await js.get_last_msg("KV_EDGE", "$KV.CONF.a")
        assert (latest.seq, latest.data) == (3, b"3")
        deleted = await js.get_last_msg("KV_EDGE", "$KV.CONF.b")
        assert deleted.headers is not None and deleted.headers.get("KV-Operation") == "DEL"
        try:
            await js.get_last_msg("KV_EDGE", "$KV.CONF.nope")
        except NotFoundError:
            pass
        else:
            raise AssertionError("a key the bucket never had was found")
    finally:
        await nc.close()
