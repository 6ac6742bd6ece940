"""STREAM.NAMES and STREAM.LIST with a subject filter list the streams with a subject that
collides with it (nats-server's SubjectsCollide): the same requests against an agent and
nats-server 2.15.1, the same answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from support.servers import both_servers

server_url = both_servers()

STREAMS = {"ONE": ["a.*.q"], "TWO": ["a.b.c.>"], "THREE": ["c.d", "e"], "FOUR": ["a.b.c"]}


@pytest.fixture
async def nc(server_url: str) -> AsyncIterator[Client]:
    client = await nats.connect(server_url)
    for name, subjects in STREAMS.items():
        # The same create again is no change, on both servers.
        resp = await api(client, f"STREAM.CREATE.{name}", {"name": name, "subjects": subjects})
        assert "error" not in resp, resp
    yield client
    await client.close()


async def api(nc: Client, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = await nc.request("$JS.API." + subject, json.dumps(body).encode(), timeout=10)
    return json.loads(reply.data)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("subject", "names"),
    [
        # Neither matches the other, but a.x.q is matched by both.
        ("a.x.*", ["ONE"]),
        ("a.b.*", ["FOUR", "ONE"]),
        ("a.*.c.*", ["TWO"]),
        ("a.>", ["FOUR", "ONE", "TWO"]),
        (">", ["FOUR", "ONE", "THREE", "TWO"]),
        ("*", ["THREE"]),
        ("c.*", ["THREE"]),
        ("z.z", []),
    ],
)
async def test_names_and_list_with_a_subject_filter(
    nc: Client, subject: str, names: list[str]
) -> None:
    resp = await api(nc, "STREAM.NAMES", {"subject": subject})
    assert (resp["streams"] or [], resp["total"]) == (names, len(names))
    resp = await api(nc, "STREAM.LIST", {"subject": subject})
    assert [s["config"]["name"] for s in resp["streams"] or []] == names
