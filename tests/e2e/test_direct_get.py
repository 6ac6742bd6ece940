"""DIRECT.GET: messages answered as themselves, with nats-server's headers and status codes.

Compared with nats-server 2.15.1 answering the same requests.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

import pytest
from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from support.moduleagent import one_agent_per_module

agent, no_streams = one_agent_per_module()

DIRECT = "$JS.API.DIRECT.GET."


async def five(js: JetStreamContext, *, allow_direct: bool = True) -> None:
    """Stream S: s.a, s.b, s.a (with header H), s.c, s.b as sequences 1..5, payloads m1..m5."""
    await js.add_stream(name="S", subjects=["s.>"], allow_direct=allow_direct)
    for i, subject in enumerate(["s.a", "s.b", "s.a", "s.c", "s.b"], start=1):
        headers = {"H": "2"} if i == 3 else None
        await js.publish(subject, f"m{i}".encode(), headers=headers)


Reply = tuple[dict[str, str], bytes]


async def direct(nc: Client, subject: str, body: Any = b"", timeout: float = 5) -> list[Reply]:
    """Send one direct get; collect the replies up to a status or a lone message."""
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        await nc.publish(DIRECT + subject, body, reply=inbox)
        replies: list[Reply] = []
        while True:
            msg = await sub.next_msg(timeout=timeout)
            headers = dict(msg.headers or {})
            replies.append((headers, msg.data))
            # A batch goes on until its EOB status; a single get is one message.
            if "Status" in headers or "Nats-Num-Pending" not in headers:
                return replies
    finally:
        await sub.unsubscribe()


def status(reply: Reply) -> tuple[str, str]:
    headers, data = reply
    assert data == b""
    return headers["Status"], headers["Description"]


def without_stamp(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k != "Nats-Time-Stamp"}


async def test_direct_get_needs_allow_direct(nc: Client, js: JetStreamContext) -> None:
    await five(js, allow_direct=False)
    with pytest.raises(NoRespondersError):
        await nc.request(DIRECT + "S", b'{"seq": 1}', timeout=5)


async def test_direct_get_of_a_missing_stream_has_no_responders(nc: Client) -> None:
    with pytest.raises(NoRespondersError):
        await nc.request(DIRECT + "GHOST", b'{"seq": 1}', timeout=5)


async def test_enabling_allow_direct_by_update_serves_direct_gets(
    nc: Client, js: JetStreamContext
) -> None:
    await five(js, allow_direct=False)
    await js.update_stream(name="S", subjects=["s.>"], allow_direct=True)
    [(headers, data)] = await direct(nc, "S", {"seq": 1})
    assert (headers["Nats-Sequence"], data) == ("1", b"m1")


async def test_get_by_sequence_carries_the_message_headers(
    nc: Client, js: JetStreamContext
) -> None:
    await five(js)
    before = time.time()
    [(headers, data)] = await direct(nc, "S", {"seq": 2})
    assert data == b"m2"
    assert without_stamp(headers) == {
        "Nats-Stream": "S",
        "Nats-Subject": "s.b",
        "Nats-Sequence": "2",
    }
    stamp = datetime.fromisoformat(headers["Nats-Time-Stamp"].replace("Z", "+00:00"))
    assert before - 60 < stamp.timestamp() <= time.time() + 1


async def test_stored_headers_come_first(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    [(headers, data)] = await direct(nc, "S", {"seq": 3})
    assert data == b"m3"
    assert list(without_stamp(headers).items()) == [
        ("H", "2"),
        ("Nats-Stream", "S"),
        ("Nats-Subject", "s.a"),
        ("Nats-Sequence", "3"),
    ]


async def test_no_hdr_leaves_out_every_header(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    [(headers, data)] = await direct(nc, "S", {"seq": 3, "no_hdr": True})
    assert (headers, data) == ({}, b"m3")


async def test_last_by_subject(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    [(headers, data)] = await direct(nc, "S", {"last_by_subj": "s.b"})
    assert (headers["Nats-Sequence"], headers["Nats-Subject"], data) == ("5", "s.b", b"m5")


async def test_last_by_subject_in_the_request_subject(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    [(headers, data)] = await direct(nc, "S.s.a")
    assert (headers["Nats-Sequence"], data) == ("3", b"m3")
    [(headers, data)] = await direct(nc, "S.s.*")
    assert (headers["Nats-Sequence"], headers["Nats-Subject"]) == ("5", "s.b")


async def test_last_by_subject_in_the_request_subject_with_no_hdr(
    nc: Client, js: JetStreamContext
) -> None:
    await five(js)
    [(headers, data)] = await direct(nc, "S.s.a", {"no_hdr": True})
    assert (headers, data) == ({}, b"m3")


async def test_nats_py_direct_get_msg(js: JetStreamContext) -> None:
    await five(js)
    by_seq = await js.get_msg("S", 4, direct=True)
    assert (by_seq.subject, by_seq.seq, by_seq.data) == ("s.c", 4, b"m4")
    last = await js.get_msg("S", subject="s.a", direct=True)
    assert (last.seq, last.data) == (3, b"m3")
    assert last.headers is not None
    assert last.headers["H"] == "2"
    nxt = await js.get_msg("S", 3, subject="s.b", next=True, direct=True)
    assert nxt.seq == 5


async def test_next_by_subject(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    [(headers, _)] = await direct(nc, "S", {"next_by_subj": "s.b", "seq": 3})
    assert headers["Nats-Sequence"] == "5"
    [(headers, _)] = await direct(nc, "S", {"next_by_subj": "s.b"})
    assert headers["Nats-Sequence"] == "2"


async def test_batch_counts_down_pending_and_ends_with_eob(
    nc: Client, js: JetStreamContext
) -> None:
    await five(js)
    await js.delete_msg("S", 4)
    replies = await direct(nc, "S", {"seq": 1, "batch": 3})
    assert [(without_stamp(h), d) for h, d in replies[:3]] == [
        (
            {
                "Nats-Stream": "S",
                "Nats-Subject": "s.a",
                "Nats-Sequence": "1",
                "Nats-Num-Pending": "3",
                "Nats-Last-Sequence": "0",
            },
            b"m1",
        ),
        (
            {
                "Nats-Stream": "S",
                "Nats-Subject": "s.b",
                "Nats-Sequence": "2",
                "Nats-Num-Pending": "2",
                "Nats-Last-Sequence": "1",
            },
            b"m2",
        ),
        (
            {
                "H": "2",
                "Nats-Stream": "S",
                "Nats-Subject": "s.a",
                "Nats-Sequence": "3",
                "Nats-Num-Pending": "1",
                "Nats-Last-Sequence": "2",
            },
            b"m3",
        ),
    ]
    eob_headers, eob_data = replies[3]
    assert len(replies) == 4
    assert eob_data == b""
    assert eob_headers == {
        "Status": "204",
        "Description": "EOB",
        "Nats-Num-Pending": "1",
        "Nats-Last-Sequence": "3",
    }


async def test_batch_larger_than_the_stream_skips_deleted_messages(
    nc: Client, js: JetStreamContext
) -> None:
    await five(js)
    await js.delete_msg("S", 4)
    replies = await direct(nc, "S", {"seq": 1, "batch": 10})
    assert [h["Nats-Sequence"] for h, _ in replies[:-1]] == ["1", "2", "3", "5"]
    assert [h["Nats-Num-Pending"] for h, _ in replies[:-1]] == ["3", "2", "1", "0"]
    assert status(replies[-1]) == ("204", "EOB")
    assert (replies[-1][0]["Nats-Num-Pending"], replies[-1][0]["Nats-Last-Sequence"]) == ("0", "5")


async def test_batch_with_a_subject_filter(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    replies = await direct(nc, "S", {"next_by_subj": "s.a", "batch": 2})
    assert [(h["Nats-Sequence"], h["Nats-Num-Pending"]) for h, _ in replies[:-1]] == [
        ("1", "1"),
        ("3", "0"),
    ]
    assert status(replies[-1]) == ("204", "EOB")


async def test_batch_stops_at_max_bytes(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    replies = await direct(nc, "S", {"seq": 1, "batch": 10, "max_bytes": 5})
    assert [h["Nats-Sequence"] for h, _ in replies[:-1]] == ["1"]
    assert replies[-1][0] == {
        "Status": "204",
        "Description": "EOB",
        "Nats-Num-Pending": "4",
        "Nats-Last-Sequence": "1",
    }


async def test_batch_ignores_up_to_seq_without_multi_last(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    replies = await direct(nc, "S", {"seq": 1, "batch": 10, "up_to_seq": 2})
    assert [h["Nats-Sequence"] for h, _ in replies[:-1]] == ["1", "2", "3", "4", "5"]


async def test_batch_past_the_end_is_not_found(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    [reply] = await direct(nc, "S", {"seq": 99, "batch": 2})
    assert status(reply) == ("404", "Message Not Found")


@pytest.mark.parametrize(
    ("subject", "body"),
    [
        ("S", {"seq": 4}),
        ("S", {"seq": 99}),
        ("S", {"last_by_subj": "s.z"}),
        ("S", {"next_by_subj": "s.c", "seq": 5}),
        ("S.s.z", b""),
    ],
)
async def test_no_such_message_is_404(
    nc: Client, js: JetStreamContext, subject: str, body: Any
) -> None:
    await five(js)
    await js.delete_msg("S", 4)
    [reply] = await direct(nc, subject, body)
    assert status(reply) == ("404", "Message Not Found")


async def test_nats_py_raises_not_found_on_404(js: JetStreamContext) -> None:
    await five(js)
    with pytest.raises(NotFoundError):
        await js.get_msg("S", 42, direct=True)


@pytest.mark.parametrize("body", [b"", b"{}", b'{"seq": 0}', b'{"batch": 5}'])
async def test_request_naming_no_message_is_408_empty_request(
    nc: Client, js: JetStreamContext, body: bytes
) -> None:
    await five(js)
    [reply] = await direct(nc, "S", body)
    assert status(reply) == ("408", "Empty Request")


@pytest.mark.parametrize(
    ("subject", "body"),
    [
        ("S", {"seq": 1, "last_by_subj": "s.a"}),
        ("S", {"last_by_subj": "s.a", "next_by_subj": "s.a"}),
        ("S", {"last_by_subj": "s.a", "batch": 2}),
        ("S", {"seq": 1, "start_time": "2024-01-01T00:00:00Z"}),
        ("S.s.a", {"seq": 1}),
        ("S.s.a", {"batch": 2}),
    ],
)
async def test_conflicting_options_are_408_bad_request(
    nc: Client, js: JetStreamContext, subject: str, body: Any
) -> None:
    await five(js)
    [reply] = await direct(nc, subject, body)
    assert status(reply) == ("408", "Bad Request")


@pytest.mark.parametrize("subject", ["S", "S.s.a"])
async def test_malformed_json_is_408_malformed_request(
    nc: Client, js: JetStreamContext, subject: str
) -> None:
    await five(js)
    [reply] = await direct(nc, subject, b"{x")
    assert status(reply) == ("408", "Malformed Request")


async def test_direct_get_sees_a_new_message_at_once(nc: Client, js: JetStreamContext) -> None:
    await five(js)
    ack = await js.publish("s.a", b"fresh")
    [(headers, data)] = await direct(nc, "S.s.a")
    assert (headers["Nats-Sequence"], data) == (str(ack.seq), b"fresh")
