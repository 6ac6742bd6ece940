"""A mirror and a source in one account of a stream in another, through the exports and
imports nats-server's cross-account mirrors take (its jsClusterMirrorSourceImportsTempl):
the origin account exports its consumer API and the delivery subjects, the other imports
them, and the mirror names the imported API prefix. Against the agent and nats-server with
one config, with nats-py.

- The mirror keeps the origin's sequences (what the origin deleted stays a gap), follows it
  live and carries on after a kill -9; the source holds every message once.
- Only what is exported is reachable: the importer gets no answer on an API subject that is
  not exported, and a third account without the imports gets none at all.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.js.api import ExternalStream, StreamSource
from nats.js.errors import APIError, NotFoundError

from support.origins import raw_get, wait_last_seq
from support.servers import AGENT, KINDS, Server, running_server
from support.written import written

CONFIG = """
accounts {
  A: {
    jetstream: enabled
    users: [ {user: a, password: a} ]
    exports: [
      {service: "$JS.API.CONSUMER.>", accounts: [B]}
      {stream: "deliver.a.>", accounts: [B]}
      {service: "$JS.FC.>", accounts: [B]}
      {stream: "public.>"}
    ]
  }
  B: {
    jetstream: enabled
    users: [ {user: b, password: b} ]
    imports: [
      {service: {account: A, subject: "$JS.API.CONSUMER.>"}, to: "JS.A.API.CONSUMER.>"}
      {stream: {account: A, subject: "deliver.a.>"}}
      {service: {account: A, subject: "$JS.FC.>"}}
      {stream: {account: A, subject: "public.>"}, prefix: "from.a"}
    ]
  }
  C: {
    jetstream: enabled
    users: [ {user: c, password: c} ]
  }
}
"""

API = "JS.A.API"


@pytest.fixture(params=KINDS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    conf = tmp_path / "accounts.conf"
    conf.write_text(CONFIG)
    with running_server(request.param, tmp_path / "store", "-c", str(conf)) as srv:
        yield srv


async def _connect(server: Server, user: str) -> Client:
    return await nats.connect(server.url, user=user, password=user, max_reconnect_attempts=-1)


@pytest.fixture
async def clients(server: Server) -> AsyncIterator[dict[str, Client]]:
    conns = {user: await _connect(server, user) for user in ("a", "b", "c")}
    try:
        yield conns
    finally:
        for nc in conns.values():
            await nc.close()


def _external(deliver: str) -> ExternalStream:
    return ExternalStream(api=API, deliver=deliver)


def _same(copy: dict[str, Any] | None, original: dict[str, Any] | None) -> bool:
    if copy is None or original is None:
        return copy is original
    keys = ("subject", "seq", "data", "hdrs")
    return all(copy.get(k) == original.get(k) for k in keys)


async def _publish(nc: Client, first: int, last: int) -> None:
    js = nc.jetstream(timeout=10)
    for i in range(first, last + 1):
        await js.publish(f"o.{i % 3}", f"m{i}".encode(), headers={"k": str(i)})


async def test_a_mirror_of_another_accounts_stream(
    server: Server, clients: dict[str, Client]
) -> None:
    a, b = clients["a"], clients["b"]
    js_a, js_b = a.jetstream(timeout=10), b.jetstream(timeout=10)
    await js_a.add_stream(name="ORIGIN", subjects=["o.>"])
    await _publish(a, 1, 10)
    await js_a.delete_msg("ORIGIN", 4)
    mirror = StreamSource(name="ORIGIN", external=_external("deliver.a.mirror"))
    await js_b.add_stream(name="COPY", mirror=mirror)
    info = await wait_last_seq(js_b, "COPY", 10)
    assert (info.state.messages, info.state.first_seq) == (9, 1)
    for seq in range(1, 11):
        assert _same(await raw_get(b, "COPY", seq), await raw_get(a, "ORIGIN", seq)), seq
    # It follows live.
    await _publish(a, 11, 13)
    info = await wait_last_seq(js_b, "COPY", 13)
    assert info.state.messages == 12
    # And carries on after a kill -9, from where it is.
    server.restart()
    a2, b2 = await _connect(server, "a"), await _connect(server, "b")
    try:
        await _publish(a2, 14, 16)
        info = await wait_last_seq(b2.jetstream(timeout=10), "COPY", 16)
        assert info.state.messages == 15
        for seq in range(11, 17):
            assert _same(await raw_get(b2, "COPY", seq), await raw_get(a2, "ORIGIN", seq))
    finally:
        await a2.close()
        await b2.close()


async def test_a_source_of_another_accounts_stream(
    server: Server, clients: dict[str, Client]
) -> None:
    a, b = clients["a"], clients["b"]
    js_a, js_b = a.jetstream(timeout=10), b.jetstream(timeout=10)
    await js_a.add_stream(name="ORIGIN", subjects=["o.>"])
    await _publish(a, 1, 5)
    source = StreamSource(name="ORIGIN", external=_external("deliver.a.source"))
    await js_b.add_stream(name="GATHER", subjects=["own.>"], sources=[source])
    await wait_last_seq(js_b, "GATHER", 5)
    await _publish(a, 6, 8)
    await js_b.publish("own.x", b"mine")
    info = await wait_last_seq(js_b, "GATHER", 9)
    assert info.state.messages == 9
    subjects = set()
    for seq in range(1, 10):
        msg = await raw_get(b, "GATHER", seq)
        assert msg is not None
        subjects.add(msg["subject"])
    assert subjects == {"o.0", "o.1", "o.2", "own.x"}


async def test_only_what_is_exported_is_reachable(
    server: Server, clients: dict[str, Client]
) -> None:
    a, b, c = clients["a"], clients["b"], clients["c"]
    await a.jetstream(timeout=10).add_stream(name="ORIGIN", subjects=["o.>"])
    await _publish(a, 1, 3)
    # The stream API of A is not exported: no one answers B there.
    with pytest.raises(NoRespondersError):
        await b.request(f"{API}.STREAM.INFO.ORIGIN", b"", timeout=5)
    # B's own API knows no stream of A's.
    with pytest.raises(NotFoundError):
        await b.jetstream(timeout=10).stream_info("ORIGIN")
    # C imports nothing of A.
    with pytest.raises(NoRespondersError):
        await c.request(f"{API}.CONSUMER.CREATE.ORIGIN", b"{}", timeout=5)


async def test_an_imported_service_is_served_by_the_exporting_account(
    server: Server, clients: dict[str, Client]
) -> None:
    """B's requests on the imported consumer API are A's: the consumer is made in A, its
    answers and messages reach B."""
    a, b = clients["a"], clients["b"]
    js_a = a.jetstream(timeout=10)
    await js_a.add_stream(name="ORIGIN", subjects=["o.>"])
    await _publish(a, 1, 3)
    config = {"durable_name": "D", "ack_policy": "none"}
    request = json.dumps({"stream_name": "ORIGIN", "config": config}).encode()
    answer = json.loads((await b.request(f"{API}.CONSUMER.CREATE.ORIGIN.D", request, 10)).data)
    assert answer["type"] == "io.nats.jetstream.api.v1.consumer_create_response"
    assert (answer["stream_name"], answer["name"], answer["num_pending"]) == ("ORIGIN", "D", 3)
    assert (await js_a.consumer_info("ORIGIN", "D")).num_pending == 3
    info = json.loads((await b.request(f"{API}.CONSUMER.INFO.ORIGIN.D", b"", 10)).data)
    assert (info["name"], info["num_pending"]) == ("D", 3)
    # A pull request: the message comes to B's inbox.
    inbox = b.new_inbox()
    sub = await b.subscribe(inbox)
    await b.publish(f"{API}.CONSUMER.MSG.NEXT.ORIGIN.D", b'{"batch": 1}', reply=inbox)
    msg = await sub.next_msg(timeout=10)
    assert (msg.subject, msg.data, msg.headers) == ("o.1", b"m1", {"k": "1"})
    # C has no such import.
    with pytest.raises(NoRespondersError):
        await c_request(clients["c"], f"{API}.CONSUMER.INFO.ORIGIN.D")


async def test_an_imported_stream_delivers_the_exporters_messages(
    server: Server, clients: dict[str, Client]
) -> None:
    """What A's push consumers deliver on exported subjects reaches B's subscribers, on
    B's subject for it (with the import's prefix); C, importing nothing, gets none."""
    a, b, c = clients["a"], clients["b"], clients["c"]
    js_a = a.jetstream(timeout=10)
    await js_a.add_stream(name="ORIGIN", subjects=["o.>"])
    await _publish(a, 1, 3)
    plain = await b.subscribe("deliver.a.push")
    prefixed = await b.subscribe("from.a.public.push")
    outsider = await c.subscribe("deliver.a.push")
    await written(b, c)
    for name, deliver in (("P", "deliver.a.push"), ("Q", "public.push")):
        await js_a.add_consumer(
            "ORIGIN", durable_name=name, deliver_subject=deliver, ack_policy="none"
        )
    for sub in (plain, prefixed):
        got = [await sub.next_msg(timeout=10) for _ in range(3)]
        assert [(m.subject, m.data) for m in got] == [
            ("o.1", b"m1"),
            ("o.2", b"m2"),
            ("o.0", b"m3"),
        ]
    assert outsider.pending_msgs == 0


async def c_request(nc: Client, subject: str) -> None:
    await nc.request(subject, b"", timeout=5)


async def test_a_mirror_without_the_imports_is_refused_by_the_agent(tmp_path: Path) -> None:
    """nats-server takes such a config and never copies (its consumer request reaches no
    one); the agent refuses what it can not copy, with the config error's code."""
    conf = tmp_path / "accounts.conf"
    conf.write_text(CONFIG)
    with running_server(AGENT, tmp_path / "store", "-c", str(conf)) as agent:
        a, c = await _connect(agent, "a"), await _connect(agent, "c")
        try:
            await a.jetstream(timeout=10).add_stream(name="ORIGIN", subjects=["o.>"])
            mirror = StreamSource(name="ORIGIN", external=_external("deliver.a.mirror"))
            with pytest.raises(APIError) as refused:
                await c.jetstream(timeout=10).add_stream(name="COPY", mirror=mirror)
            assert refused.value.err_code == 10052
            # Nor through a deliver prefix B does not import.
            mirror = StreamSource(name="ORIGIN", external=_external("deliver.other"))
            b = await _connect(agent, "b")
            try:
                with pytest.raises(APIError) as refused:
                    await b.jetstream(timeout=10).add_stream(name="COPY", mirror=mirror)
                assert refused.value.err_code == 10052
            finally:
                await b.close()
        finally:
            await a.close()
            await c.close()
