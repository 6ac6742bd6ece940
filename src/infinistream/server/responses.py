"""Replies to requests that came in through a service import, on their way back to the
importing account.

A request that account B sends on a subject it imports from account A is served in A with a
reply subject of A's own, `_R_.<id>` (as nats-server's response service imports); what A
sends there goes to B's subscribers of the requester's reply subject. A singleton export's
route serves one answer; a streamed or chunked one's (a pull request's messages) serves
answers until it expires, `RESPONSE_TTL` seconds after the request, as nats-server's default
response threshold.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Protocol

from infinistream import protocol

RESPONSE_PREFIX = "_R_."
RESPONSE_TTL = 120.0


class Importer(Protocol):
    """The importing account's subscribers (server.clients.Subscribers)."""

    def deliver_many(self, inbox: str, messages: list[protocol.Outgoing]) -> None: ...

    def send_acks(self, replies: list[str | bytes], payloads: list[bytes]) -> None: ...

    def has_interest(self, subject: str) -> bool: ...

    def drained(self, inbox: str) -> Awaitable[object] | None: ...


@dataclass(slots=True)
class _Route:
    importer: Importer
    reply: str
    # Whether more than one answer may come (a streamed or chunked export).
    streamed: bool


@dataclass(eq=False)
class ResponseRoutes:
    """The reply subjects of one account that lead to another account's requesters."""

    ttl: float = RESPONSE_TTL
    _routes: dict[str, _Route] = field(default_factory=dict, init=False)

    def __bool__(self) -> bool:
        return bool(self._routes)

    def open(self, importer: Importer, reply: str, *, streamed: bool) -> str:
        """A reply subject of this account whose answers reach `reply` in `importer`."""
        subject = RESPONSE_PREFIX + os.urandom(9).hex()
        self._routes[subject] = _Route(importer, reply, streamed)
        asyncio.get_running_loop().call_later(self.ttl, self._routes.pop, subject, None)
        return subject

    def forward(self, inbox: str, messages: list[protocol.Outgoing]) -> bool:
        """Deliver answers sent to a reply subject of a route to its requester; False if
        `inbox` is not one."""
        route = self._take(inbox)
        if route is None:
            return False
        out = [
            (route.reply if subject == inbox else subject, reply, headers, payload)
            for subject, reply, headers, payload in messages
        ]
        route.importer.deliver_many(route.reply, out)
        return True

    def forward_acks(self, reply: str, payload: bytes) -> bool:
        route = self._take(reply)
        if route is None:
            return False
        route.importer.send_acks([route.reply], [payload])
        return True

    def has_interest(self, inbox: str) -> bool:
        """Whether the requester behind a reply subject still listens (a pull request is
        served while it does)."""
        route = self._routes.get(inbox)
        return route is not None and route.importer.has_interest(route.reply)

    def drained(self, inbox: str) -> Awaitable[object] | None:
        route = self._routes.get(inbox)
        return None if route is None else route.importer.drained(route.reply)

    def _take(self, inbox: str) -> _Route | None:
        route = self._routes.get(inbox)
        if route is not None and not route.streamed:
            del self._routes[inbox]
        return route
