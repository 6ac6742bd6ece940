"""Priority groups (ADR-42): which waiting pull request a consumer with a priority policy serves.

nats-server keeps one pin per consumer (server/consumer.go nextWaiting, assignNewPinId,
setPinnedTimer); here the pin lives in the consumer's state in the metadata store, committed
with the claim that hands out its first message, so every agent serving the consumer sees the
same pin, and the same expiry: `priority_timeout` after the pinned client's last pull request
(recorded by whichever agent received it) or after the pin was given.

- `pinned_client`: while a pin holds, only requests carrying its id (`Nats-Pin-Id`, the
  request's `id`) are served; those without an id wait, those with another id are refused
  (423). Without a pin, the first request without an id is served and its client pinned.
- `overflow`: a request with `min_pending` or `min_ack_pending` is served only while the
  consumer has at least that many messages pending or awaiting an ack.
- `prioritized`: the request with the lowest `priority` (0 first), oldest first among equals.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from infinistream.consumer.config import ConsumerConfig
from infinistream.consumer.records import ConsumerState

PIN_HEADER = b"Nats-Pin-Id"
_NUID_ALPHABET = string.ascii_letters + string.digits


class Asking(Protocol):
    """What a waiting pull request says of its priority group."""

    @property
    def group(self) -> str: ...
    @property
    def pin_id(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def min_pending(self) -> int: ...
    @property
    def min_ack_pending(self) -> int: ...


R = TypeVar("R", bound=Asking)


@dataclass(slots=True)
class Choice(Generic[R]):
    """The request one claim serves, and what the choice changed."""

    request: R | None = None
    # Requests carrying a pin that is not (or no longer) the consumer's: answered 423.
    refused: list[R] = field(default_factory=list)
    # The pin `request` gets if the claim hands it something ("": it holds it already or the
    # policy does not pin).
    new_pin: str = ""
    # The pin expired in this choice (the state no longer holds it).
    expired: str = ""


def new_pin_id() -> str:
    """A pin id, like nats-server's NUIDs: 22 characters of base 62."""
    return "".join(secrets.choice(_NUID_ALPHABET) for _ in range(22))


def pin_expires_ns(state: ConsumerState, cfg: ConsumerConfig) -> int:
    """When the consumer's pin expires (wall ns); 0 without one."""
    if not state.pin_id:
        return 0
    return max(state.pinned_ns, state.pin_seen_ns) + cfg.priority_timeout


def live_pin(state: ConsumerState, cfg: ConsumerConfig, now_ns: int) -> str:
    """The pin that holds now ("": none, or it expired)."""
    if state.pin_id and now_ns < pin_expires_ns(state, cfg):
        return state.pin_id
    return ""


def unpin(state: ConsumerState) -> None:
    state.pin_id = ""
    state.pinned_ns = 0
    state.pin_seen_ns = 0


def choose(
    cfg: ConsumerConfig,
    state: ConsumerState,
    waiting: Iterable[R],
    now_ns: int,
    pending_count: Callable[[], int],
) -> Choice[R]:
    """The request to serve now among `waiting` (oldest first, those still listening), by the
    consumer's priority policy. Expires a pin that timed out, in `state`. `pending_count`: the
    messages not yet handed out, counted only if an overflow request asks for it."""
    policy = cfg.priority_policy
    choice: Choice[R] = Choice()
    if policy == "pinned_client":
        return _pinned(cfg, state, waiting, now_ns, choice)
    if policy == "prioritized":
        best: R | None = None
        for req in waiting:
            if best is None or req.priority < best.priority:
                best = req
        choice.request = best
        return choice
    if policy == "overflow":
        for req in waiting:
            if _overflows(req, state, pending_count):
                choice.request = req
                return choice
        return choice
    choice.request = next(iter(waiting), None)
    return choice


def _overflows(req: Asking, state: ConsumerState, pending_count: Callable[[], int]) -> bool:
    if req.min_pending <= 0 and req.min_ack_pending <= 0:
        return True
    if 0 < req.min_ack_pending <= len(state.pending):
        return True
    return 0 < req.min_pending <= pending_count()


def _pinned(
    cfg: ConsumerConfig, state: ConsumerState, waiting: Iterable[R], now_ns: int, choice: Choice[R]
) -> Choice[R]:
    if state.pin_id and not live_pin(state, cfg, now_ns):
        choice.expired = state.pin_id
        unpin(state)
    pin = state.pin_id
    for req in waiting:
        if pin and req.pin_id == pin:
            choice.request = req
            return choice
        if req.pin_id:
            choice.refused.append(req)
        elif not pin:
            choice.request = req
            choice.new_pin = new_pin_id()
            return choice
    return choice


def pin(state: ConsumerState, pin_id: str, now_ns: int) -> None:
    """Pin the consumer to `pin_id` from now."""
    state.pin_id = pin_id
    state.pinned_ns = now_ns
    state.pin_seen_ns = now_ns
