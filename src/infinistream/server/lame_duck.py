"""Lame duck mode: an agent leaves the pool without a failed request (SIGUSR2, `--signal ldm`).

nats-server's sequence (server.go `lameDuckMode`), with what a pool of agents adds:

1. Stop accepting clients (the listener closes).
2. Leave the pool: the membership record goes, so the other agents drop this one from their
   clients' `connect_urls` and from the zone cache's owners at their next read; every lease
   this agent holds (the jobs role's, a mirror's) is handed over, so another agent takes the
   work at once instead of after the lease's TTL.
3. Tell every client: INFO with `ldm: true` and only the other agents in `connect_urls`.
4. Wait `lame_duck_grace_period` (other agents being put in lame duck mode at the same time
   should not receive this one's clients).
5. Let the clients go one by one, spread over the rest of `lame_duck_duration` (at most a
   second apart, at least half the interval, as nats-server): each connection gets what was
   written to it, then the end of the stream (`ClientConnection.hand_over`), and the client
   reconnects to another agent. What it sent before it saw the end is still read and stored;
   PubAcks that can no longer reach it here are handed over through metadata to the agent it
   reconnects to (server/handover.py). A client that never goes is closed at the end.
6. Then the agent stops as on SIGTERM: the write buffers are flushed, everything answered.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from infinistream.pipeline.lease import LeaseHolders
from infinistream.server.clients import Clients
from infinistream.server.connection import ClientConnection
from infinistream.server.handover import ReplyHandover
from infinistream.server.info import Greeting
from infinistream.server.membership import Membership
from infinistream.server.routing import Router, account_of
from infinistream.server.tenants import Tenants

log = logging.getLogger(__name__)

# nats-server sleeps at most this long between two clients it closes.
MAX_CLOSE_INTERVAL = 1.0
# How long a client handed over has to close its side before it is closed.
CLIENT_CLOSE_TIMEOUT = 5.0


@dataclass(eq=False)
class LameDuck:
    clients: Clients
    router: Router
    tenants: Tenants
    greeting: Greeting
    membership: Membership
    leases: LeaseHolders
    handover: ReplyHandover
    duration: float
    grace_period: float
    # Connections handed over whose publishes are still being answered.
    _settling: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    async def run(self, stop_listening: Callable[[], None]) -> None:
        log.info("Entering lame duck mode, stop accepting new clients")
        stop_listening()
        self.greeting.lame_duck = True
        self.clients.on_handed_over = self._handed_over
        await self.membership.leave()
        failed = await self.leases.leave()
        if failed:
            log.warning("lame duck mode: leases of %s expire on their own", ", ".join(failed))
        # Every client, also where leaving the pool changed nothing in this agent's view.
        self.clients.inform(self.greeting.info)
        connections = [c for c in self.clients.connections.values() if not c.closed]
        if not connections:
            return
        await asyncio.sleep(self.grace_period)
        log.info("Closing existing clients")
        interval = min((self.duration - self.grace_period) / len(connections), MAX_CLOSE_INTERVAL)
        for i, conn in enumerate(connections):
            self._hand_over(conn)
            if i < len(connections) - 1:
                await asyncio.sleep(random.uniform(interval / 2, interval))
        await self._until_gone(connections)

    def _hand_over(self, conn: ClientConnection) -> None:
        account = account_of(conn)
        space = self.clients.space(account)
        if space.divert is None:
            space.divert = self.handover.divert(account)
        conn.hand_over()

    def _handed_over(self, conn: ClientConnection) -> None:
        """A client handed over has closed its side: once what it published is answered (and
        the answers handed over), its subscriptions go."""
        task = asyncio.get_running_loop().create_task(self._settle(conn))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _settle(self, conn: ClientConnection) -> None:
        try:
            await self.router.settle()
            for tenant in self.tenants.built():
                await tenant.write_buffer.settle()
            await self.handover.settle()
        finally:
            self.clients.forget(conn)

    async def _until_gone(self, connections: list[ClientConnection]) -> None:
        deadline = time.monotonic() + CLIENT_CLOSE_TIMEOUT
        while any(not c.closed for c in connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for conn in connections:
            if not conn.closed:
                log.info("client %d did not close its side in time, closing", conn.client_id)
                conn.close()
        while self._settling:
            await asyncio.gather(*list(self._settling), return_exceptions=True)
        await self.handover.settle()
        if self.handover.written:
            log.info(
                "Handed over %d PubAck(s) to the agents the clients went to",
                self.handover.written,
            )
