"""The JetStream API of an account without JetStream, answered as nats-server answers it.

Requests it knows get their usual response type with `JetStream not enabled for account`
(503, 10039); pull requests and direct gets find no one (nothing in the account serves them:
no responders); any other `$JS.API.` subject gets no answer at all, as nats-server gives none.
The system account is nats-server's own: every `$JS.API.>` request there gets the 503, as a
`system_response` but for `$JS.API.INFO`.
"""

from __future__ import annotations

from dataclasses import dataclass

from infinistream.handlers.router import (
    SYSTEM_RESPONSE,
    JsonRoute,
    MessageRoute,
    finds_no_one,
    route_for,
)
from infinistream.jetstream import errors
from infinistream.jetstream.api import TYPE_PREFIX, encode
from infinistream.jetstream.messages import Send

__all__ = ["JetStreamDisabled"]

_ACCOUNT_INFO = TYPE_PREFIX + "account_info_response"


@dataclass(eq=False)
class JetStreamDisabled:
    """The `$JS.API.>` of an account whose JetStream is off (or the system account)."""

    send: Send
    # Whether this is the system account.
    system: bool = False

    async def handle(
        self, subject: str, reply: str | None, headers: bytes | None, body: bytes
    ) -> bool:
        """As `JetStreamApi.handle`: False when nothing serves the subject."""
        tokens = subject.split(".")
        route = route_for(tokens)
        kind: str | None
        if self.system:
            kind = _ACCOUNT_INFO if tokens[2:] == ["INFO"] else SYSTEM_RESPONSE
        elif isinstance(route, MessageRoute) or (route is None and finds_no_one(tokens)):
            return False
        else:
            # nats-server's own API subjects only: it lacks InfiniStream's.
            kind = route.response if isinstance(route, JsonRoute) and route.nats else None
        if kind is not None and reply:
            error = errors.not_enabled_for_account().to_dict()
            self.send(reply, None, encode({"type": kind, "error": error}))
        return True
