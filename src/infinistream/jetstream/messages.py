"""How the JetStream layers hand messages to clients, without knowing about connections.

The server below the handlers owns the subscriptions; streams, consumers and handlers are given
these callables at construction and never see a connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from infinistream.protocol import Outgoing

# (subject, headers or None, payload) -> delivered to whoever subscribed to the subject.
Send = Callable[[str, bytes | None, bytes], None]
# (inbox, [(subject shown in MSG, reply, headers or None, payload), ...]): a batch to one inbox.
DeliverMany = Callable[[str, list[Outgoing]], None]
# (subject, messages): delivered as a publish to `subject` is: every subscription matching it
# gets each message, except that the members of a queue group share them, one per message.
Distribute = Callable[[str, list[Outgoing]], None]
# Whether some client is subscribed to a subject.
HasInterest = Callable[[str], bool]
# None if the clients subscribed to an inbox have read what waits for them down to a low-water
# mark; else what completes when that may have changed (asked again then): a long delivery to
# the inbox is written in chunks, each once this says None.
Drained = Callable[[str], Awaitable[object] | None]


def status(code: int, text: str, pending: tuple[int, int] | None = None) -> bytes:
    """A status-only header block (`NATS/1.0 408 Request Timeout`), as nats-server sends them;
    `pending` adds a pull request's unfilled messages and bytes."""
    if pending is None:
        return f"NATS/1.0 {code} {text}\r\n\r\n".encode()
    return (
        f"NATS/1.0 {code} {text}\r\nNats-Pending-Messages: {pending[0]}\r\n"
        f"Nats-Pending-Bytes: {pending[1]}\r\n\r\n"
    ).encode()
