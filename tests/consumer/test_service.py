"""The consumer service: deleting consumers, removing idle ones, and agents sharing a durable.

Two nodes on one SQLite file stand for two agents (tests/e2e/test_consumer_agents.py runs real
agent processes the same way).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from infinistream.consumer.store import LoadedConsumer
from infinistream.handlers.consumers import ConsumerApi
from infinistream.jetstream import errors

from .harness import STREAM, ManualClock, Node, make_node

SECOND = 10**9
WAIT = json.dumps({"batch": 1, "expires": 60 * SECOND}).encode()


@pytest.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[tuple[Node, Node]]:
    """Two agents on one metadata file and one object store, and one clock."""
    manual = ManualClock()
    a = await make_node(tmp_path / "meta.db", manual)
    b = await make_node(tmp_path / "meta.db", manual)
    yield a, b
    await a.close()
    await b.close()


async def touch(node: Node, name: str) -> None:
    """Another agent writes the consumer's state (a pull request counts as activity)."""

    def change(loaded: LoadedConsumer) -> bool:
        loaded.state.last_active_ns = node.time.ns
        return True

    assert (await node.store.change_state(STREAM, name, change)).written


async def gone(node: Node, name: str) -> bool:
    keys = node.store.keys(STREAM, name)
    items = await node.meta.get_many([keys.config, keys.state, keys.push])
    return not items


# -- delete ------------------------------------------------------------------------------------


