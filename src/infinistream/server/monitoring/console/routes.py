"""The console's routes, mounted on the monitoring application (monitoring/app.py)."""

from __future__ import annotations

import json
import logging
from importlib import resources

from aiohttp import web

from infinistream.metadata.kv import MetadataStore
from infinistream.server.monitoring.console import overview
from infinistream.server.monitoring.console.history import History
from infinistream.settings import Settings

log = logging.getLogger(__name__)

# The files of static/, with their content types; nothing else is served from there.
ASSETS = {
    "index.html": "text/html",
    "console.js": "text/javascript",
    "console.css": "text/css",
}


def _read(name: str) -> bytes:
    return (
        resources.files("infinistream.server.monitoring.console") / "static" / name
    ).read_bytes()


def console_routes(history: History, settings: Settings, meta: MetadataStore) -> list[web.RouteDef]:
    """The page and its assets, and the overview's JSON: the history, the bill of this
    agent's object requests (`settings`: the store's URL) and the group's jobs (read from
    `meta`)."""
    assets = {name: _read(name) for name in ASSETS}

    async def index(request: web.Request) -> web.Response:
        return _asset(assets, "index.html")

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in assets:
            raise web.HTTPNotFound()
        return _asset(assets, name)

    async def api_overview(request: web.Request) -> web.Response:
        body = {
            "history": history.series(),
            "cost": overview.cost(history, settings),
        }
        try:
            body["jobs"] = await overview.jobs(meta, settings)
        except Exception as exc:
            # The metadata store down: the page says so, the rest of it still shows.
            body["jobs"] = {"error": str(exc) or type(exc).__name__}
        return web.Response(
            text=json.dumps(body), content_type="application/json", headers=_NO_CACHE
        )

    return [
        web.get("/", index),
        web.get("/console/api/overview", api_overview),
        web.get("/console/{name}", asset),
    ]


_NO_CACHE = {"Cache-Control": "no-store"}


def _asset(assets: dict[str, bytes], name: str) -> web.Response:
    return web.Response(
        body=assets[name], content_type=ASSETS[name], charset="utf-8", headers=_NO_CACHE
    )
