"""PubAcks reach every subscription that matches the reply subject, wildcard and literal."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.agentproc import AgentProcess, running_agent

MSG = re.compile(rb"MSG (\S+) (\S+) (\d+)\r\n")


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[AgentProcess]:
    with running_agent(tmp_path / "store", "--linger", "10ms") as proc:
        yield proc


async def _read_until(reader: asyncio.StreamReader, count: int) -> list[tuple[bytes, bytes]]:
    buf = b""
    found: list[tuple[bytes, bytes]] = []
    while len(found) < count:
        buf += await asyncio.wait_for(reader.read(65536), 5)
        found = [(m.group(1), m.group(2)) for m in MSG.finditer(buf)]
    return found


async def test_literal_and_wildcard_reply_subscriptions_both_get_pubacks(
    agent: AgentProcess,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", agent.port)
    await reader.readline()
    body = b'{"name":"R","subjects":["r.>"]}'
    writer.write(
        b'CONNECT {"verbose":false,"headers":true}\r\n'
        b"SUB _INBOX.c 9\r\n"
        b"PUB $JS.API.STREAM.CREATE.R _INBOX.c %d\r\n%s\r\n" % (len(body), body)
    )
    await _read_until(reader, 1)
    # One wildcard inbox, and a literal subscription to one of its reply subjects.
    writer.write(
        b"SUB _INBOX.a.* 1\r\nSUB _INBOX.a.7 2\r\n"
        b"PUB r.x _INBOX.a.6 1\r\na\r\nPUB r.x _INBOX.a.7 1\r\nb\r\nPUB r.x _INBOX.a.8 1\r\nc\r\n"
    )
    acks = await _read_until(reader, 4)
    assert sorted(acks) == [
        (b"_INBOX.a.6", b"1"),
        (b"_INBOX.a.7", b"1"),
        (b"_INBOX.a.7", b"2"),
        (b"_INBOX.a.8", b"1"),
    ]
    writer.close()


async def test_a_reply_subscription_at_its_message_limit_gets_no_more_pubacks(
    agent: AgentProcess,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", agent.port)
    await reader.readline()
    body = b'{"name":"L","subjects":["l.>"]}'
    writer.write(
        b'CONNECT {"verbose":false,"headers":true}\r\n'
        b"SUB _INBOX.c 9\r\n"
        b"PUB $JS.API.STREAM.CREATE.L _INBOX.c %d\r\n%s\r\n" % (len(body), body)
    )
    await _read_until(reader, 1)
    # Three acks of one batch for one inbox; the subscription ends after two of them.
    writer.write(
        b"SUB _INBOX.m.* 3\r\nUNSUB 3 2\r\n"
        b"PUB l.x _INBOX.m.1 1\r\na\r\nPUB l.x _INBOX.m.2 1\r\nb\r\nPUB l.x _INBOX.m.3 1\r\nc\r\n"
        b"PING\r\n"
    )
    acks = await _read_until(reader, 2)
    buf = b""
    with contextlib.suppress(TimeoutError):
        buf = await asyncio.wait_for(reader.read(65536), 0.5)
    assert acks == [(b"_INBOX.m.1", b"3"), (b"_INBOX.m.2", b"3")]
    assert b"MSG" not in buf
    writer.close()
