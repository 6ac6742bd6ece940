"""What monitoring knows of each account's JetStream: its streams, their states and consumer
counts, its API counters, its consumers' details.

`JetStreamAccounts` is the seam: /jsz, /varz's `jetstream`, /healthz's asset checks, STATSZ and
/metrics read every account through it. `OneGroup` serves it for an agent whose streams are
all in its one group, reported under one account (accounts_model.streams_account); an agent
serving each account in a group of its own passes its own implementation to `Monitoring`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from infinistream.server.monitoring.accounts_model import streams_account
from infinistream.server.reports import Reports
from infinistream.stream.catalog import StreamEntry
from infinistream.stream.records import StreamState, decode_state


@dataclass(frozen=True, slots=True)
class StreamUsage:
    entry: StreamEntry
    state: StreamState
    consumers: int


@dataclass(frozen=True, slots=True)
class AccountUsage:
    """One account's JetStream as it is now."""

    account: str
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


class JetStreamAccounts(Protocol):
    def jetstream_accounts(self) -> list[str]:
        """The accounts with JetStream, by name."""

    async def usage(self, account: str) -> AccountUsage | None:
        """The account's figures; None for an unknown account or one without JetStream."""

    async def consumer_details(
        self, account: str, stream: str, config: bool
    ) -> list[dict[str, Any]]:
        """CONSUMER.INFO of each of the stream's consumers, by name (`config`: with their
        config)."""


@dataclass(eq=False)
class OneGroup:
    """Every stream of the agent's group, as one account's."""

    reports: Reports

    def jetstream_accounts(self) -> list[str]:
        return [streams_account(self.reports.settings)]

    async def usage(self, account: str) -> AccountUsage | None:
        if account not in self.jetstream_accounts():
            return None
        reports = self.reports
        catalog = reports.catalog
        await catalog.refresh()
        entries = sorted(catalog.streams.values(), key=lambda e: e.name)
        items = await reports.meta.get_many([e.keys.state for e in entries])
        streams = []
        for e in entries:
            item = items.get(e.keys.state)
            if item is not None:
                count = await reports.consumer_store.count(e.name)
                streams.append(StreamUsage(e, decode_state(item.value), count))
        return AccountUsage(account, streams, reports.api.total, reports.api.errors)

    async def consumer_details(
        self, account: str, stream: str, config: bool
    ) -> list[dict[str, Any]]:
        if account not in self.jetstream_accounts():
            return []
        reports = self.reports
        consumers = await reports.consumer_store.load_all(stream)
        if not consumers:
            return []
        view = await reports.catalog.view(stream)
        details = []
        for loaded in sorted(consumers, key=lambda c: c.name):
            info = await reports.consumer_api.info_of(loaded, None, view)
            if not config:
                info.pop("config", None)
            details.append(info)
        return details


async def all_usage(accounts: JetStreamAccounts) -> list[AccountUsage]:
    """Every JetStream account's figures, by account name."""
    out = []
    for name in sorted(accounts.jetstream_accounts()):
        usage = await accounts.usage(name)
        if usage is not None:
            out.append(usage)
    return out
