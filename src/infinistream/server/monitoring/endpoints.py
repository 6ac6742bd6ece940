"""nats-server's monitoring endpoints over HTTP, and /metrics.

`Monitoring` (service.py) computes each endpoint's answer from its options. Over HTTP, options
come from the query string and a refused option is answered 400 with nats-server's text as a
plain body; JSON is indented as nats-server's, with its CORS header.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from infinistream.server.monitoring import (
    accountz,
    cluster,
    connz,
    health,
    jsz,
    metrics,
    query,
    subsz,
)
from infinistream.server.monitoring.service import Monitoring

log = logging.getLogger(__name__)


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
            except Exception as exc:  # a store that fails (metadata for /jsz): unavailable
                log.warning("monitoring %s failed: %s", path, exc)
                return web.Response(status=503, text=f"unavailable: {exc}", charset="utf-8")

        return web.get(path, handle)

    async def healthz(request: web.Request) -> web.StreamResponse:
        m.http_req_stats["/healthz"] = m.http_req_stats.get("/healthz", 0) + 1
        try:
            code, body = await m.healthz(health.options_from_query(request.query))
        except query.BadOption as exc:
            return _refused(exc)
        body.pop("status_code", None)  # the HTTP status says it (as nats-server)
        return json_response(body, code, indent=False)

    async def prometheus(request: web.Request) -> web.StreamResponse:
        m.http_req_stats["/metrics"] = m.http_req_stats.get("/metrics", 0) + 1
        try:
            body = await metrics.render(m)
        except Exception as exc:  # a store that fails: Prometheus records the scrape failed
            log.warning("monitoring /metrics failed: %s", exc)
            return web.Response(status=503, text=f"unavailable: {exc}", charset="utf-8")
        return web.Response(body=body, headers={"Content-Type": metrics.CONTENT_TYPE})

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
        web.get("/metrics", prometheus),
    ]
