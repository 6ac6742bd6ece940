"""Which waiting pull request a consumer with a priority policy serves (consumer/priority.py);
tests/e2e/test_priority_groups.py runs the same rules against the agent and nats-server."""

from __future__ import annotations

from dataclasses import dataclass

from infinistream.consumer.config import ConsumerConfig
from infinistream.consumer.priority import choose, live_pin, pin, pin_expires_ns
from infinistream.consumer.records import ConsumerState, Pending

SECOND = 1_000_000_000


@dataclass
class Req:
    name: str
    group: str = "A"
    pin_id: str = ""
    priority: int = 0
    min_pending: int = 0
    min_ack_pending: int = 0


def pinned_cfg(timeout: int = 10 * SECOND) -> ConsumerConfig:
    return ConsumerConfig(
        priority_policy="pinned_client", priority_groups=["A"], priority_timeout=timeout
    )


def no_count() -> int:
    raise AssertionError("counted pending messages it did not need")


def test_without_a_pin_the_first_request_without_one_is_pinned() -> None:
    state = ConsumerState(uid="u")
    stale, fresh, later = Req("stale", pin_id="old"), Req("fresh"), Req("later", pin_id="x")
    choice = choose(pinned_cfg(), state, [stale, fresh, later], 5, no_count)
    # Requests met before it that carry a pin are refused; those after it are not looked at.
    assert choice.request is fresh and choice.refused == [stale]
    assert len(choice.new_pin) == 22 and not state.pin_id  # pinned only if it gets a message


def test_a_pin_serves_its_client_only() -> None:
    state = ConsumerState(uid="u")
    pin(state, "P", 100)
    other, unpinned, mine = Req("other", pin_id="Q"), Req("unpinned"), Req("mine", pin_id="P")
    choice = choose(pinned_cfg(), state, [other, unpinned, mine], 200, no_count)
    assert choice.request is mine and choice.refused == [other] and not choice.new_pin
    # Without its client's request, nothing is served: the others wait.
    choice = choose(pinned_cfg(), state, [unpinned], 200, no_count)
    assert choice.request is None and not choice.refused


def test_a_pin_expires_after_its_clients_last_request() -> None:
    cfg = pinned_cfg(timeout=10)
    state = ConsumerState(uid="u")
    pin(state, "P", 100)
    state.pin_seen_ns = 105
    assert pin_expires_ns(state, cfg) == 115
    assert live_pin(state, cfg, 114) == "P" and live_pin(state, cfg, 115) == ""
    waiting = Req("waiting")
    choice = choose(cfg, state, [waiting], 115, no_count)
    assert choice.expired == "P" and not state.pin_id
    assert choice.request is waiting and choice.new_pin


def test_prioritized_serves_the_lowest_priority_oldest_first() -> None:
    cfg = ConsumerConfig(priority_policy="prioritized", priority_groups=["A"])
    a, b, c = Req("a", priority=5), Req("b", priority=1), Req("c", priority=1)
    assert choose(cfg, ConsumerState(uid="u"), [a, b, c], 0, no_count).request is b


def test_overflow_serves_a_request_once_its_threshold_is_met() -> None:
    cfg = ConsumerConfig(priority_policy="overflow", priority_groups=["A"])
    state = ConsumerState(uid="u", pending={1: Pending(1, 1, 0, 0, 1), 2: Pending(2, 1, 0, 0, 2)})
    by_pending, by_acks = Req("p", min_pending=5), Req("a", min_ack_pending=3)
    assert choose(cfg, state, [by_pending, by_acks], 0, lambda: 4).request is None
    assert choose(cfg, state, [by_pending, by_acks], 0, lambda: 5).request is by_pending
    state.pending[3] = Pending(3, 1, 0, 0, 3)
    assert choose(cfg, state, [by_pending, by_acks], 0, lambda: 0).request is by_acks
    # A request without thresholds is served as under no policy.
    plain = Req("plain")
    assert choose(cfg, state, [by_pending, plain], 0, lambda: 0).request is plain
