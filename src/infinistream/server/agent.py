"""The agent: one process that NATS clients connect to, holding nothing of its own.

Built by `wiring.build_agent`; this module is its life: listening for clients and monitoring,
the background work of every account it serves (keeping catalogs fresh, expiring old
messages; see tenants.py) and the jobs role, lame duck mode (lame_duck.py), and a stop that
answers every publish in flight before it closes.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from infinistream.metadata.kv import MetadataStore
from infinistream.pipeline.lease import LeaseHolders
from infinistream.security.auth import Authenticator
from infinistream.security.config import AuthConfig
from infinistream.server.clients import Clients
from infinistream.server.connection import ClientConnection
from infinistream.server.erase_evictions import EraseEvictions
from infinistream.server.handover import HandoverDelivery, ReplyHandover
from infinistream.server.info import Greeting, Identity
from infinistream.server.lame_duck import LameDuck
from infinistream.server.membership import Membership
from infinistream.server.monitoring.app import MonitorServer
from infinistream.server.monitoring.console.history import History
from infinistream.server.routing import Router
from infinistream.server.stalls import StallWatch
from infinistream.server.tenants import Tenants, jetstream_accounts
from infinistream.server.zone import ZoneCacheChannel
from infinistream.settings import Settings

if TYPE_CHECKING:
    from infinistream.pipeline.scheduler import JobScheduler

log = logging.getLogger(__name__)

SHUTDOWN = "shutdown"


@dataclass(eq=False)
class Agent:
    settings: Settings
    identity: Identity
    meta: MetadataStore
    tenants: Tenants
    clients: Clients
    router: Router
    jobs: JobScheduler | None
    zone: ZoneCacheChannel
    monitor: MonitorServer
    authenticator: Authenticator
    # The server side of TLS for clients (settings.tls), None for plain text.
    tls_context: ssl.SSLContext | None
    membership: Membership
    # Drops this agent's cached copies of erased bytes.
    erase_evictions: EraseEvictions
    # The web console's short history of figures, sampled while monitoring is served.
    history: History
    # Logs where the event loop was when something held it for a second or more.
    stalls: StallWatch
    # ClientConnection, or a subclass that logs (server/tracing.py) under -D or -V.
    connection_class: type[ClientConnection]
    # The INFO clients are greeted with (lame duck mode changes it).
    greeting: Greeting
    # Whatever holds leases here (the jobs role, mirrors): handed over when the agent leaves.
    leases: LeaseHolders
    # PubAcks of clients handed over in lame duck mode, and those handed to this agent.
    handover: ReplyHandover
    handover_delivery: HandoverDelivery
    # Makes again the metadata commits a power loss took (their records are in the packs):
    # done before anything reads the metadata.
    recover: Callable[[], Awaitable[None]]
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1), init=False)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set, init=False)
    _server: asyncio.Server | None = field(default=None, init=False)
    _lame_duck: LameDuck | None = field(default=None, init=False)

    @property
    def port(self) -> int:
        return self.identity.port

    @property
    def http_port(self) -> int:
        return self.identity.http_port

    async def start(self) -> None:
        s = self.settings
        self._spawn(self.stalls.run())
        await self.recover()
        await self.tenants.start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: self.connection_class(
                self.router, s, next(self._ids), self.authenticator, self.tls_context
            ),
            s.host,
            max(s.port, 0),  # -1 (nats-server's RANDOM_PORT) and 0 both mean any free port
            reuse_address=True,
            reuse_port=s.reuse_port,
        )
        self.identity.port = self._server.sockets[0].getsockname()[1]
        await self.zone.start()
        if s.http_port:
            # 0 means no monitoring; -1 (nats-server's RANDOM_PORT) means any free port.
            self.identity.http_port = await self.monitor.start(s.monitor_host, max(s.http_port, 0))
            self._spawn(self.history.run())
        # Registered once listening (the record carries the addresses), and read at once so
        # the first clients' INFO already lists the pool.
        await self._join()
        self._spawn(self.membership.run())
        self._spawn(self.erase_evictions.run())
        self._spawn(self.handover_delivery.run())
        # Stopping the agent cancels the scheduler, which stops a running job.
        if self.jobs is not None:
            self._spawn(self.jobs.run())

    def reload_auth(self, config: AuthConfig) -> int:
        """A reloaded configuration's users, permissions and accounts: new connections are
        checked against them, and every connected client again with the CONNECT it sent
        (nats-server's reload): one no longer allowed is closed with an Authorization
        Violation, the others get their new identity and permissions. Accounts that gained
        or lost JetStream, or whose limits changed, are served so from the next request.
        The number closed."""
        self.authenticator.reload(config)
        self.tenants.reload(jetstream_accounts(config))
        self.clients.link({account.name: account.imports for account in config.accounts})
        closed = 0
        for conn in list(self.clients.connections.values()):
            if conn.closed or conn.identity is None or not conn.connected:
                continue  # not past CONNECT: checked under the new config when it comes
            if not conn.reauthenticate():
                closed += 1
        return closed

    @property
    def lame_duck_mode(self) -> bool:
        return self._lame_duck is not None

    async def lame_duck(self) -> None:
        """Leave the pool and let every client go to the other agents, losing nothing
        (lame_duck.py); `stop` comes after."""
        if self._lame_duck is not None:
            return
        s = self.settings
        self._lame_duck = LameDuck(
            self.clients,
            self.router,
            self.tenants,
            self.greeting,
            self.membership,
            self.leases,
            self.handover,
            duration=s.lame_duck_duration,
            grace_period=s.lame_duck_grace_period,
        )
        await self._lame_duck.run(self._stop_listening)

    def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()

    async def stop(self) -> None:
        """Stop taking connections, answer every publish in flight, then close."""
        self._stop_listening()
        self.clients.pause_all(SHUTDOWN, True)
        await self.router.settle()
        await self.tenants.drain()
        # Let the acks just written reach the sockets before closing them.
        await asyncio.sleep(0)
        self.clients.close_all()
        await self.router.cancel()
        await self.tenants.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.monitor.close()
        # Out of the pool first: the zone's readers learn sooner that its cache channel goes.
        await self.membership.leave()
        await self.leases.leave()
        await self.handover.settle()
        await self.zone.stop()
        await self.meta.close()

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _join(self) -> None:
        try:
            await self.membership.renew()
            await self.membership.refresh()
        except Exception:
            # The loop tries again; an agent serves even while metadata is briefly away.
            log.exception("joining the pool failed")
