"""nats-server's HTTP monitoring endpoints on the `-m` port, and /metrics, served with
aiohttp.web.

The application is built once, in `server/wiring.py`, from the endpoints (endpoints.py) and
/metrics, with further routes mounted beside them (the web console's). Options come from the
query string and a refused option is answered 400 with nats-server's text as a plain body;
JSON is indented as nats-server's, with its CORS header.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web

from infinistream.server.monitoring import accountz, connz, health, jsz, metrics, query, subsz
from infinistream.server.monitoring.endpoints import Endpoints
from infinistream.server.monitoring.metrics import Metrics

log = logging.getLogger(__name__)


def build_monitor_app(
    endpoints: Endpoints,
    prometheus: Metrics,
    requests: Counter[str],
    *,
    routes: Iterable[web.AbstractRouteDef] = (),
) -> web.Application:
    """The monitoring application: nats-server's endpoints and /metrics, each request counted
    in `requests` by path (/varz's `http_req_stats`), then `routes` added by others."""
    app = web.Application()
    app.add_routes(_routes(endpoints, prometheus, requests))
    app.add_routes(list(routes))
    return app


class MonitorServer:
    """Serves `app` on a host and port until closed."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self._runner: web.AppRunner | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen on `host:port` (0: any free port); the port listened on."""
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, reuse_address=True)
        await site.start()
        # The port asked for, unless 0: then the one the listening socket was given.
        sockets: list[Any] = list(getattr(site._server, "sockets", None) or [])
        return int(sockets[0].getsockname()[1]) if sockets else port

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def json_response(body: Any, status: int = 200, indent: bool = True) -> web.Response:
    text = json.dumps(body, indent=2) if indent else json.dumps(body, separators=(",", ":"))
    # Exactly nats-server's headers (aiohttp's content_type would add a charset).
    headers = {"Content-Type": "application/json", "Access-Control-Allow-Origin": "*"}
    return web.Response(body=text.encode(), status=status, headers=headers)


def _refused(exc: query.BadOption) -> web.Response:
    return web.Response(status=400, text=str(exc), content_type="text/plain", charset="utf-8")


def _unavailable(path: str, exc: Exception) -> web.Response:
    # The detail is the operator's, in the log; the answer names no exception and no path.
    log.warning("monitoring %s failed: %s: %s", path, type(exc).__name__, exc)
    return web.Response(status=503, text="unavailable", charset="utf-8")


def _routes(e: Endpoints, prometheus: Metrics, requests: Counter[str]) -> list[web.RouteDef]:
    def endpoint(path: str, answer: Callable[[web.Request], Awaitable[Any]]) -> web.RouteDef:
        async def handle(request: web.Request) -> web.StreamResponse:
            requests[path] += 1
            try:
                return json_response(await answer(request))
            except query.BadOption as exc:
                return _refused(exc)
            except Exception as exc:  # a store that fails (metadata for /jsz): unavailable
                return _unavailable(path, exc)

        return web.get(path, handle)

    async def healthz(request: web.Request) -> web.StreamResponse:
        requests["/healthz"] += 1
        try:
            code, body = await e.healthz.answer(health.options_from_query(request.query))
        except query.BadOption as exc:
            return _refused(exc)
        body.pop("status_code", None)  # the HTTP status says it (as nats-server)
        return json_response(body, code, indent=False)

    async def render_metrics(request: web.Request) -> web.StreamResponse:
        requests["/metrics"] += 1
        try:
            body = await prometheus.render()
        except Exception as exc:  # a store that fails: Prometheus records the scrape failed
            return _unavailable("/metrics", exc)
        return web.Response(body=body, headers={"Content-Type": metrics.CONTENT_TYPE})

    async def _varz(r: web.Request) -> Any:
        return await e.varz.answer()

    async def _jsz(r: web.Request) -> Any:
        return await e.jsz.answer(jsz.options_from_query(r.query))

    async def _connz(r: web.Request) -> Any:
        return e.connz.answer(connz.options_from_query(r.query))

    async def _subsz(r: web.Request) -> Any:
        return e.subsz.answer(subsz.options_from_query(r.query))

    async def _accountz(r: web.Request) -> Any:
        return e.accountz.answer(accountz.accountz_options_from_query(r.query))

    async def _accstatz(r: web.Request) -> Any:
        return e.accstatz.answer(accountz.accstatz_options_from_query(r.query))

    async def _routez(r: web.Request) -> Any:
        return e.cluster.routez()

    async def _gatewayz(r: web.Request) -> Any:
        return e.cluster.gatewayz()

    async def _leafz(r: web.Request) -> Any:
        return e.cluster.leafz()

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
        web.get("/metrics", render_metrics),
    ]
