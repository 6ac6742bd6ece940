"""The system account's monitoring requests: `$SYS.REQ.SERVER.PING.<NAME>` (every server
answers) and `$SYS.REQ.SERVER.<server id>.<NAME>` (this one), answered in nats-server's
envelope `{"server": {...}, "data": {...}}` (or `"error"`), so that server tooling (`nats
server ls/report/check`) works against an agent.

The request body, if any, is the endpoint's options as JSON (nats-server's names) with its
server filters (`server_name`, `host`, `exact_match`, ...): a server they leave out stays
silent, as nats-server does. Until the agent has accounts these subjects answer any client.
An agent answers for itself only: agents of a group share no connections, so a PING reaches
the agent the requester is connected to.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from infinistream.jetstream.api import NATS_COMPAT_VERSION
from infinistream.server.monitoring import accountz, cluster, connz, health, jsz, query, subsz
from infinistream.server.monitoring.endpoints import Monitoring
from infinistream.server.monitoring.process import resident_bytes
from infinistream.server.monitoring.timefmt import rfc3339

PREFIX = "$SYS.REQ.SERVER."
PING = "$SYS.REQ.SERVER.PING"
JETSTREAM_ENABLED = 1  # nats-server's ServerCapability flag


class EventFilter(msgspec.Struct):
    server_name: str = ""
    cluster: str = ""
    host: str = ""
    exact_match: bool = False
    tags: list[str] = msgspec.field(default_factory=list)
    domain: str = ""


class SystemRequests:
    def __init__(self, monitoring: Monitoring) -> None:
        self.monitoring = monitoring
        self._seq = itertools.count(1)
        m = monitoring
        self._answers: dict[str, tuple[type[Any] | None, Callable[[Any], Awaitable[Any]]]] = {
            "VARZ": (None, lambda _: m.varz()),
            "JSZ": (jsz.JszOptions, m.jsz),
            "CONNZ": (connz.ConnzOptions, _now(m.connz)),
            "SUBSZ": (subsz.SubszOptions, _now(m.subsz)),
            "ACCOUNTZ": (accountz.AccountzOptions, _now(m.accountz)),
            "ROUTEZ": (None, _now(lambda _: cluster.routez(m.reports))),
            "GATEWAYZ": (None, _now(lambda _: cluster.gatewayz(m.reports))),
            "LEAFZ": (None, _now(lambda _: cluster.leafz(m.reports))),
            "HEALTHZ": (health.HealthzOptions, self._healthz),
        }

    def serves(self, subject: str) -> bool:
        return subject.startswith(PREFIX) or subject == PING

    async def answer(self, subject: str, payload: bytes) -> bytes | None:
        """The reply to a request on `subject`, or None when this server does not answer."""
        identity = self.monitoring.reports.identity
        if subject == PING:
            name = "STATSZ"
        else:
            target, _, name = subject[len(PREFIX) :].partition(".")
            if target not in ("PING", identity.server_id) or "." in name:
                return None
        if name == "IDZ":
            s = self.monitoring.reports.settings
            return _encode({"name": s.server_name, "host": s.host, "id": identity.server_id})
        if name == "STATSZ":
            if payload.strip() and not self._selected(payload):
                return None
            return _encode({"server": self._server_info(), "statsz": await self._statsz()})
        known = self._answers.get(name)
        if known is None:
            return None  # nats-server's PROFILEZ, RAFTZ, ...: nothing here answers them
        options_type, compute = known
        options: Any = None
        response: dict[str, Any] = {"server": self._server_info()}
        try:
            if payload.strip():
                if not self._selected(payload):
                    return None
                if options_type is not None:
                    options = msgspec.json.decode(payload, type=options_type)
            elif options_type is not None:
                options = options_type()
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            response["error"] = {"code": 400, "description": str(exc)}
            return _encode(response)
        try:
            response["data"] = await compute(options)
        except query.BadOption as exc:
            response["error"] = {"code": 500, "description": str(exc)}
        return _encode(response)

    def _selected(self, payload: bytes) -> bool:
        """Whether this server passes the request's server filters (nats-server's
        filterRequest: a substring of the name or host unless `exact_match`)."""
        try:
            f = msgspec.json.decode(payload, type=EventFilter)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return True  # the endpoint's own decoding reports the error
        s = self.monitoring.reports.settings

        def fits(wanted: str, have: str) -> bool:
            return not wanted or (wanted == have if f.exact_match else wanted in have)

        return (
            fits(f.server_name, s.server_name)
            and fits(f.host, s.host)
            and not f.cluster
            and not f.tags
            and not f.domain
        )

    async def _healthz(self, opts: health.HealthzOptions) -> dict[str, Any]:
        _, body = await self.monitoring.healthz(opts)
        return body

    def _server_info(self) -> dict[str, Any]:
        s = self.monitoring.reports.settings
        return {
            "name": s.server_name,
            "host": s.host,
            "id": self.monitoring.reports.identity.server_id,
            "ver": NATS_COMPAT_VERSION,
            "jetstream": True,
            "flags": JETSTREAM_ENABLED,
            "seq": next(self._seq),
            "time": rfc3339(time.time()),
        }

    async def _statsz(self) -> dict[str, Any]:
        reports = self.monitoring.reports
        clients = reports.clients
        counts = clients.counts()
        usage = await jsz.stream_usage(reports)
        sent = {"msgs": counts["out_msgs"], "bytes": counts["out_bytes"]}
        received = {"msgs": counts["in_msgs"], "bytes": counts["in_bytes"]}
        return {
            "start": rfc3339(reports.identity.started),
            "mem": resident_bytes(),
            "cores": _cores(),
            "cpu": self.monitoring.cpu.percent(),
            "connections": len(clients.connections),
            "total_connections": clients.total_connections,
            "active_accounts": 1 if clients.connections else 0,
            "subscriptions": len(clients.subscriptions),
            "sent": sent,
            "sent_to_clients": sent,
            "received": received,
            "received_from_clients": received,
            "slow_consumers": clients.slow_consumers,
            "jetstream": {"config": jsz.config(reports), "stats": jsz.stats(reports, usage)},
        }


def _cores() -> int:
    return os.cpu_count() or 1


def _now(f: Callable[[Any], Any]) -> Callable[[Any], Awaitable[Any]]:
    async def call(options: Any) -> Any:
        return f(options)

    return call


def _encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()
