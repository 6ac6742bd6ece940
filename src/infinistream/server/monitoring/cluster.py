"""/routez, /gatewayz, /leafz: an agent has no routes, gateways or leaf nodes (agents share
object storage and metadata, not connections), so these answer as a lone nats-server does."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from infinistream.server.info import Identity
from infinistream.server.monitoring.timefmt import rfc3339


@dataclass(eq=False)
class Cluster:
    identity: Identity
    server_name: str

    def routez(self) -> dict[str, Any]:
        return {
            "server_id": self.identity.server_id,
            "server_name": self.server_name,
            "now": rfc3339(time.time()),
            "num_routes": 0,
            "routes": [],
        }

    def gatewayz(self) -> dict[str, Any]:
        return {
            "server_id": self.identity.server_id,
            "now": rfc3339(time.time()),
            "outbound_gateways": {},
            "inbound_gateways": {},
        }

    def leafz(self) -> dict[str, Any]:
        return {
            "server_id": self.identity.server_id,
            "now": rfc3339(time.time()),
            "leafnodes": 0,
            "leafs": [],
        }