async def test_a_delete_wins_over_state_written_since_the_read(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    loaded = await a.create("C", ack_policy="explicit", deliver_subject="out.c")
    await touch(b, "C")
    assert await a.service.delete(loaded)
    assert await gone(a, "C")


async def test_a_delete_decided_from_the_state_needs_that_state(
    nodes: tuple[Node, Node],
) -> None:
    a, b = nodes
    loaded = await a.create("C", ack_policy="explicit")
    await touch(b, "C")
    assert not await a.service.delete(loaded, only_if_untouched=True)
    fresh = await a.store.load(STREAM, "C")
    assert fresh is not None and await a.service.delete(fresh, only_if_untouched=True)
    assert await gone(a, "C")


async def test_a_delete_never_takes_a_consumer_reconfigured_since_the_read(
    nodes: tuple[Node, Node],
) -> None:
    a, b = nodes
    loaded = await a.create("C", ack_policy="explicit", deliver_subject="out.c")
    await b.reconfigure("C", deliver_subject="out.d")
    for only_if_untouched in (False, True):
        assert not await a.service.delete(loaded, only_if_untouched=only_if_untouched)
    fresh = await a.store.load(STREAM, "C")
    assert fresh is not None and fresh.record.config.deliver_subject == "out.d"
    await a.service.directory.refresh()
    assert a.service.directory.target(STREAM, "C") == fresh.record.target()


async def test_the_delete_api_is_not_refused_for_an_ack_landing_meanwhile(
    nodes: tuple[Node, Node],
) -> None:
    a, b = nodes
    await a.create("C", ack_policy="explicit")
    api = ConsumerApi(a.meta, a.catalog, a.service)
    # Another agent commits the consumer's state between the API's read and its delete.
    a.meta.before_next_txn = lambda: touch(b, "C")
    reply = await api.delete(STREAM, "C")
    assert reply["success"] is True
    assert await gone(a, "C")
    with pytest.raises(errors.ApiError) as info:
        await api.delete(STREAM, "C")
    assert info.value.err_code == errors.consumer_not_found().err_code


# -- inactive consumers ------------------------------------------------------------------------


async def test_a_consumer_idle_past_its_threshold_is_removed(nodes: tuple[Node, Node]) -> None:
    a, _ = nodes
    await a.create("idle", ack_policy="explicit", inactive_threshold=10 * SECOND)
    await a.create("durable", ack_policy="explicit")
    a.time.advance(9)
    await a.service.remove_inactive()
    assert await a.store.load(STREAM, "idle") is not None
    a.time.advance(1)
    await a.service.remove_inactive()
    assert await gone(a, "idle")
    assert await a.store.load(STREAM, "durable") is not None


async def test_a_consumer_used_since_it_was_found_idle_is_kept(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    await a.create("C", ack_policy="explicit", inactive_threshold=10 * SECOND)
    a.time.advance(10)
    # Another agent serves a pull request between this agent's read and its delete.
    a.meta.before_next_txn = lambda: touch(b, "C")
    await a.service.remove_inactive()
    assert await a.store.load(STREAM, "C") is not None


async def test_requests_waiting_here_keep_a_consumer_in_use(nodes: tuple[Node, Node]) -> None:
    a, b = nodes
    await a.create("C", ack_policy="explicit", inactive_threshold=10 * SECOND)
    await a.fetch("C", "_INBOX.a", WAIT)
    a.time.advance(10)
    await a.service.remove_inactive()
    # Marked active for other agents to see: their sweep keeps it too.
    await b.service.remove_inactive()
    loaded = await b.store.load(STREAM, "C")
    assert loaded is not None and loaded.state.last_active_ns == a.time.ns


# -- requests ----------------------------------------------------------------------------------


async def test_a_request_over_the_consumers_limits_is_answered_409(
    nodes: tuple[Node, Node],
) -> None:
    a, _ = nodes
    await a.create("C", ack_policy="explicit", max_batch=2)
    await a.fetch("C", "_INBOX.a", json.dumps({"batch": 5}).encode())
    assert a.outbox.statuses("_INBOX.a") == [b"NATS/1.0 409 Exceeded MaxRequestBatch of 2"]
    assert a.service.pulls.waiting_count(STREAM, "C") == 0


# -- agents sharing a durable ------------------------------------------------------------------


async def until_either(nodes: tuple[Node, Node], done: Callable[[], bool]) -> None:
    """Wait until `done()` holds, looking again after each message to either node."""
    waits = [asyncio.ensure_future(node.outbox.until(done)) for node in nodes]
    finished, left = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in left:
        task.cancel()
    for task in finished:
        task.result()


@pytest.fixture
async def started(tmp_path: Path) -> AsyncIterator[tuple[Node, Node]]:
    """Two agents watching metadata for each other's commits."""
    a = await make_node(tmp_path / "meta.db", start=True)
    b = await make_node(tmp_path / "meta.db", start=True)
    yield a, b
    await a.close()
    await b.close()


async def test_two_agents_hand_out_each_message_of_a_durable_once(
    started: tuple[Node, Node],
) -> None:
    a, b = started
    await a.create("C", ack_policy="explicit")
    many = json.dumps({"batch": 100, "expires": 60 * SECOND}).encode()
    await a.fetch("C", "_INBOX.a", many)
    await b.fetch("C", "_INBOX.b", many)
    # Published through agent a: b's request is woken by the watch of a's commit.
    for i in range(0, 40, 10):
        await a.publish(*[(f"orders.{j}", b"%d" % j) for j in range(i, i + 10)])

    def got() -> list[bytes]:
        return [
            m[3]
            for n, inbox in ((a, "_INBOX.a"), (b, "_INBOX.b"))
            for m in n.outbox.messages(inbox)
        ]

    await until_either(started, lambda: len(got()) >= 40)
    assert sorted(got(), key=int) == [b"%d" % j for j in range(40)]


NO_WAIT = json.dumps({"batch": 1, "no_wait": True}).encode()
ACK_WAIT = 10 * SECOND


def answered(node: Node, inbox: str) -> Callable[[], bool]:
    """Whether a request to `inbox` got a message or a status."""
    return lambda: bool(node.outbox.at(inbox))


async def test_a_claim_that_goes_out_late_starts_its_ack_wait_again(
    nodes: tuple[Node, Node],
) -> None:
    a, b = nodes
    await a.create("C", ack_policy="explicit", ack_wait=ACK_WAIT)
    await a.publish(("orders.1", b"one"))

    async def held_up() -> None:
        # A busy agent: the claim commits an ack wait later than it was planned.
        a.time.advance(ACK_WAIT / SECOND + 1)

    a.meta.before_next_txn = held_up
    await a.fetch("C", "_INBOX.a", NO_WAIT)
    await a.outbox.until(lambda: len(a.outbox.messages("_INBOX.a")) == 1)
    # Just sent: another agent's request finds nothing due, rather than a second copy.
    await b.fetch("C", "_INBOX.b", NO_WAIT)
    await b.outbox.until(answered(b, "_INBOX.b"))
    assert b.outbox.messages("_INBOX.b") == []
    assert b.outbox.statuses("_INBOX.b") == [b"NATS/1.0 404 No Messages"]


async def test_a_late_claim_handed_out_again_meanwhile_is_not_sent(
    nodes: tuple[Node, Node],
) -> None:
    a, b = nodes
    await a.create("C", ack_policy="explicit", ack_wait=ACK_WAIT)
    await a.publish(("orders.1", b"one"))

    async def redelivered_elsewhere() -> None:
        await b.fetch("C", "_INBOX.b", NO_WAIT)
        await b.outbox.until(answered(b, "_INBOX.b"))

    async def held_up() -> None:
        a.time.advance(ACK_WAIT / SECOND + 1)
        # Past its ack wait before it went out: another agent hands the message out again.
        a.meta.before_next_txn = redelivered_elsewhere

    a.meta.before_next_txn = held_up
    await a.fetch("C", "_INBOX.a", NO_WAIT)
    await a.outbox.until(answered(a, "_INBOX.a"))
    if not b.outbox.at("_INBOX.b"):
        await redelivered_elsewhere()
    # The client gets the message once: from the agent that handed it out last.
    assert a.outbox.messages("_INBOX.a") == []
    assert [m[3] for m in b.outbox.messages("_INBOX.b")] == [b"one"]


async def test_a_request_on_one_agent_is_woken_by_a_publish_on_another(
    started: tuple[Node, Node],
) -> None:
    a, b = started
    await a.create("C", ack_policy="explicit")
    await b.fetch("C", "_INBOX.b", WAIT)
    await a.publish(("orders.1", b"one"))
    await b.outbox.until(lambda: len(b.outbox.messages("_INBOX.b")) == 1)


async def test_an_ack_on_another_agent_frees_max_ack_pending_here(
    started: tuple[Node, Node],
) -> None:
    a, b = started
    await a.create("C", ack_policy="explicit", max_ack_pending=1)
    await a.publish(("orders.1", b"one"), ("orders.2", b"two"))
    await a.fetch("C", "_INBOX.a", json.dumps({"batch": 2, "expires": 60 * SECOND}).encode())
    await a.outbox.until(lambda: len(a.outbox.messages("_INBOX.a")) == 1)
    b.ack(a.outbox.messages("_INBOX.a")[0])
    await a.outbox.until(lambda: len(a.outbox.messages("_INBOX.a")) == 2)


async def test_a_deliver_group_on_two_agents_gets_each_message_once(
    started: tuple[Node, Node],
) -> None:
    a, b = started
    await a.create("P", ack_policy="explicit", deliver_subject="out.g", deliver_group="g")
    await b.service.directory.refresh()
    for node in (a, b):
        node.subscribe("out.g")
    await a.publish(*[(f"orders.{j}", b"%d" % j) for j in range(30)])

    def got() -> list[bytes]:
        return [m[3] for n in (a, b) for m in n.outbox.messages("out.g")]

    await until_either(started, lambda: len(got()) >= 30)
    assert sorted(got(), key=int) == [b"%d" % j for j in range(30)]
