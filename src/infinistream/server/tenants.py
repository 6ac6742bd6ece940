"""The accounts this agent serves, each an isolated virtual group with JetStream parts of its
own.

One agent serves every account of its config at once. An account's `Tenant` holds what
serves its streams and consumers: its catalog, committer, consumer service, API handlers and
write buffer, all bound to the account's group (every metadata key and object path under
it) and to the account's subject namespace (every answer and delivery goes to its own
clients only). A tenant is built the first time one of the account's clients needs it, by the
factory `wiring.build_agent` hands over, and then lives as long as the agent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from infinistream.consumer.service import ConsumerService
from infinistream.consumer.store import ConsumerStore
from infinistream.handlers.consumers import ConsumerApi
from infinistream.handlers.router import JetStreamApi
from infinistream.handlers.streams import StreamApi
from infinistream.jetstream.accounts import AccountPolicy
from infinistream.jetstream.api import StreamSource
from infinistream.security.config import AuthConfig, JetStreamLimits
from infinistream.security.exports import Export, Import, jetstream_origin
from infinistream.security.identity import GLOBAL_ACCOUNT
from infinistream.server.clients import Subscribers
from infinistream.stream.batches import AtomicBatches
from infinistream.stream.catalog import Catalog
from infinistream.stream.committer import Committer
from infinistream.stream.counters import CounterIncrements
from infinistream.stream.due import DueWakeups
from infinistream.stream.expiry import Expiry
from infinistream.stream.fastbatches import FastBatches
from infinistream.stream.mirror_runner import MirrorRunner
from infinistream.stream.quota import StorageQuota
from infinistream.stream.republisher import Republisher
from infinistream.stream.scheduler import Scheduler
from infinistream.stream.write_buffer import WriteBuffer

log = logging.getLogger(__name__)

CATALOG_POLL_SECONDS = 0.25


@dataclass(frozen=True, slots=True)
class JetStreamAccount:
    """What the config grants an account: JetStream or not, and its limits."""

    name: str
    jetstream: bool
    limits: JetStreamLimits = field(default_factory=JetStreamLimits)
    # What it takes from other accounts, and offers them (security.exports).
    imports: tuple[Import, ...] = ()
    exports: tuple[Export, ...] = ()


def jetstream_accounts(auth: AuthConfig) -> dict[str, JetStreamAccount]:
    """The accounts the agent serves and what each may do; `$G` is always among them.

    As nats-server decides: with no accounts configured but the system account, the global
    account has JetStream; otherwise only the accounts whose config says `jetstream` have it,
    and never the system account.
    """
    system = auth.system_account
    global_only = all(a.name in (GLOBAL_ACCOUNT, system) for a in auth.accounts)
    accounts = {GLOBAL_ACCOUNT: JetStreamAccount(GLOBAL_ACCOUNT, jetstream=global_only)}
    for spec in auth.accounts:
        if spec.name == GLOBAL_ACCOUNT:
            continue
        enabled = spec.jetstream and spec.name != system
        accounts[spec.name] = JetStreamAccount(
            spec.name, enabled, spec.limits, spec.imports, spec.exports
        )
    return accounts


@dataclass(eq=False)
class Tenant:
    """One account's JetStream, in its own group."""

    account: str
    group: str
    policy: AccountPolicy
    space: Subscribers
    catalog: Catalog
    committer: Committer
    consumer_store: ConsumerStore
    consumers: ConsumerService
    write_buffer: WriteBuffer
    streams: StreamApi
    consumers_api: ConsumerApi
    api: JetStreamApi
    batches: AtomicBatches
    fast_batches: FastBatches
    # Wakes expiry and the scheduler when commits may bring a due time nearer.
    due_wakeups: DueWakeups
    expiry: Expiry
    scheduler: Scheduler
    # The account's max_file at publish time.
    quota: StorageQuota
    # Committed messages of streams with republish, to this agent's subscribers.
    republisher: Republisher
    # Increments of counter streams (allow_msg_counter).
    counters: CounterIncrements
    # Mirrors and sources: copied by the agent holding each stream's lease.
    origins: MirrorRunner
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set, init=False)

    async def start(self) -> None:
        """Read the account's catalog, then serve it."""
        await self.catalog.refresh(force=True)
        await self.quota.refresh()
        self.serve()

    def serve(self) -> None:
        """Start the account's background work. A tenant built while the agent runs starts
        here at once; its catalog (and quota) are read by the first request that needs them,
        or by the poll."""
        self.consumers.start()
        self._spawn(self._poll_catalog())
        self._spawn(self.due_wakeups.run())
        self._spawn(self.expiry.run())
        self._spawn(self.scheduler.run())
        self._spawn(self.republisher.run())
        self._spawn(self.origins.run())

    async def drain(self) -> None:
        """Answer every publish in flight and stop serving consumers."""
        await self.write_buffer.drain()
        await self.consumers.stop()

    async def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _poll_catalog(self) -> None:
        while True:
            await asyncio.sleep(CATALOG_POLL_SECONDS)
            try:
                await self.catalog.refresh()
                await self.quota.refresh()
            except Exception:
                log.exception("catalog refresh of account %s failed", self.account)


