"""What the agent tells about itself: the INFO greeting here, and the parts monitoring reads.

Every figure is read from the part that owns it when asked; nothing here counts on its own.
The monitoring endpoints (server/monitoring/) read them through `Reports`.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field
from typing import Any

from infinistream import __version__
from infinistream.consumer.store import ConsumerStore
from infinistream.handlers.consumers import ConsumerApi
from infinistream.handlers.router import JetStreamApi
from infinistream.handlers.streams import StreamApi
from infinistream.jetstream.api import NATS_COMPAT_VERSION
from infinistream.metadata.kv import MetadataStore
from infinistream.pool import LiveMembers
from infinistream.server.clients import Clients
from infinistream.settings import Settings
from infinistream.storage import ObjectStore, SectionCache, ZoneCacheStats
from infinistream.stream.catalog import Catalog
from infinistream.stream.committer import Committer
from infinistream.stream.damage import DamageLog
from infinistream.stream.write_buffer import WriteBuffer


@dataclass
class Identity:
    """Who this agent is, and where it listens (known once it is listening)."""

    server_id: str = field(default_factory=lambda: "N" + os.urandom(27).hex().upper()[:55])
    started: float = field(default_factory=time.time)
    port: int = 0
    http_port: int = 0

    @property
    def agent_id(self) -> str:
        """The short id object names carry."""
        return self.server_id[-8:]


@dataclass(eq=False)
class Reports:
    settings: Settings
    identity: Identity
    clients: Clients
    catalog: Catalog
    write_buffer: WriteBuffer
    committer: Committer
    consumer_store: ConsumerStore
    objects: ObjectStore
    cache: SectionCache[bytes]
    damage: DamageLog
    zone_cache: ZoneCacheStats
    meta: MetadataStore
    streams: StreamApi
    consumer_api: ConsumerApi
    api: JetStreamApi
    pool: LiveMembers

    def info(self, client_id: int) -> dict[str, Any]:
        s = self.settings
        info: dict[str, Any] = {
            "server_id": self.identity.server_id,
            "server_name": s.server_name,
            "version": NATS_COMPAT_VERSION,
            "proto": 1,
            "go": f"infinistream {__version__} (python {platform.python_version()})",
            "host": s.host,
            "port": self.identity.port,
            "headers": True,
            "max_payload": s.max_payload,
            "jetstream": True,
            "client_id": client_id,
            # The pool's live agents, this zone first: clients fail over to them (nats-py and
            # nats.js add them to their server lists, as with a nats-server cluster). Until
            # this agent has registered, only itself.
            "connect_urls": self.pool.client_urls()
            or [s.client_advertise or f"{advertised(s.host)}:{self.identity.port}"],
        }
        # auth_required (and the nkey nonce) are the connection's to add: they follow the
        # authenticator, which a reload changes.
        return info


def advertised(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


def pool_report(pool: LiveMembers, settings: Settings) -> dict[str, Any]:
    """/varz's view of the pool: this agent's zone and roles, and every live member."""
    return {
        "zone": settings.zone,
        "roles": list(settings.roles),
        "members": [
            {
                "id": m.id,
                "name": m.name,
                "address": m.address,
                "zone": m.zone,
                "roles": list(m.roles),
                "version": m.version,
                "cache_address": m.cache_address,
                "monitor_address": m.monitor_address,
                "self": m.id == pool.self_id,
            }
            for m in pool.members
        ],
    }
