"""Two accounts on one server, each with a stream and a consumer of the same names: whatever
one account does (publish, fetch, ack, direct get, KV, object store, crafted API and ack
subjects) never sees or touches the other's data. Run against an agent and nats-server with
one config file: the isolation nats-server gives is the isolation the agent must give."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import nats
import pytest
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.js.api import ConsumerConfig, StreamConfig
from nats.js.errors import KeyNotFoundError, NotFoundError, ObjectNotFoundError

from support.servers import KINDS, Server, running_server
from support.written import written

CONFIG = """
accounts {
  A: { users: [ {user: a, password: a} ], jetstream: enabled }
  B: { users: [ {user: b, password: b} ], jetstream: enabled }
}
"""


@pytest.fixture(scope="module", params=KINDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp(request.param)
    conf = tmp / "accounts.conf"
    conf.write_text(CONFIG)
    with running_server(request.param, tmp / "store", "-c", str(conf)) as srv:
        yield srv


@pytest.fixture
async def na(server: Server) -> AsyncIterator[Client]:
    nc = await nats.connect(server.url, user="a", password="a")
    yield nc
    await nc.close()


@pytest.fixture
async def nb(server: Server) -> AsyncIterator[Client]:
    nc = await nats.connect(server.url, user="b", password="b")
    yield nc
    await nc.close()


async def api(nc: Client, subject: str, body: bytes = b"") -> dict[str, object]:
    msg = await nc.request(subject, body, timeout=10)
    answer: dict[str, object] = json.loads(msg.data)
    return answer


async def test_same_stream_and_consumer_names_keep_each_accounts_messages(
    na: Client, nb: Client
) -> None:
    jsa, jsb = na.jetstream(), nb.jetstream()
    for js in (jsa, jsb):
        await js.add_stream(StreamConfig(name="ORDERS", subjects=["orders.>"], allow_direct=True))
    for i in range(3):
        await jsa.publish("orders.new", f"a{i}".encode())
    for i in range(2):
        await jsb.publish("orders.new", f"b{i}".encode())

    sub_a = await jsa.pull_subscribe("orders.>", durable="C", stream="ORDERS")
    sub_b = await jsb.pull_subscribe("orders.>", durable="C", stream="ORDERS")
    got_a = await sub_a.fetch(10, timeout=2)
    got_b = await sub_b.fetch(10, timeout=2)
    assert [m.data for m in got_a] == [b"a0", b"a1", b"a2"]
    assert [m.data for m in got_b] == [b"b0", b"b1"]

    for m in got_a:
        await m.ack_sync()
    info_a = await jsa.consumer_info("ORDERS", "C")
    info_b = await jsb.consumer_info("ORDERS", "C")
    assert (info_a.num_ack_pending, info_a.ack_floor.stream_seq) == (0, 3)
    assert (info_b.num_ack_pending, info_b.ack_floor.stream_seq) == (2, 0)

    assert (await jsa.stream_info("ORDERS")).state.messages == 3
    assert (await jsb.stream_info("ORDERS")).state.messages == 2
    assert (await jsa.get_msg("ORDERS", 3, direct=True)).data == b"a2"
    with pytest.raises(NotFoundError):
        await jsb.get_msg("ORDERS", 3, direct=True)
    assert (await jsb.get_msg("ORDERS", 2)).data == b"b1"

    info = await api(na, "$JS.API.INFO")
    assert (info["streams"], info["consumers"]) == (1, 1)


async def test_key_value_and_object_store_buckets_are_per_account(na: Client, nb: Client) -> None:
    kva = await na.jetstream().create_key_value(bucket="cfg")
    kvb = await nb.jetstream().create_key_value(bucket="cfg")
    await kva.put("k", b"from-a")
    with pytest.raises(KeyNotFoundError):
        await kvb.get("k")
    await kvb.put("k", b"from-b")
    assert (await kva.get("k")).value == b"from-a"
    assert (await kvb.get("k")).value == b"from-b"

    osa = await na.jetstream().create_object_store("files")
    osb = await nb.jetstream().create_object_store("files")
    await osa.put("report", b"a's report " * 100)
    with pytest.raises(ObjectNotFoundError):
        await osb.get("report")
    assert (await osa.get("report")).data == b"a's report " * 100


async def test_the_other_accounts_ack_subjects_and_pull_requests_reach_nothing(
    na: Client, nb: Client
) -> None:
    jsa, jsb = na.jetstream(), nb.jetstream()
    await jsb.add_stream(StreamConfig(name="WORK", subjects=["work.>"]))
    await jsa.add_stream(StreamConfig(name="WORK", subjects=["work.>"]))
    await jsb.publish("work.1", b"b's job")
    sub = await jsb.pull_subscribe("work.>", durable="W", stream="WORK")
    [msg] = await sub.fetch(1, timeout=2)
    assert msg.reply.startswith("$JS.ACK.WORK.W.")

    # A sends B's ack (and a term) on the same subject: in A's namespace no consumer W exists.
    await na.publish(msg.reply, b"+ACK")
    await na.publish(msg.reply, b"+TERM")
    await na.flush()
    # A pull request for B's consumer, asked in A, finds nothing to answer it.
    with pytest.raises(NoRespondersError):
        await na.request("$JS.API.CONSUMER.MSG.NEXT.WORK.W", b'{"batch":1}', timeout=5)
    info = await jsb.consumer_info("WORK", "W")
    assert info.num_ack_pending == 1
    assert info.ack_floor.stream_seq == 0
    await msg.ack_sync()
    assert (await jsb.consumer_info("WORK", "W")).num_ack_pending == 0


async def test_crafted_api_subjects_do_not_reach_the_other_account(na: Client, nb: Client) -> None:
    await nb.jetstream().add_stream(StreamConfig(name="SECRET", subjects=["secret.>"]))
    await nb.jetstream().publish("secret.plans", b"b only")

    refused = await api(na, "$JS.API.STREAM.INFO.SECRET")
    assert refused["error"] == {"code": 404, "err_code": 10059, "description": "stream not found"}
    for subject in ("$JS.API.STREAM.MSG.GET.SECRET", "$JS.API.CONSUMER.INFO.SECRET.C"):
        answer = await api(na, subject, b'{"seq":1}' if "MSG" in subject else b"")
        assert answer["error"]["err_code"] == 10059  # type: ignore[index]
    # Wildcards in an API subject are literal tokens: they name no stream, of any account.
    for subject in (
        "$JS.API.STREAM.INFO.*",
        "$JS.API.STREAM.INFO.>",
        "$JS.API.CONSUMER.INFO.*.*",
    ):
        answer = await api(na, subject)
        assert answer["error"]["err_code"] == 10059  # type: ignore[index]
    for subject in ("$JS.API.DIRECT.GET.*", "$JS.API.CONSUMER.MSG.NEXT.*.*"):
        with pytest.raises(NoRespondersError):
            await na.request(subject, b'{"seq":1}', timeout=5)
    names = await api(na, "$JS.API.STREAM.NAMES")
    assert "SECRET" not in (names["streams"] or [])  # type: ignore[operator]
    listed = await api(na, "$JS.API.STREAM.LIST")
    assert all(s["config"]["name"] != "SECRET" for s in listed["streams"] or [])  # type: ignore[attr-defined,index]
    # A direct get of B's stream, asked in A: nothing in A serves it.
    with pytest.raises(NoRespondersError):
        await na.request("$JS.API.DIRECT.GET.SECRET", b'{"seq":1}', timeout=5)
    # A publish on B's stream subject, in A, is stored nowhere.
    with pytest.raises(NoRespondersError):
        await na.request("secret.plans", b"a's try", timeout=5)
    assert (await nb.jetstream().stream_info("SECRET")).state.messages == 1


async def test_push_deliveries_go_to_the_accounts_own_subscribers(na: Client, nb: Client) -> None:
    jsb = nb.jetstream()
    await jsb.add_stream(StreamConfig(name="PUSH", subjects=["push.>"]))
    # A listens on the very subject B's push consumer delivers to.
    seen_by_a = await na.subscribe("deliver.same")
    seen_by_b = await nb.subscribe("deliver.same")
    await written(na, nb)
    await jsb.add_consumer(
        "PUSH", ConsumerConfig(durable_name="P", deliver_subject="deliver.same", ack_policy="none")
    )
    for i in range(2):
        await jsb.publish("push.x", f"p{i}".encode())
    got = [await seen_by_b.next_msg(timeout=10) for _ in range(2)]
    assert [m.data for m in got] == [b"p0", b"p1"]
    await na.flush()
    assert seen_by_a.pending_msgs == 0
