"""Each account's JetStream for monitoring (/jsz?acc=, /varz, /healthz, STATSZ, /metrics):
monitoring's `JetStreamAccounts`, served from the tenants.

An account is read through its own tenant (its catalog, consumer store and API counters), so
its figures hold nothing of another account's group. Asking about an account with JetStream
that no client has used yet builds its tenant, as a client's first request would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infinistream.jetstream.versioning import without_server_keys
from infinistream.server.monitoring.usage import AccountUsage, StreamUsage
from infinistream.server.tenants import Tenant, Tenants
from infinistream.stream.mirror_runner import origin_info
from infinistream.stream.records import decode_state

__all__ = ["TenantAccounts"]


@dataclass(eq=False)
class TenantAccounts:
    tenants: Tenants

    def jetstream_accounts(self) -> list[str]:
        """The accounts with JetStream, by name."""
        return sorted(name for name, spec in self.tenants.accounts.items() if spec.jetstream)

    async def usage(self, account: str) -> AccountUsage | None:
        """The account's figures; None for an unknown account or one without JetStream."""
        tenant = self.tenants.get(account)
        return None if tenant is None else await usage_of(tenant)

    async def consumer_details(
        self, account: str, stream: str, config: bool
    ) -> list[dict[str, Any]]:
        """CONSUMER.INFO of each of the stream's consumers in the account, by name."""
        tenant = self.tenants.get(account)
        if tenant is None:
            return []
        consumers = await tenant.consumer_store.load_all(stream)
        if not consumers:
            return []
        view = await tenant.catalog.view(stream)
        details = []
        for loaded in sorted(consumers, key=lambda c: c.name):
            info = await tenant.consumers_api.info_of(loaded, None, view)
            if not config:
                info.pop("config", None)
            else:
                # /jsz shows the config as stored: without the version and level an
                # info adds (nats-server's consumer detail does not add them).
                info["config"]["metadata"] = without_server_keys(info["config"]["metadata"])
            details.append(info)
        return details


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
            state = decode_state(item.value)
            origins = {}
            if entry.config.mirror is not None or entry.config.sources:
                origins = await origin_info(catalog, tenant.origins, entry.config, state.last_seq)
            streams.append(StreamUsage(entry, state, consumers, origins))
    return AccountUsage(tenant.account, streams, tenant.api.total, tenant.api.errors)
