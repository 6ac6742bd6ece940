"""What monitoring knows of each account's JetStream: its streams, their states and consumer
counts, its API counters, its consumers' details.

`JetStreamAccounts` is the seam: /jsz, /varz's `jetstream`, /healthz's asset checks, STATSZ and
/metrics read every account through it. The agent serves each account in a group of its own
and reads each from its tenant (`tenant_accounts.TenantAccounts`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from infinistream.stream.catalog import StreamEntry
from infinistream.stream.records import StreamState

log = logging.getLogger(__name__)

# Seconds /varz waits for the metadata store's figures before it reports the last ones read.
USAGE_TIMEOUT = 2.0


@dataclass(frozen=True, slots=True)
class StreamUsage:
    entry: StreamEntry
    state: StreamState
    consumers: int
    # Its `mirror` and `sources` as stream info shows them (empty: it has neither).
    origins: dict[str, Any] = field(default_factory=dict)


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


@dataclass(eq=False)
class LastUsage:
    """Every account's figures for /varz and STATSZ: the last ones read while the metadata
    store does not answer, so that they still do."""

    accounts: JetStreamAccounts
    timeout: float = USAGE_TIMEOUT
    _last: list[AccountUsage] = field(default_factory=list, init=False)

    async def read(self) -> list[AccountUsage]:
        try:
            self._last = await asyncio.wait_for(all_usage(self.accounts), self.timeout)
        except Exception as exc:
            log.warning("JetStream usage unavailable, reporting the last read: %s", exc)
        return self._last
