"""Direct gets (handlers/direct_get.py) over a real SQLite store: the message with its own
headers and the direct get's fields after them, batches closed by EOB, and nats-server's 408s
and 404s."""

from __future__ import annotations

import re

from infinistream.handlers.direct_get import DirectGet
from support.apiaccount import Account, Outbox, fresh_agent

STAMP = rb"Nats-Time-Stamp: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d*[1-9])?Z\r\n"


async def stream_with_headers(account: Account) -> None:
    await account.create_stream(name="S", subjects=["s.>"], allow_direct=True)
    await account.publish("S", "s.a", b"one")
    await account.publish("S", "s.b", b"two", b"NATS/1.0\r\nA:  x  \r\nA: y\r\n\r\n")
    await account.publish("S", "s.a", b"three")


async def test_one_message_with_the_fields_after_its_own(account: Account) -> None:
    await stream_with_headers(account)
    ((headers, data),) = await account.messages("DIRECT.GET.S", {"seq": 2})
    assert data == b"two" and headers is not None
    assert re.fullmatch(
        rb"NATS/1\.0\r\nA:  x  \r\nA: y\r\nNats-Stream: S\r\nNats-Subject: s\.b\r\n"
        rb"Nats-Sequence: 2\r\n" + STAMP + rb"\r\n",
        headers,
    )
    ((headers, data),) = await account.messages("DIRECT.GET.S.s.a")
    assert data == b"three" and headers is not None
    assert headers.startswith(b"NATS/1.0\r\nNats-Stream: S\r\nNats-Subject: s.a\r\n")
    ((headers, _),) = await account.messages("DIRECT.GET.S", {"seq": 1, "no_hdr": True})
    assert headers is None


async def test_a_batch_ends_with_eob(account: Account) -> None:
    await stream_with_headers(account)
    got = await account.messages("DIRECT.GET.S", {"seq": 1, "batch": 2})
    assert [data for _, data in got] == [b"one", b"two", b""]
    pending = [re.search(rb"Nats-Num-Pending: (\d+)", h or b"") for h, _ in got[:2]]
    assert [int(m.group(1)) for m in pending if m] == [2, 1]
    assert got[2][0] == b"NATS/1.0 204 EOB\r\nNats-Num-Pending: 1\r\nNats-Last-Sequence: 2\r\n\r\n"


async def test_what_nats_server_refuses_with_408_or_404(account: Account) -> None:
    await stream_with_headers(account)
    cases = {
        b"": b"NATS/1.0 408 Empty Request\r\n\r\n",
        b"{}": b"NATS/1.0 408 Empty Request\r\n\r\n",
        b"{nope": b"NATS/1.0 408 Malformed Request\r\n\r\n",
        b'{"start_time": "2030-01-01"}': b"NATS/1.0 408 Malformed Request\r\n\r\n",
        b'{"seq": 1, "last_by_subj": "s.a"}': b"NATS/1.0 408 Bad Request\r\n\r\n",
        b'{"seq": 9}': b"NATS/1.0 404 Message Not Found\r\n\r\n",
    }
    for body, status in cases.items():
        assert await account.messages("DIRECT.GET.S", body) == [(status, b"")], body
    # With the subject in the subject, a body may only say no_hdr or max_bytes.
    bad = await account.messages("DIRECT.GET.S.s.a", {"seq": 1})
    assert bad == [(b"NATS/1.0 408 Bad Request\r\n\r\n", b"")]


async def test_nothing_serves_a_stream_without_direct_gets(account: Account) -> None:
    await account.create_stream(name="T", subjects=["t.>"])
    assert await account.messages("DIRECT.GET.T", {"seq": 1}) == []
    assert await account.messages("DIRECT.GET.NOSUCH", {"seq": 1}) == []


async def test_one_message_reads_metadata_once_and_follows_the_catalog(account: Account) -> None:
    await stream_with_headers(account)
    streams, meta = await fresh_agent(account)
    sent = Outbox()
    direct = DirectGet(streams, sent.send)
    tokens = ["$JS", "API", "DIRECT", "GET", "S"]
    assert await direct.serve(tokens, "r", b'{"seq": 2}')
    ((_, data),) = sent.to("r")
    assert data == b"two"
    # The catalog's marker and the stream's state came with the index.
    assert meta.counted() == 1
    # Another agent turns direct gets off: the marker read with the message says so, and
    # the stream no longer answers them.
    update = {"name": "S", "subjects": ["s.>"], "allow_direct": False}
    assert "error" not in await account.request("STREAM.UPDATE.S", update)
    assert not await direct.serve(tokens, "r", b'{"seq": 2}')
    assert sent.to("r") == []
    await account.streams.delete("S", b"")
    assert not await direct.serve(tokens, "r", b'{"seq": 2}')
