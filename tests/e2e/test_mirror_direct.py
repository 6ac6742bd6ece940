"""A mirror's direct gets for its origin (`mirror_direct`), against the agent and nats-server.

A mirror of an origin that allows direct gets takes `mirror_direct` from it, and answers
`$JS.API.DIRECT.GET.<origin>` itself: by sequence and by subject, with its own stream name in
`Nats-Stream`. It goes on answering them when the origin is gone (deleted here; on a remote
server, out of reach), which is what the setting is for. A mirror without it answers nothing
for its origin.
"""

from __future__ import annotations

import json

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError, TimeoutError
from nats.js.api import StreamSource

from support.origins import wait_last_seq
from support.servers import Server


async def direct_get(nc: Client, subject: str, body: dict[str, object]) -> Msg | None:
    """The answer to a direct get (None: nothing serves the subject)."""
    try:
        return await nc.request(subject, json.dumps(body).encode(), timeout=2)
    except (NoRespondersError, TimeoutError):
        return None


async def test_a_mirror_answers_its_origins_direct_gets(server: Server) -> None:
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="ORIGIN", subjects=["o.>"], allow_direct=True)
        for i in range(1, 4):
            await js.publish(f"o.{i}", f"m{i}".encode())
        await js.add_stream(name="MIRROR", mirror=StreamSource(name="ORIGIN"), allow_direct=True)
        info = await wait_last_seq(js, "MIRROR", 3)
        # Taken from the origin's allow_direct.
        assert info.config.mirror_direct is True
        await js.delete_stream("ORIGIN")
        by_seq = await direct_get(nc, "$JS.API.DIRECT.GET.ORIGIN", {"seq": 2})
        assert by_seq is not None and by_seq.data == b"m2"
        assert by_seq.headers is not None
        assert by_seq.headers["Nats-Stream"] == "MIRROR"
        assert by_seq.headers["Nats-Sequence"] == "2"
        assert by_seq.headers["Nats-Subject"] == "o.2"
        by_subject = await direct_get(nc, "$JS.API.DIRECT.GET.ORIGIN.o.3", {})
        assert by_subject is not None and by_subject.data == b"m3"
        last = await direct_get(nc, "$JS.API.DIRECT.GET.ORIGIN", {"last_by_subj": "o.1"})
        assert last is not None and last.data == b"m1"
        missing = await direct_get(nc, "$JS.API.DIRECT.GET.ORIGIN", {"seq": 9})
        assert missing is not None and missing.headers is not None
        assert missing.headers.get("Status") == "404"
    finally:
        await nc.close()


async def test_a_mirror_of_an_origin_without_direct_gets_answers_none(server: Server) -> None:
    nc = await nats.connect(server.url)
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(name="PLAIN", subjects=["p.>"])
        await js.publish("p.1", b"m1")
        await js.add_stream(name="PLAINM", mirror=StreamSource(name="PLAIN"), allow_direct=True)
        info = await wait_last_seq(js, "PLAINM", 1)
        assert info.config.mirror_direct is False
        await js.delete_stream("PLAIN")
        assert await direct_get(nc, "$JS.API.DIRECT.GET.PLAIN", {"seq": 1}) is None
        # Its own direct gets it answers.
        own = await direct_get(nc, "$JS.API.DIRECT.GET.PLAINM", {"seq": 1})
        assert own is not None and own.data == b"m1"
    finally:
        await nc.close()
