"""Stream bytes counted as nats-server counts them, side by side with nats-server.

nats-server counts a message for its store record (filestore.go fileStoreMsgSize: 30 bytes of
framing, 34 with headers, plus subject, headers and data; memStoreMsgSize for memory streams),
in a stream's `state.bytes`, the account's `storage` and `memory`, `max_bytes` and its discard
decisions. The same publishes to an agent and to nats-server leave the same bytes and cut at
the same message; `max_msg_size` refuses the same message.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from support.servers import Server
from support.sidebyside import SideBySide, assert_same, connected_side_by_side, running_side_by_side


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    with running_side_by_side(tmp_path_factory.mktemp("bytes")) as pair:
        yield pair


@pytest.fixture
async def both(servers: tuple[Server, Server]) -> AsyncIterator[SideBySide]:
    async with connected_side_by_side(servers) as pair:
        yield pair


_names = itertools.count(1)


async def create(both: SideBySide, **config: Any) -> str:
    name = f"B{next(_names)}"
    body = json.dumps({"name": name, "subjects": [f"{name}.>"], **config}).encode()
    agent, nats_server = await both.request(f"STREAM.CREATE.{name}", body)
    assert "error" not in nats_server and "error" not in agent, (agent, nats_server)
    return name


async def publish(
    both: SideBySide, subject: str, data: bytes, headers: dict[str, str] | None = None
) -> tuple[Any, Any]:
    """The PubAck (or refusal) of each server, as JSON."""

    async def send(nc: Any) -> Any:
        msg = await nc.request(subject, data, timeout=10, headers=headers)
        return json.loads(msg.data)

    return await both.each(send)


async def state(both: SideBySide, name: str) -> tuple[Any, Any]:
    agent, nats_server = await both.request(f"STREAM.INFO.{name}")
    return agent["state"], nats_server["state"]


@pytest.mark.parametrize("storage", ["file", "memory"])
@pytest.mark.parametrize(
    "headers", [None, {"A": "1"}, {"Nats-Msg-Id": "id-1", "Long-Header": "x" * 100}]
)
async def test_one_message_counts_the_same(
    both: SideBySide, storage: str, headers: dict[str, str] | None
) -> None:
    name = await create(both, storage=storage)
    assert_same(*await publish(both, f"{name}.subject", b"hello", headers))
    agent, nats_server = await state(both, name)
    assert_same(agent, nats_server)
    assert agent["bytes"] > 0
    # The account's storage (or memory) holds what the stream counts.
    before = await both.request("INFO")
    await both.request(f"STREAM.DELETE.{name}")
    after = await both.request("INFO")
    key = "memory" if storage == "memory" else "storage"
    freed = [b[key] - a[key] for b, a in zip(before, after, strict=True)]
    assert freed == [agent["bytes"], nats_server["bytes"]]


@pytest.mark.parametrize("discard", ["old", "new"])
@pytest.mark.parametrize("storage", ["file", "memory"])
async def test_max_bytes_cuts_at_the_same_message(
    both: SideBySide, discard: str, storage: str
) -> None:
    name = await create(both, max_bytes=400, discard=discard, storage=storage)
    for i in range(12):
        headers = {"H": "v" * i} if i % 2 else None
        assert_same(*await publish(both, f"{name}.s{i % 3}", b"d" * (7 * i), headers))
        assert_same(*await state(both, name))
    agent, _ = await state(both, name)
    assert agent["bytes"] <= 400
    await both.request(f"STREAM.DELETE.{name}")


async def test_max_msg_size_refuses_the_same_message(both: SideBySide) -> None:
    name = await create(both, max_msg_size=64)
    for size in (0, 32, 63, 64, 65, 100):
        assert_same(*await publish(both, f"{name}.a", b"x" * size))
        assert_same(*await publish(both, f"{name}.a", b"x" * size, {"K": "v"}))
    assert_same(*await state(both, name))
    await both.request(f"STREAM.DELETE.{name}")


async def test_purges_and_deletes_free_the_same_bytes(both: SideBySide) -> None:
    name = await create(both)
    for i in range(6):
        await publish(both, f"{name}.s{i % 2}", b"p" * (i * 11), {"I": str(i)})
    assert_same(*await both.request(f"STREAM.MSG.DELETE.{name}", b'{"seq":2}'))
    assert_same(*await state(both, name))
    assert_same(*await both.request(f"STREAM.PURGE.{name}", f'{{"filter":"{name}.s1"}}'.encode()))
    assert_same(*await state(both, name))
    await both.request(f"STREAM.DELETE.{name}")
