"""/routez, /gatewayz, /leafz: an agent has no routes, gateways or leaf nodes (agents share
object storage and metadata, not connections), so these answer as a lone nats-server does."""

from __future__ import annotations

import time
from typing import Any

from infinistream.server.monitoring.timefmt import rfc3339
from infinistream.server.reports import Reports


def routez(reports: Reports) -> dict[str, Any]:
    return {
        "server_id": reports.identity.server_id,
        "server_name": reports.settings.server_name,
        "now": rfc3339(time.time()),
        "num_routes": 0,
        "routes": [],
    }


def gatewayz(reports: Reports) -> dict[str, Any]:
    return {
        "server_id": reports.identity.server_id,
        "now": rfc3339(time.time()),
        "outbound_gateways": {},
        "inbound_gateways": {},
    }


def leafz(reports: Reports) -> dict[str, Any]:
    return {
        "server_id": reports.identity.server_id,
        "now": rfc3339(time.time()),
        "leafnodes": 0,
        "leafs": [],
    }
