"""Priority groups (ADR-42) on an agent and on nats-server, with raw pull requests: the pinned
client (its Nats-Pin-Id, 423 for another pin, unpinning by CONSUMER.UNPIN and by timeout, the
advisories), overflow thresholds, prioritized requests, and the refusals; nats.js pinning
and unpinning. Then two agents serving one pinned consumer agree on its pin and its expiry."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from support.jsapi import api, error, status
from support.jsclient import run_js
from support.servers import Server

NEXT = "$JS.API.CONSUMER.MSG.NEXT.S."
ADVISORIES = "$JS.EVENT.ADVISORY.CONSUMER.*.S.C"
SECOND = 1_000_000_000
ZERO_TIME = "0001-01-01T00:00:00Z"


class Pull:
    """One raw pull request and what comes to its inbox."""

    def __init__(self, sub: Subscription) -> None:
        self.sub = sub

    @classmethod
    async def send(cls, nc: Client, body: dict[str, Any], consumer: str = "C") -> Pull:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish(NEXT + consumer, json.dumps(body).encode(), reply=inbox)
        await nc.flush()
        return cls(sub)

    async def next(self, timeout: float = 10) -> Msg:
        return await self.sub.next_msg(timeout=timeout)


def pin_of(msg: Msg) -> str:
    assert not status(msg)[0], msg.headers
    return (msg.headers or {}).get("Nats-Pin-Id", "")


def ask(group: str = "A", expires: float = 10, **fields: Any) -> dict[str, Any]:
    return {"batch": 1, "expires": int(expires * SECOND), "group": group, **fields}


async def setup(nc: Client, messages: int, **config: Any) -> None:
    created = await api(nc, "STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
    assert "error" not in created, created
    for i in range(messages):
        await nc.request(f"s.{i}", str(i).encode(), timeout=10)
    consumer = {"durable_name": "C", "ack_policy": "explicit", "priority_groups": ["A"], **config}
    answer = await api(nc, "CONSUMER.CREATE.S.C", {"stream_name": "S", "config": consumer})
    assert "error" not in answer, answer


async def advisory(sub: Subscription) -> dict[str, Any]:
    """The next pinned or unpinned advisory (the consumer's others are not of interest)."""
    while True:
        event: dict[str, Any] = json.loads((await sub.next_msg(timeout=10)).data)
        if "consumer_group_" in event["type"]:
            return event


async def test_the_pinned_client(server_nc: Client) -> None:
    nc = server_nc
    advisories = await nc.subscribe(ADVISORIES)
    await setup(nc, 5, priority_policy="pinned_client")
    info = await api(nc, "CONSUMER.INFO.S.C")
    assert info["config"]["priority_timeout"] == 120 * SECOND
    assert info["priority_groups"] == [{"group": "A", "pinned_ts": ZERO_TIME}]

    # The first request without a pin is served, and its client pinned.
    pin = pin_of(await (await Pull.send(nc, ask())).next())
    assert len(pin) == 22
    pinned = await advisory(advisories)
    assert pinned["type"] == "io.nats.jetstream.advisory.v1.consumer_group_pinned"
    assert (pinned["stream"], pinned["consumer"], pinned["group"]) == ("S", "C", "A")
    assert pinned["account"] == "$G" and "domain" not in pinned
    assert pinned["pinned_id"] == pin
    info = await api(nc, "CONSUMER.INFO.S.C")
    assert info["priority_groups"][0]["pinned_client_id"] == pin
    assert info["priority_groups"][0]["pinned_ts"] != ZERO_TIME

    # Another client waits while messages are there; another pin is refused on arrival.
    other = await Pull.send(nc, ask(expires=1))
    assert status(await other.next())[0] == "408"
    wrong = await Pull.send(nc, ask(id="NOT-THE-PIN"))
    assert status(await wrong.next()) == ("423", "Nats-Pin-Id mismatch")
    assert pin_of(await (await Pull.send(nc, ask(id=pin))).next()) == pin

    # Unpinned by the API: the old pin is refused once a message waits for someone.
    assert await api(nc, "CONSUMER.UNPIN.S.C", {"group": "A"}) == {
        "type": "io.nats.jetstream.api.v1.consumer_unpin_response"
    }
    unpinned = await advisory(advisories)
    assert unpinned["type"] == "io.nats.jetstream.advisory.v1.consumer_group_unpinned"
    assert (unpinned["group"], unpinned["reason"]) == ("A", "admin")
    stale = await Pull.send(nc, ask(id=pin))
    assert status(await stale.next())[:2] == ("423", "Nats-Wrong-Pin-Id")
    new_pin = pin_of(await (await Pull.send(nc, ask())).next())
    assert new_pin and new_pin != pin


async def test_a_pin_expires_without_requests_from_its_client(server_nc: Client) -> None:
    nc = server_nc
    advisories = await nc.subscribe(ADVISORIES)
    await setup(nc, 3, priority_policy="pinned_client", priority_timeout=SECOND)
    pin = pin_of(await (await Pull.send(nc, ask())).next())
    assert (await advisory(advisories))["pinned_id"] == pin
    # Served once the pin has expired, a second after its client's last request.
    waiting = await Pull.send(nc, ask(expires=10))
    new_pin = pin_of(await waiting.next())
    assert new_pin and new_pin != pin
    unpinned = await advisory(advisories)
    assert (unpinned["reason"], unpinned["group"]) == ("timeout", "A")
    assert (await advisory(advisories))["pinned_id"] == new_pin


async def test_overflow_serves_a_request_past_its_threshold(server_nc: Client) -> None:
    nc = server_nc
    await setup(nc, 3, priority_policy="overflow")
    # Three messages pending: a request asking for five waits.
    early = await Pull.send(nc, ask(expires=1, min_pending=5))
    assert status(await early.next())[0] == "408"
    at_three = await Pull.send(nc, ask(min_pending=3))
    assert (await at_three.next()).data == b"0"
    # One awaits its ack: a request asking for one awaiting is served.
    by_acks = await Pull.send(nc, ask(min_ack_pending=1))
    assert (await by_acks.next()).data == b"1"
    # Without thresholds, served as any pull request is.
    assert (await (await Pull.send(nc, ask())).next()).data == b"2"


async def test_prioritized_serves_the_lowest_priority_first(server_nc: Client) -> None:
    nc = server_nc
    await setup(nc, 0, priority_policy="prioritized")
    low = await Pull.send(nc, ask(priority=5))
    high = await Pull.send(nc, ask(priority=1))
    for _ in range(100):
        if (await api(nc, "CONSUMER.INFO.S.C"))["num_waiting"] == 2:
            break
        await asyncio.sleep(0.05)
    await nc.request("s.a", b"first", timeout=10)
    assert (await high.next()).data == b"first"
    await nc.request("s.b", b"second", timeout=10)
    assert (await low.next()).data == b"second"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"batch": 1}, ("400", "Bad Request - Priority Group missing")),
        (ask(group="B"), ("400", "Bad Request - Invalid Priority Group")),
        (ask(id="x"), ("400", "Bad Request - Not a Pinned Client Priority consumer")),
        (ask(priority=10), ("400", "Bad Request - Priority must be between 0 and 9")),
    ],
)
async def test_pull_requests_a_priority_consumer_refuses(
    server_nc: Client, body: dict[str, Any], expected: tuple[str, str]
) -> None:
    await setup(server_nc, 1, priority_policy="overflow")
    assert status(await (await Pull.send(server_nc, body)).next()) == expected


