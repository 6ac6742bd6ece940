"""Events a NATS client sends to the server, as produced by :class:`Parser`.

msgspec structs with ``gc=False`` are the cheapest immutable records to build
from Python (faster than NamedTuple or ``__slots__`` classes), and the PUB
path creates one per frame.
"""

from __future__ import annotations

from typing import Any, Final, TypeAlias

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
    "Pubs",
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


class Pubs(msgspec.Struct, frozen=True, gc=False):
    """A run of consecutive ``PUB`` frames, side by side: the subjects and replies as the
    bytes the client sent, and the payloads.

    A publisher with many publishes in flight sends them back to back, thousands a second;
    handed over as one event they cost one dispatch, and no subject is decoded until the
    layer that needs text does so (once for a run of one subject). Equivalent to a ``Pub``
    per frame (`pubs()`), with ``payload_bytes`` the payloads' total length.

    A large payload may be a view of the bytes read, so that it is not copied on its way to
    its record; ``bytes(payload)`` makes it bytes where something keeps or reads it (and
    costs nothing for one that is bytes already).
    """

    subjects: list[bytes]
    replies: list[bytes | None]
    payloads: list[bytes | memoryview]
    payload_bytes: int

    def pubs(self) -> list[Pub]:
        """The run as one ``Pub`` per frame, subjects and replies decoded as the parser
        decodes a single frame's."""
        return [
            Pub(s.decode(_ENC, _ERRS), None if r is None else r.decode(_ENC, _ERRS), bytes(p))
            for s, r, p in zip(self.subjects, self.replies, self.payloads, strict=True)
        ]


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


# Subjects are opaque bytes to nats-server; surrogateescape keeps any byte sequence
# round-trippable through str, as the parser decodes them.
_ENC: Final = "utf-8"
_ERRS: Final = "surrogateescape"

PING_EVENT = Ping()
PONG_EVENT = Pong()

Event: TypeAlias = Connect | Pub | Pubs | Acks | HPub | Sub | Unsub | Ping | Pong
