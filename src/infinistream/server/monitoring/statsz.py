"""STATSZ: the server's statistics as nats-server sends them to the system account
(`$SYS.REQ.SERVER.PING.STATZ`, and the older `$SYS.REQ.SERVER.PING`), which `nats server ls`
and `nats server report` read."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from infinistream.server.clients import Clients
from infinistream.server.info import Identity
from infinistream.server.monitoring import jsz
from infinistream.server.monitoring.process import CpuSampler, resident_bytes
from infinistream.server.monitoring.timefmt import rfc3339
from infinistream.server.monitoring.usage import LastUsage


@dataclass(eq=False)
class Statsz:
    identity: Identity
    store_dir: str
    clients: Clients
    usage: LastUsage
    # The same sampler as /varz's: both report the CPU used since either asked last.
    cpu: CpuSampler
    domain: str = ""

    async def answer(self) -> dict[str, Any]:
        clients = self.clients
        counts = clients.counts()
        usage = await self.usage.read()
        sent = {"msgs": counts["out_msgs"], "bytes": counts["out_bytes"]}
        received = {"msgs": counts["in_msgs"], "bytes": counts["in_bytes"]}
        return {
            "start": rfc3339(self.identity.started),
            "mem": resident_bytes(),
            "cores": os.cpu_count() or 1,
            "cpu": self.cpu.percent(),
            "connections": len(clients.connections),
            "total_connections": clients.total_connections,
            "active_accounts": 1 if clients.connections else 0,
            "subscriptions": clients.subscription_count(),
            "sent": sent,
            "sent_to_clients": sent,
            "received": received,
            "received_from_clients": received,
            "slow_consumers": clients.slow_consumers,
            "jetstream": {
                "config": jsz.config(self.store_dir, self.domain),
                "stats": jsz.stats(usage),
            },
        }
