"""What a connection tells its host of publishes on their way: a client with many publishes
in flight answers the PubAcks it reads with new publishes, often in several writes."""

from __future__ import annotations

from typing import Any

import pytest

from infinistream.security.auth import Authenticator
from infinistream.security.config import AuthConfig
from infinistream.server import connection
from infinistream.server.connection import ClientConnection, Subscription
from infinistream.settings import Settings


class Recorder:
    """A host that keeps, for each run of publishes, how many it had and its `more`."""

    def __init__(self) -> None:
        self.runs: list[tuple[int, bool]] = []

    def publish_run(
        self,
        conn: ClientConnection,
        subjects: list[bytes],
        replies: list[bytes | None],
        payloads: list[Any],
        more: bool = False,
    ) -> None:
        self.runs.append((len(subjects), more))

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the connection asked its host for {name}")


def _connection(host: Recorder) -> ClientConnection:
    conn = ClientConnection(host, Settings(), 1, Authenticator(AuthConfig()))  # type: ignore[arg-type]
    conn.verbose = False
    return conn


def _pubs(n: int, first: int = 0) -> bytes:
    return b"".join(b"PUB a _INBOX.x.%d 1\r\nx\r\n" % k for k in range(first, first + n))


async def test_a_client_owing_publishes_for_its_pubacks_has_more_on_the_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connection, "REFILL_SECONDS", 3600.0)
    host = Recorder()
    conn = _connection(host)
    conn.received(_pubs(1))  # nothing owed yet: a lone publish
    sub = Subscription(conn, "_INBOX.x.*", "1", None)
    conn.deliver_replies(sub, [b"_INBOX.x.%d" % k for k in range(4)], [b"{}"] * 4)
    conn.received(_pubs(3))  # one still owed
    conn.received(_pubs(1, 3))  # all answered
    conn.received(_pubs(1, 4))  # more than owed: nothing is
    assert host.runs == [(1, False), (3, True), (1, False), (1, False)]


async def test_owed_publishes_are_expected_only_for_a_moment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connection, "REFILL_SECONDS", -1.0)  # already past
    host = Recorder()
    conn = _connection(host)
    sub = Subscription(conn, "_INBOX.x.*", "1", None)
    conn.deliver_replies(sub, [b"_INBOX.x.%d" % k for k in range(4)], [b"{}"] * 4)
    conn.received(_pubs(1))
    assert host.runs == [(1, False)]


async def test_a_read_that_ends_inside_a_frame_has_more_on_the_way() -> None:
    host = Recorder()
    conn = _connection(host)
    data = _pubs(3)
    conn.received(data[:-5])
    conn.received(data[-5:])
    assert host.runs == [(2, True), (1, False)]
