"""The agent on S3 (a moto server subprocess speaking the real wire protocol), and invariant 6:
every object key and every metadata key starts with the virtual group."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js.errors import APIError, NotFoundError

from infinistream.metadata import open_metadata
from infinistream.storage import ObjectStore
from support.agentproc import AgentProcess, running_agent
from support.s3server import S3Server, start_s3_server
from support.storeinspect import stream_info_json


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = start_s3_server()
    yield server
    server.stop()


@pytest.fixture
def bucket(s3: S3Server) -> str:
    """A fresh bucket per test, so key listings see only that test's objects."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(name)
    return name


def _s3_agent(
    s3: S3Server, store_dir: Path, objects_url: str, *extra: str
) -> contextlib.AbstractContextManager[AgentProcess]:
    return running_agent(
        store_dir,
        "--objects",
        objects_url,
        "--s3-endpoint",
        s3.endpoint,
        "--linger",
        "10ms",
        *extra,
        env=s3.env(),
    )


@contextlib.asynccontextmanager
async def _client(agent: AgentProcess):  # type: ignore[no-untyped-def]
    nc: Client = await nats.connect(agent.url, allow_reconnect=False)
    try:
        yield nc
    finally:
        await nc.close()


async def _object_keys(s3: S3Server, url: str) -> list[str]:
    store = ObjectStore.from_url(url, **s3.store_options())
    return [info.key for info in await store.list()]


async def _metadata_keys(store_dir: Path) -> list[str]:
    meta = open_metadata(f"sqlite:///{(store_dir / 'meta.db').resolve()}")
    try:
        return [item.key for item in await meta.range("", keys_only=True)]
    finally:
        await meta.close()


async def test_create_publish_read_restart_on_s3(
    s3: S3Server, bucket: str, store_dir: Path
) -> None:
    url = f"s3://{bucket}"
    with _s3_agent(s3, store_dir, url) as agent:
        async with _client(agent) as nc:
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="S3", subjects=["s3.>"])
            acks = [await js.publish(f"s3.{i % 2}", b"obj-%d" % i) for i in range(20)]
            assert [a.seq for a in acks] == list(range(1, 21))
            assert (await js.get_msg("S3", 5)).data == b"obj-4"
            before = await stream_info_json(nc, "S3")
        assert agent.stop() == 0
    assert not (store_dir / "objects").exists(), "objects were written locally, not to S3"

    with _s3_agent(s3, store_dir, url) as agent:
        async with _client(agent) as nc:
            js = nc.jetstream(timeout=10)
            assert await stream_info_json(nc, "S3") == before
            for i in range(20):
                msg = await js.get_msg("S3", i + 1)
                assert (msg.subject, msg.data) == (f"s3.{i % 2}", b"obj-%d" % i)


async def test_object_keys_start_with_the_group(s3: S3Server, bucket: str, store_dir: Path) -> None:
    with _s3_agent(s3, store_dir, f"s3://{bucket}") as agent:
        async with _client(agent) as nc:
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="KEYS", subjects=["keys.>"])
            for i in range(3):
                await js.publish("keys.x", b"%d" % i)
    keys = await _object_keys(s3, f"s3://{bucket}")
    assert keys, "no objects in the bucket"
    assert all(k.startswith("default/") for k in keys), keys


async def test_bucket_prefix_comes_before_the_group(
    s3: S3Server, bucket: str, store_dir: Path
) -> None:
    with _s3_agent(s3, store_dir, f"s3://{bucket}/some/prefix") as agent:
        async with _client(agent) as nc:
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="PFX", subjects=["pfx.>"])
            await js.publish("pfx.x", b"x")
            assert (await js.get_msg("PFX", 1)).data == b"x"
    keys = await _object_keys(s3, f"s3://{bucket}")
    assert keys
    assert all(k.startswith("some/prefix/default/") for k in keys), keys


async def _metadata_items(store_dir: Path) -> list[tuple[str, bytes]]:
    meta = open_metadata(f"sqlite:///{(store_dir / 'meta.db').resolve()}")
    try:
        return [(item.key, item.value) for item in await meta.range("")]
    finally:
        await meta.close()


