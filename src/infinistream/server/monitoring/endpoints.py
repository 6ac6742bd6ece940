"""nats-server's monitoring endpoints, answered from the agent's `Reports`.

`Monitoring` computes each endpoint's answer from its options; HTTP (`routes`) and the system
account's request subjects (system.py) both ask it. Over HTTP, options come from the query
string and a refused option is answered 400 with nats-server's text as a plain body; JSON is
indented as nats-server's, with its CORS header.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from infinistream.server.monitoring import accountz, cluster, connz, health, jsz, query, subsz
from infinistream.server.monitoring.accountz import AccountStatzOptions, AccountzOptions
from infinistream.server.monitoring.connz import ConnzOptions
from infinistream.server.monitoring.health import HealthProbe, HealthzOptions
from infinistream.server.monitoring.jsz import JszOptions
from infinistream.server.monitoring.process import CpuSampler
from infinistream.server.monitoring.subsz import SubszOptions
from infinistream.server.monitoring.varz import varz
from infinistream.server.reports import Reports

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(eq=False)
class Monitoring:
    reports: Reports
    probes: Sequence[HealthProbe]
    cpu: CpuSampler = field(default_factory=CpuSampler)
    # Requests per HTTP path, as varz `http_req_stats`.
    http_req_stats: dict[str, int] = field(default_factory=dict)

    async def varz(self) -> dict[str, Any]:
        return await varz(self.reports, self.cpu, self.http_req_stats)

    async def jsz(self, opts: JszOptions) -> dict[str, Any]:
        return await jsz.jsz(self.reports, opts)

    def connz(self, opts: ConnzOptions) -> dict[str, Any]:
        return connz.connz(self.reports, opts)

    def subsz(self, opts: SubszOptions) -> dict[str, Any]:
        return subsz.subsz(self.reports, opts)

    def accountz(self, opts: AccountzOptions) -> dict[str, Any]:
        return accountz.accountz(self.reports, opts)

    def accstatz(self, opts: AccountStatzOptions) -> dict[str, Any]:
        return accountz.accstatz(self.reports, opts)

    async def healthz(self, opts: HealthzOptions) -> tuple[int, dict[str, Any]]:
        return await health.healthz(self.reports, self.probes, opts)


def json_response(body: Any, status: int = 200, indent: bool = True) -> web.Response:
    text = json.dumps(body, indent=2) if indent else json.dumps(body, separators=(",", ":"))
    # Exactly nats-server's headers (aiohttp's content_type would add a charset).
    headers = {"Content-Type": "application/json", "Access-Control-Allow-Origin": "*"}
    return web.Response(body=text.encode(), status=status, headers=headers)


def _refused(exc: query.BadOption) -> web.Response:
    return web.Response(status=400, text=str(exc), content_type="text/plain", charset="utf-8")


def routes(monitoring: Monitoring) -> list[web.RouteDef]:
    m = monitoring

    def endpoint(path: str, answer: Callable[[web.Request], Awaitable[Any]]) -> web.RouteDef:
        async def handle(request: web.Request) -> web.StreamResponse:
            m.http_req_stats[path] = m.http_req_stats.get(path, 0) + 1
            try:
                return json_response(await answer(request))
            except query.BadOption as exc:
                return _refused(exc)

        return web.get(path, handle)

    async def healthz(request: web.Request) -> web.StreamResponse:
        m.http_req_stats["/healthz"] = m.http_req_stats.get("/healthz", 0) + 1
        try:
            code, body = await m.healthz(health.options_from_query(request.query))
        except query.BadOption as exc:
            return _refused(exc)
        body.pop("status_code", None)  # the HTTP status says it (as nats-server)
        return json_response(body, code, indent=False)

    async def _varz(r: web.Request) -> Any:
        return await m.varz()

    async def _jsz(r: web.Request) -> Any:
        return await m.jsz(jsz.options_from_query(r.query))

    async def _connz(r: web.Request) -> Any:
        return m.connz(connz.options_from_query(r.query))

    async def _subsz(r: web.Request) -> Any:
        return m.subsz(subsz.options_from_query(r.query))

    async def _accountz(r: web.Request) -> Any:
        return m.accountz(accountz.accountz_options_from_query(r.query))

    async def _accstatz(r: web.Request) -> Any:
        return m.accstatz(accountz.accstatz_options_from_query(r.query))

    async def _routez(r: web.Request) -> Any:
        return cluster.routez(m.reports)

    async def _gatewayz(r: web.Request) -> Any:
        return cluster.gatewayz(m.reports)

    async def _leafz(r: web.Request) -> Any:
        return cluster.leafz(m.reports)

    return [
        endpoint("/varz", _varz),
        endpoint("/jsz", _jsz),
        endpoint("/connz", _connz),
        endpoint("/subsz", _subsz),
        endpoint("/subscriptionsz", _subsz),
        endpoint("/accountz", _accountz),
        endpoint("/accstatz", _accstatz),
        endpoint("/routez", _routez),
        endpoint("/gatewayz", _gatewayz),
        endpoint("/leafz", _leafz),
        web.get("/healthz", healthz),
    ]