async def test_unpin_refusals(server_nc: Client) -> None:
    nc = server_nc
    await setup(nc, 0, priority_policy="pinned_client")
    for subject, body, expected in [
        ("S.C", {}, (400, 10025, "invalid JSON: consumer group not specified")),
        (
            "S.C",
            {"group": "not a name"},
            (
                400,
                10162,
                "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not"
                " exceed 16 characters",
            ),
        ),
        (
            "S.C",
            {"group": "B"},
            (400, 10160, "Provided priority group does not exist for this consumer"),
        ),
        ("S.NOPE", {"group": "A"}, (404, 10014, "consumer not found")),
        ("NOPE.C", {"group": "A"}, (404, 10059, "stream not found")),
    ]:
        answer = await api(nc, "CONSUMER.UNPIN." + subject, body)
        assert error(answer) == expected, (subject, body)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {"priority_policy": "pinned_client", "priority_groups": []},
            (400, 10159, "Setting PriorityPolicy requires at least one PriorityGroup to be set"),
        ),
        (
            {"priority_policy": "overflow", "priority_groups": ["A"], "deliver_subject": "d"},
            (400, 10178, "priority groups can not be used with push consumers"),
        ),
        (
            {"priority_groups": ["A"]},
            (400, 10196, "consumer can not have priority groups when policy is none"),
        ),
    ],
)
async def test_configs_refused(
    server_nc: Client, config: dict[str, Any], expected: tuple[int, int, str]
) -> None:
    await api(server_nc, "STREAM.CREATE.S", {"name": "S", "subjects": ["s.>"]})
    body = {"stream_name": "S", "config": {"durable_name": "C", **config}}
    assert error(await api(server_nc, "CONSUMER.CREATE.S.C", body)) == expected


