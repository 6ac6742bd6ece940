"""/varz: the server's configuration and counters, in nats-server's Varz shape.

Fields nats-server has that mean nothing for an agent are left out rather than faked
(git_commit, gomaxprocs; tls_timeout: no TLS;
feature_flags and disk_io_wait_stats: nats-server internals). InfiniStream's own figures are
under `infinistream`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from infinistream import __version__
from infinistream.jetstream.api import NATS_COMPAT_VERSION
from infinistream.pool import LiveMembers
from infinistream.server.clients import Clients
from infinistream.server.info import GO, Identity
from infinistream.server.monitoring import jsz
from infinistream.server.monitoring.accounts_model import SYSTEM_ACCOUNT
from infinistream.server.monitoring.figures import AgentFigures
from infinistream.server.monitoring.process import CpuSampler, resident_bytes
from infinistream.server.monitoring.timefmt import rfc3339, uptime
from infinistream.server.monitoring.usage import LastUsage
from infinistream.settings import Settings
from infinistream.storage.keys import cipher_name


def _go_float(x: float) -> float | int:
    # Go writes a whole float64 without a fraction (2, not 2.0).
    return int(x) if x == int(x) else x


def _by_kind(clients: int) -> dict[str, int]:
    return {"clients": clients, "routes": 0, "gateways": 0, "leafs": 0}


@dataclass(eq=False)
class Varz:
    settings: Settings
    identity: Identity
    clients: Clients
    usage: LastUsage
    figures: AgentFigures
    pool: LiveMembers
    cpu: CpuSampler
    # Requests per HTTP path (`http_req_stats`), counted by the HTTP application.
    http_requests: Counter[str]

    async def answer(self) -> dict[str, Any]:
        usage = await self.usage.read()
        s = self.settings
        identity = self.identity
        clients = self.clients
        counts = clients.counts()
        now = time.time()
        return {
            "server_id": identity.server_id,
            "server_name": s.server_name,
            "version": NATS_COMPAT_VERSION,
            "proto": 1,
            "go": GO,
            "host": s.host,
            "port": identity.port,
            # nats-server leaves it out when false.
            **({"auth_required": True} if s.auth_required else {}),
            "ping_interval": int(s.ping_interval * 1e9),
            "ping_max": s.max_pings_out,
            "http_host": s.monitor_host,
            "http_port": identity.http_port,
            "http_base_path": "",
            "https_port": 0,
            "auth_timeout": _go_float(s.auth_timeout),
            "max_control_line": 4096,
            "max_payload": s.max_payload,
            "max_pending": s.max_pending,
            "max_connections": s.max_connections,
            "write_deadline": int(s.write_deadline * 1e9),
            "cluster": {},
            "gateway": {},
            "leaf": {},
            "mqtt": {},
            "websocket": {},
            "jetstream": {
                "config": jsz.config(s.store_dir, s.jetstream_domain),
                "stats": jsz.stats(usage),
                "limits": {},
            },
            "start": rfc3339(identity.started),
            "now": rfc3339(now),
            "uptime": uptime(now - identity.started),
            "mem": resident_bytes(),
            "cores": os.cpu_count() or 1,
            "cpu": self.cpu.percent(),
            "connections": len(clients.connections),
            "total_connections": clients.total_connections,
            "routes": 0,
            "remotes": 0,
            "leafnodes": 0,
            **counts,
            "in_client_msgs": counts["in_msgs"],
            "in_client_bytes": counts["in_bytes"],
            "out_client_msgs": counts["out_msgs"],
            "out_client_bytes": counts["out_bytes"],
            "slow_consumers": clients.slow_consumers,
            "stale_connections": clients.stale_connections,
            "stalled_clients": 0,
            "subscriptions": clients.subscription_count(),
            "http_req_stats": dict(self.http_requests),
            "config_load_time": rfc3339(identity.started),
            "config_digest": "",
            "system_account": SYSTEM_ACCOUNT,
            "slow_consumer_stats": _by_kind(clients.slow_consumers),
            "stale_connection_stats": _by_kind(clients.stale_connections),
            "infinistream": self._own(),
        }

    def _own(self) -> dict[str, Any]:
        s = self.settings
        figures = self.figures
        stats = figures.write_buffer.stats
        return {
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
            "commit_conflicts": figures.committer.conflicts,
            "consumer_commits": figures.consumer_store.commits,
            "consumer_conflicts": figures.consumer_store.conflicts,
            "object_requests": dataclasses.asdict(figures.objects.stats),
            "cache_bytes": figures.cache.size_bytes,
            "index_cache_bytes": figures.index_cache.used,
            # What the local object store keeps of where its objects are (`--pack-index`).
            "pack_index_bytes": _pack_index_bytes(figures),
            "damaged": figures.damage.report(),
            "zone_cache": figures.zone_cache.report(),
            # The pool's live agents (server/membership.py), this agent's zone and roles.
            "pool": _pool(self.pool, s),
            "encryption": _encryption(figures),
        }


def _pack_index_bytes(figures: AgentFigures) -> int:
    local = figures.objects.local
    return local.index.used if local is not None else 0


def _pool(pool: LiveMembers, settings: Settings) -> dict[str, Any]:
    """The pool: this agent's zone and roles, and every live member."""
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


def _encryption(figures: AgentFigures) -> dict[str, Any]:
    """Encryption at rest: which key new objects are sealed with, which others are held (for
    reading until `pipeline rewrap` is done), and reads refused for want of a key."""
    enc = figures.write_buffer.encryption
    refused = figures.damage.key_refusals
    if enc is None:
        return {"enabled": False, "refused_reads": refused}
    return {
        "enabled": True,
        "cipher": cipher_name(enc.cipher),
        "key_id": enc.current_id,
        "key_ids": list(enc.keys.key_ids()),
        "refused_reads": refused + enc.value_refusals,
    }