async def test_metadata_keys_start_with_the_group_and_hold_no_payloads(
    s3: S3Server, bucket: str, store_dir: Path
) -> None:
    marker = b"PAYLOAD-MARKER-7f3a9c"
    with _s3_agent(s3, store_dir, f"s3://{bucket}") as agent:
        async with _client(agent) as nc:
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="META", subjects=["meta.>"])
            await js.publish("meta.x", marker + b"-1", headers={"Nats-Msg-Id": "dedupe-me"})
            await js.publish("meta.y", marker + b"-2")
            await js.publish("meta.y", marker + b"-3")
            await js.delete_msg("META", 1)
    items = await _metadata_items(store_dir)
    keys = [k for k, _ in items]
    assert any("META" in k for k in keys), keys
    # Invariant 6: every key under the group.
    assert all(k.startswith("default/") for k in keys), keys
    # Invariant 5: no payload bytes in metadata.
    assert not [k for k, v in items if marker in v]


async def test_groups_on_one_store_are_isolated(s3: S3Server, bucket: str, store_dir: Path) -> None:
    url = f"s3://{bucket}"
    with (
        _s3_agent(s3, store_dir, url, "--group", "tenant-a") as agent_a,
        _s3_agent(s3, store_dir, url, "--group", "tenant-b") as agent_b,
    ):
        async with _client(agent_a) as nc_a, _client(agent_b) as nc_b:
            js_a, js_b = nc_a.jetstream(timeout=10), nc_b.jetstream(timeout=10)
            # The same stream name and subjects in both groups: two different streams.
            await js_a.add_stream(name="ORDERS", subjects=["orders.>"])
            await js_b.add_stream(name="ORDERS", subjects=["orders.>"])
            await js_a.add_stream(name="ONLY_A", subjects=["only.a"])
            for i in range(3):
                await js_a.publish("orders.new", b"a-%d" % i)
            await js_b.publish("orders.new", b"b-0")

            assert (await js_a.stream_info("ORDERS")).state.messages == 3
            assert (await js_b.stream_info("ORDERS")).state.messages == 1
            assert (await js_b.get_msg("ORDERS", 1)).data == b"b-0"
            assert (await js_a.get_msg("ORDERS", 1)).data == b"a-0"
            with pytest.raises(NotFoundError):
                await js_b.get_msg("ORDERS", 2)
            with pytest.raises(NotFoundError):
                await js_b.stream_info("ONLY_A")
            names_a = sorted(s.config.name for s in await js_a.streams_info())
            names_b = sorted(s.config.name for s in await js_b.streams_info())
            assert (names_a, names_b) == (["ONLY_A", "ORDERS"], ["ORDERS"])

    object_keys = await _object_keys(s3, url)
    assert {k.split("/")[0] for k in object_keys} == {"tenant-a", "tenant-b"}
    meta_keys = await _metadata_keys(store_dir)
    assert {k.split("/")[0] for k in meta_keys} == {"tenant-a", "tenant-b"}


async def test_failed_put_to_s3_answers_errors_and_stores_nothing(
    s3: S3Server, store_dir: Path
) -> None:
    # A bucket that does not exist: every PUT fails (404), quickly and without retries.
    with _s3_agent(s3, store_dir, "s3://no-such-bucket") as agent:
        async with _client(agent) as nc:
            js = nc.jetstream(timeout=10)
            await js.add_stream(name="NOPE", subjects=["nope.>"])
            results = await asyncio.gather(
                *(js.publish("nope.x", b"%d" % i) for i in range(5)), return_exceptions=True
            )
            for result in results:
                assert isinstance(result, APIError), f"acked without a stored object: {result}"
            info = await js.stream_info("NOPE")
            assert (info.state.messages, info.state.last_seq) == (0, 0)


async def test_s3_going_away_answers_errors_and_stores_nothing(store_dir: Path) -> None:
    own = start_s3_server()  # its own server: this test stops it
    try:
        with _s3_agent(own, store_dir, own.url) as agent:
            async with _client(agent) as nc:
                js = nc.jetstream(timeout=30)
                await js.add_stream(name="AWAY", subjects=["away.>"])
                assert (await js.publish("away.x", b"stored")).seq == 1
                own.stop()
                results = await asyncio.gather(
                    *(js.publish("away.x", b"%d" % i) for i in range(5)),
                    return_exceptions=True,
                )
                for result in results:
                    assert isinstance(result, APIError), f"acked with S3 down: {result}"
                info = await js.stream_info("AWAY")
                assert (info.state.messages, info.state.last_seq) == (1, 1)
    finally:
        own.stop()
