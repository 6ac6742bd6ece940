"""The route table of nats-server's endpoints: each handler reads the query and answers JSON."""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from infinistream.server.monitoring import health
from infinistream.server.monitoring.health import HealthProbe
from infinistream.server.reports import Reports


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=msgspec.json.encode(body), status=status, content_type="application/json"
    )


def routes(reports: Reports, probes: list[HealthProbe]) -> list[web.RouteDef]:
    async def varz(request: web.Request) -> web.Response:
        return json_response(reports.varz())

    async def healthz(request: web.Request) -> web.Response:
        code, body = health.status(await health.failures(probes))
        return json_response(body, code)

    return [web.get("/varz", varz), web.get("/healthz", healthz)]
