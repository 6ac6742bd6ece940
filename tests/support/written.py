"""Knowing that what a nats-py client has queued has reached the server.

    seen = await watcher.subscribe("$JS.API.>")
    await written(watcher)    # the SUB is in effect: another client's publish now reaches it

nats-py's `flush()` proves less than its name says: it writes its PING straight to the socket,
ahead of the commands still queued for the client's flusher task (a SUB, a PUB), so its PONG
can come back before they were sent. A request is queued behind them, and a server reads a
connection in order: its answer proves the server has taken in everything queued before it,
on the agent and on nats-server alike. The request asks for the account's JetStream info,
which every server answers: with the info, with an error where the account has no JetStream,
or with the no-responders status.
"""

from __future__ import annotations

import contextlib

from nats.aio.client import Client
from nats.errors import NoRespondersError

PROBE = "$JS.API.INFO"


async def written(*clients: Client, timeout: float = 10) -> None:
    """Returns once the server of each of `clients` has read what the client queued so far."""
    for nc in clients:
        # The no-responders status is an answer all the same: the server read the request.
        with contextlib.suppress(NoRespondersError):
            await nc.request(PROBE, b"", timeout=timeout)
