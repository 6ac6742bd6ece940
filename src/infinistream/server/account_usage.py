"""Per-account figures for monitoring (/jsz?acc=, /accountz): each account's streams, their
states and consumer counts, its limits and API counters, read from its own tenant.

Monitoring asks here rather than reaching into tenants: an account is read through its own
catalog and consumer store, so its figures hold nothing of another account's group.
"""

from __future__ import annotations

from dataclasses import dataclass

from infinistream.security.config import JetStreamLimits
from infinistream.server.tenants import Tenant, Tenants
from infinistream.stream.catalog import StreamEntry
from infinistream.stream.records import StreamState, decode_state

__all__ = ["AccountUsage", "AccountsUsage", "StreamUsage"]


@dataclass(frozen=True, slots=True)
class StreamUsage:
    entry: StreamEntry
    state: StreamState
    consumers: int


@dataclass(frozen=True, slots=True)
class AccountUsage:
    """One account's JetStream as it is now."""

    account: str
    group: str
    limits: JetStreamLimits
    streams: list[StreamUsage]
    api_total: int
    api_errors: int

    @property
    def storage(self) -> int:
        return sum(s.state.bytes for s in self.streams)

    @property
    def messages(self) -> int:
        return sum(s.state.msgs for s in self.streams)

    @property
    def consumers(self) -> int:
        return sum(s.consumers for s in self.streams)

    @property
    def reserved_storage(self) -> int:
        return sum(max(s.entry.config.max_bytes, 0) for s in self.streams)


@dataclass(eq=False)
class AccountsUsage:
    """What monitoring may know of every account the agent serves."""

    tenants: Tenants

    def jetstream_accounts(self) -> list[str]:
        """The accounts with JetStream, by name."""
        return sorted(name for name, spec in self.tenants.accounts.items() if spec.jetstream)

    def accounts(self) -> list[str]:
        """Every account of the config (the global account among them), by name."""
        return sorted(self.tenants.accounts)

    async def usage(self, account: str) -> AccountUsage | None:
        """The account's figures; None for an unknown account or one without JetStream."""
        tenant = self.tenants.get(account)
        return None if tenant is None else await usage_of(tenant)


async def usage_of(tenant: Tenant) -> AccountUsage:
    catalog = tenant.catalog
    await catalog.refresh()
    entries = sorted(catalog.streams.values(), key=lambda e: e.name)
    items = await catalog.meta.get_many([e.keys.state for e in entries])
    streams = []
    for entry in entries:
        item = items.get(entry.keys.state)
        if item is not None:
            consumers = await tenant.consumer_store.count(entry.name)
            streams.append(StreamUsage(entry, decode_state(item.value), consumers))
    return AccountUsage(
        account=tenant.account,
        group=tenant.group,
        limits=tenant.policy.limits,
        streams=streams,
        api_total=tenant.api.total,
        api_errors=tenant.api.errors,
    )
