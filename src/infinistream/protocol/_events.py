"""Events a NATS client sends to the server, as produced by :class:`Parser`.

msgspec structs with ``gc=False`` are the cheapest immutable records to build
from Python (faster than NamedTuple or ``__slots__`` classes), and the PUB
path creates one per frame.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import msgspec

__all__ = [
    "PING_EVENT",
    "PONG_EVENT",
    "Acks",
    "Connect",
    "Event",
    "HPub",
    "Ping",
    "Pong",
    "Pub",
    "Sub",
    "Unsub",
]


class Connect(msgspec.Struct, frozen=True, gc=False):
    """``CONNECT {json}``: the decoded JSON object, unvalidated."""

    options: dict[str, Any]


class Pub(msgspec.Struct, frozen=True, gc=False):
    """``PUB <subject> [reply] <#bytes>``."""

    subject: str
    reply: str | None
    payload: bytes


class Acks(msgspec.Struct, frozen=True, gc=False):
    """A run of plain JetStream acks: consecutive ``PUB $JS.ACK.… 0`` (or ``4`` with
    ``+ACK``) frames without a reply subject.

    A consumer's client sends one per message it is done with, so they arrive by the
    hundred; handed over as one event they cost one dispatch, not one each. Equivalent to
    a ``Pub`` per subject, with ``payload_bytes`` the payloads' total length.
    """

    subjects: list[str]
    payload_bytes: int


class HPub(msgspec.Struct, frozen=True, gc=False):
    """``HPUB <subject> [reply] <#hdr> <#total>``.

    ``headers`` is the header block exactly as the client sent it (nats-server
    does not validate it either); ``payload`` is what follows it.
    """

    subject: str
    reply: str | None
    headers: bytes
    payload: bytes


class Sub(msgspec.Struct, frozen=True, gc=False):
    """``SUB <subject> [queue] <sid>``."""

    subject: str
    queue: str | None
    sid: str


class Unsub(msgspec.Struct, frozen=True, gc=False):
    """``UNSUB <sid> [max_msgs]``.

    ``max_msgs`` is None when absent, zero or not a number: nats-server treats
    all of those as "unsubscribe now", so consumers need only one check.
    """

    sid: str
    max_msgs: int | None


class Ping(msgspec.Struct, frozen=True, gc=False):
    """``PING``."""


class Pong(msgspec.Struct, frozen=True, gc=False):
    """``PONG``."""


PING_EVENT = Ping()
PONG_EVENT = Pong()

Event: TypeAlias = Connect | Pub | Acks | HPub | Sub | Unsub | Ping | Pong
