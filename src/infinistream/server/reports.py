"""What the agent tells about itself: the INFO greeting, /varz and /healthz.

Every figure is read from the part that owns it when asked; nothing here counts on its own.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import resource
import time
from dataclasses import dataclass, field
from typing import Any

from infinistream import __version__
from infinistream.consumer.store import ConsumerStore
from infinistream.jetstream.api import NATS_COMPAT_VERSION
from infinistream.server.clients import Clients
from infinistream.settings import Settings
from infinistream.storage import ObjectStore, SectionCache
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
            "connect_urls": [f"{_advertised(s.host)}:{self.identity.port}"],
        }
        # auth_required (and the nkey nonce) are the connection's to add: they follow the
        # authenticator, which a reload changes.
        return info

    def healthz(self) -> dict[str, Any]:
        return {"status": "ok"}

    def varz(self) -> dict[str, Any]:
        s = self.settings
        identity = self.identity
        usage = resource.getrusage(resource.RUSAGE_SELF)
        stats = self.write_buffer.stats
        return {
            "server_id": identity.server_id,
            "server_name": s.server_name,
            "version": NATS_COMPAT_VERSION,
            "proto": 1,
            "host": s.host,
            "port": identity.port,
            "http_port": identity.http_port,
            "max_payload": s.max_payload,
            "max_pending": s.max_pending,
            "ping_interval": int(s.ping_interval * 1e9),
            "ping_max": s.max_pings_out,
            "auth_required": s.auth_required,
            "auth_timeout": s.auth_timeout,
            "jetstream": {
                "config": {"store_dir": s.store_dir, "objects": s.objects_url},
                "stats": {"streams": len(self.catalog.streams)},
            },
            "start": _rfc3339(identity.started),
            "now": _rfc3339(time.time()),
            "uptime": f"{int(time.time() - identity.started)}s",
            "mem": usage.ru_maxrss * 1024,
            "cores": os.cpu_count(),
            "cpu": 0,
            "connections": len(self.clients.connections),
            "total_connections": self.clients.total_connections,
            **self.clients.counts(),
            "subscriptions": self.clients.subscription_count(),
            "infinistream": {
                "version": __version__,
                "group": s.group,
                "objects": s.objects_url,
                "metadata": s.metadata_url,
                "linger_ms": s.put_interval * 1000,
                "batch_bytes": s.batch_bytes,
                "flushes": stats.flushes,
                "objects_written": stats.objects,
                "messages_written": stats.messages,
                "bytes_written": stats.bytes,
                "failed_batches": stats.failed_batches,
                "commit_conflicts": self.committer.conflicts,
                "consumer_commits": self.consumer_store.commits,
                "consumer_conflicts": self.consumer_store.conflicts,
                "object_requests": dataclasses.asdict(self.objects.stats),
                "cache_bytes": self.cache.size_bytes,
                # Stored messages found damaged by this agent's reads (stream.damage).
                "damaged": self.damage.report(),
            },
        }


def _advertised(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
