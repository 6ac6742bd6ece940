"""nats-server's HTTP monitoring endpoints on the `-m` port, served with aiohttp.web.

The application is built once, in `server/wiring.py`, from what it reports on:

    monitoring = Monitoring(reports, probes=[...])   # what the endpoints answer from
    app = build_monitor_app(monitoring, routes=[...])
    MonitorServer(app)                               # the agent starts and stops it

`probes` are health checks `/healthz` runs (each answers None when healthy, or the reason it
is not); `routes` are further aiohttp route definitions mounted on the same application (the
web console's pages, for instance). The endpoints themselves are the modules beside this one;
`Monitoring` also answers the system account's `$SYS.REQ.SERVER.*` requests.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from infinistream.server.monitoring import endpoints
from infinistream.server.monitoring.health import HealthProbe
from infinistream.server.monitoring.service import Monitoring

log = logging.getLogger(__name__)

__all__ = ["HealthProbe", "MonitorServer", "Monitoring", "build_monitor_app"]


def build_monitor_app(
    monitoring: Monitoring,
    *,
    routes: Iterable[web.AbstractRouteDef] = (),
) -> web.Application:
    """The monitoring application: nats-server's endpoints, then `routes` added by others."""
    app = web.Application()
    app.add_routes(endpoints.routes(monitoring))
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
