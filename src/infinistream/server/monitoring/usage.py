"""What monitoring knows of each account's JetStream: its streams, their states and consumer
counts, its API counters, its consumers' details.

`JetStreamAccounts` is the seam: /jsz, /varz's `jetstream`, /healthz's asset checks, STATSZ and
/metrics read every account through it. The agent serves each account in a group of its own
and passes `tenant_accounts.TenantAccounts` to `Monitoring`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from infinistream.stream.catalog import StreamEntry
from infinistream.stream.records import StreamState


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


async def all_usage(accounts: JetStreamAccounts) -> list[AccountUsage]:
    """Every JetStream account's figures, by account name."""
    out = []
    for name in sorted(accounts.jetstream_accounts()):
        usage = await accounts.usage(name)
        if usage is not None:
            out.append(usage)
    return out
