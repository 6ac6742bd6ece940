"""What monitoring answers from: the agent's `Reports`, its health probes, and the state the
endpoints keep (the CPU sampler, the HTTP request counts). HTTP (endpoints.py), the system
account's requests (system.py) and /metrics (metrics.py) all ask the same `Monitoring`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from infinistream.pipeline.scheduler import JobScheduler
from infinistream.server.monitoring import accountz, connz, health, jsz, subsz
from infinistream.server.monitoring.accountz import AccountStatzOptions, AccountzOptions
from infinistream.server.monitoring.connz import ConnzOptions
from infinistream.server.monitoring.health import HealthProbe, HealthzOptions
from infinistream.server.monitoring.jsz import JszOptions
from infinistream.server.monitoring.process import CpuSampler
from infinistream.server.monitoring.subsz import SubszOptions
from infinistream.server.monitoring.usage import AccountUsage, JetStreamAccounts, all_usage
from infinistream.server.monitoring.varz import varz
from infinistream.server.reports import Reports

log = logging.getLogger(__name__)

# Seconds /varz waits for the metadata store's figures before it reports the last ones read.
USAGE_TIMEOUT = 2.0


@dataclass(eq=False)
class Monitoring:
    reports: Reports
    probes: Sequence[HealthProbe]
    # Each account's JetStream (tenant_accounts.TenantAccounts: each from its own tenant).
    accounts: JetStreamAccounts
    # The jobs role's scheduler, when this agent has it (its runs are in /metrics).
    jobs: JobScheduler | None = None
    cpu: CpuSampler = field(default_factory=CpuSampler)
    # Requests per HTTP path, as varz `http_req_stats`.
    http_req_stats: dict[str, int] = field(default_factory=dict)
    _probes: health.Probes = field(init=False)
    _usage: list[AccountUsage] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self._probes = health.Probes(self.probes)

    async def usage(self) -> list[AccountUsage]:
        """Every account's JetStream figures; the last ones read while the metadata store
        does not answer, so that /varz and STATSZ still do."""
        try:
            self._usage = await asyncio.wait_for(all_usage(self.accounts), USAGE_TIMEOUT)
        except Exception as exc:
            log.warning("JetStream usage unavailable, reporting the last read: %s", exc)
        return self._usage

    async def varz(self) -> dict[str, Any]:
        return await varz(self.reports, await self.usage(), self.cpu, self.http_req_stats)

    async def jsz(self, opts: JszOptions) -> dict[str, Any]:
        return await jsz.jsz(self.reports, self.accounts, opts)

    def connz(self, opts: ConnzOptions) -> dict[str, Any]:
        return connz.connz(self.reports, opts)

    def subsz(self, opts: SubszOptions) -> dict[str, Any]:
        return subsz.subsz(self.reports, opts)

    def accountz(self, opts: AccountzOptions) -> dict[str, Any]:
        return accountz.accountz(self.reports, opts)

    def accstatz(self, opts: AccountStatzOptions) -> dict[str, Any]:
        return accountz.accstatz(self.reports, opts)

    async def healthz(self, opts: HealthzOptions) -> tuple[int, dict[str, Any]]:
        return await health.healthz(self.accounts, self._probes, opts)
