"""The JetStream API of an account without JetStream, answered as nats-server answers it.

Requests it knows get their usual response type with `JetStream not enabled for account`
(503, 10039); pull requests and direct gets find no one (nothing in the account serves them:
no responders); any other `$JS.API.` subject gets no answer at all, as nats-server gives none.
The system account is nats-server's own: every `$JS.API.>` request there gets the 503, as a
`system_response` but for `$JS.API.INFO`.
"""

from __future__ import annotations

from dataclasses import dataclass

from infinistream.jetstream import errors
from infinistream.jetstream.api import TYPE_PREFIX, encode
from infinistream.jetstream.messages import Send

__all__ = ["JetStreamDisabled", "response_kind"]

_STREAM = {
    "CREATE": "stream_create_response",
    "UPDATE": "stream_update_response",
    "INFO": "stream_info_response",
    "DELETE": "stream_delete_response",
    "PURGE": "stream_purge_response",
}
_CONSUMER = {
    "CREATE": "consumer_create_response",
    "INFO": "consumer_info_response",
    "DELETE": "consumer_delete_response",
    "NAMES": "consumer_names_response",
    "LIST": "consumer_list_response",
    "PAUSE": "consumer_pause_response",
}


def response_kind(tokens: list[str]) -> str | None:
    """The response type of the API request on `tokens` (`$JS.API....` split on dots); None
    for a subject the API does not serve with JSON."""
    n = len(tokens)
    if n == 3 and tokens[2] == "INFO":
        return "account_info_response"
    if n < 4:
        return None
    area, op = tokens[2], tokens[3]
    if area == "STREAM":
        if op in ("NAMES", "LIST") and n == 4:
            return f"stream_{op.lower()}_response"
        if op in _STREAM and n == 5:
            return _STREAM[op]
        if op == "MSG" and n == 6 and tokens[4] in ("GET", "DELETE"):
            return f"stream_msg_{tokens[4].lower()}_response"
    if area == "CONSUMER":
        if op == "DURABLE" and n == 7 and tokens[4] == "CREATE":
            return _CONSUMER["CREATE"]
        if op == "CREATE" and n >= 5:
            return _CONSUMER["CREATE"]
        if op in ("NAMES", "LIST") and n == 5:
            return _CONSUMER[op]
        if op in ("INFO", "DELETE", "PAUSE") and n == 6:
            return _CONSUMER[op]
    return None


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
        kind: str | None
        if self.system:
            kind = "account_info_response" if tokens[2:] == ["INFO"] else "system_response"
        elif tokens[2:4] == ["DIRECT", "GET"] or tokens[2:5] == ["CONSUMER", "MSG", "NEXT"]:
            return False
        else:
            kind = response_kind(tokens)
        if kind is not None and reply:
            error = errors.not_enabled_for_account().to_dict()
            self.send(reply, None, encode({"type": TYPE_PREFIX + kind, "error": error}))
        return True