@dataclass(eq=False)
class Tenants:
    """Every account's tenant, built on first use."""

    # The accounts of the config (nats-server's `$G` among them) and what each may do.
    accounts: dict[str, JetStreamAccount]
    build: Callable[[JetStreamAccount], Tenant]
    # The global account's tenant: built at once, since monitoring reads its figures.
    default: Tenant
    _built: dict[str, Tenant] = field(default_factory=dict, init=False)
    # The built tenants of accounts with JetStream: the ones clients are served by.
    _serving: dict[str, Tenant] = field(default_factory=dict, init=False)
    _running: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._built[self.default.account] = self.default
        spec = self.accounts.get(self.default.account)
        if spec is not None and spec.jetstream:
            self._serving[self.default.account] = self.default

    def get(self, account: str) -> Tenant | None:
        """The tenant of `account`; None if it has no JetStream (or is unknown)."""
        # Every publish asks: one lookup for an account already served.
        tenant = self._serving.get(account)
        if tenant is not None:
            return tenant
        spec = self.accounts.get(account)
        if spec is None or not spec.jetstream:
            return None
        tenant = self._built[account] = self._serving[account] = self.build(spec)
        if self._running:
            tenant.serve()
        return tenant

    def reload(self, accounts: dict[str, JetStreamAccount]) -> None:
        """Take the accounts of a reloaded config: an account that gained JetStream is served
        from its next request, one that lost it is answered as an account without, and
        changed limits hold from the next request on."""
        self.accounts = accounts
        for name, tenant in self._built.items():
            spec = accounts.get(name)
            if spec is None or not spec.jetstream:
                self._serving.pop(name, None)
            else:
                tenant.policy.limits = spec.limits
                self._serving[name] = tenant

    def built(self) -> list[Tenant]:
        """The tenants built so far (the accounts that have been served)."""
        return list(self._built.values())

    async def start(self) -> None:
        self._running = True
        for tenant in self.built():
            await tenant.start()

    async def drain(self) -> None:
        for tenant in self.built():
            await tenant.drain()

    async def cancel(self) -> None:
        for tenant in self.built():
            await tenant.cancel()


@dataclass(eq=False)
class ImportedOrigins:
    """The origins of one account's mirrors and sources that are streams of other accounts of
    this agent, reached through the account's imports as nats-server reaches them
    (security.exports.jetstream_origin) and read from the exporting account's store: no
    consumer, no wire round trip (stream.mirror.OriginCatalogs)."""

    account: str
    # Every account's tenant, and the accounts as the config has them now (a reload changes
    # their imports).
    tenants: Callable[[], Tenants]

    def account_of(self, origin: StreamSource, mirror: bool) -> str | None:
        """The account an external origin is imported from; None if the imports reach none."""
        external = origin.external
        if external is None or not external.api:
            return None
        spec = self.tenants().accounts.get(self.account)
        if spec is None:
            return None
        found = jetstream_origin(
            spec.imports, external.api, external.deliver, origin.name, mirror=mirror
        )
        return None if found == self.account else found

    def catalog_of(self, origin: StreamSource, *, mirror: bool) -> Catalog | None:
        account = self.account_of(origin, mirror)
        tenant = None if account is None else self.tenants().get(account)
        return None if tenant is None else tenant.catalog