async def test_two_agents_agree_on_the_pin(two_clients: list[Client]) -> None:
    first, second = two_clients
    first_advisories = await first.subscribe(ADVISORIES)
    second_advisories = await second.subscribe(ADVISORIES)
    await setup(first, 10, priority_policy="pinned_client", priority_timeout=2 * SECOND)
    pin = pin_of(await (await Pull.send(first, ask())).next())
    # The other agent keeps its own client waiting, and serves the pinned client.
    other = await Pull.send(second, ask(expires=1))
    assert status(await other.next())[0] == "408"
    wrong = await Pull.send(second, ask(id="NOT-THE-PIN"))
    assert status(await wrong.next()) == ("423", "Nats-Pin-Id mismatch")
    assert pin_of(await (await Pull.send(second, ask(id=pin))).next()) == pin
    info = await api(second, "CONSUMER.INFO.S.C")
    assert info["priority_groups"][0]["pinned_client_id"] == pin

    # Unpinned on one agent: the other pins its next client.
    await api(second, "CONSUMER.UNPIN.S.C", {"group": "A"})
    stale = await Pull.send(first, ask(id=pin))
    assert status(await stale.next())[0] == "423"
    pin2 = pin_of(await (await Pull.send(second, ask())).next())
    assert pin2 not in ("", pin)

    # The pinned client's requests on the first agent keep the pin past its timeout there too.
    for _ in range(3):
        await asyncio.sleep(1)
        assert pin_of(await (await Pull.send(first, ask(id=pin2))).next()) == pin2
    # Then it stops asking: a client waiting on the first agent is pinned once it expires.
    waiting = await Pull.send(first, ask(expires=10))
    pin3 = pin_of(await waiting.next())
    assert pin3 not in ("", pin2)
    # Advisories go to the subscribers of the agent that gave or lost the pin (core messages
    # do not cross agents).
    assert [await kinds(first_advisories, 3), await kinds(second_advisories, 2)] == [
        [("pinned", pin), ("unpinned", "timeout"), ("pinned", pin3)],
        [("unpinned", "admin"), ("pinned", pin2)],
    ]


async def kinds(sub: Subscription, count: int) -> list[tuple[str, str]]:
    """The next `count` pin advisories: what happened, and the pin or the reason."""
    out = []
    for _ in range(count):
        event = await advisory(sub)
        out.append((event["type"].rsplit("_", 1)[1], event.get("pinned_id", event.get("reason"))))
    return out


async def test_nats_js_pins_and_unpins(server: Server) -> None:
    run = await run_js("priority_client.mjs", server.url, server_log=server.log)
    assert run.steps == ["connect", "pinned fetch", "unpin"]
