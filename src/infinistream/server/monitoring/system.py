"""The system account's monitoring requests: `$SYS.REQ.SERVER.PING.<NAME>` (every server
answers) and `$SYS.REQ.SERVER.<server id>.<NAME>` (this one), answered in nats-server's
envelope `{"server": {...}, "data": {...}}` (or `"error"`), so that server tooling (`nats
server ls/report/check`) works against an agent.

The request body, if any, is the endpoint's options as JSON (nats-server's names) with its
server filters (`server_name`, `host`, `exact_match`, ...): a server they leave out stays
silent, as nats-server does. Clients of the system account (`system_account`, `$SYS` by
default) may ask everything; a client of another account only about itself, as nats-server
imports into every account: `$SYS.REQ.SERVER.PING.CONNZ` and `$SYS.REQ.ACCOUNT.PING.CONNZ`
(its account's connections), `$SYS.REQ.ACCOUNT.PING.STATZ`, `$SYS.REQ.USER.INFO`. An agent
answers for itself only: agents of a group share no connections, so a PING reaches the agent
the requester is connected to.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from infinistream.jetstream.api import NATS_COMPAT_VERSION
from infinistream.protocol import decode_json
from infinistream.server.info import Identity
from infinistream.server.monitoring import accountz, connz, health, jsz, query, subsz
from infinistream.server.monitoring.accounts_model import system_account
from infinistream.server.monitoring.endpoints import Endpoints
from infinistream.server.monitoring.statsz import Statsz
from infinistream.server.monitoring.timefmt import rfc3339
from infinistream.settings import Settings

log = logging.getLogger(__name__)

PREFIX = "$SYS.REQ.SERVER."
PING = "$SYS.REQ.SERVER.PING"
ACCOUNT_CONNZ = "$SYS.REQ.ACCOUNT.PING.CONNZ"
ACCOUNT_STATZ = "$SYS.REQ.ACCOUNT.PING.STATZ"
USER_INFO = "$SYS.REQ.USER.INFO"
# What a client of any account may ask, about its own account.
ACCOUNT_SCOPED = {
    "$SYS.REQ.SERVER.PING.CONNZ": "ACCOUNT_CONNZ",
    ACCOUNT_CONNZ: "ACCOUNT_CONNZ",
    ACCOUNT_STATZ: "ACCOUNT_STATZ",
    USER_INFO: "USER_INFO",
}
JETSTREAM_ENABLED = 1  # nats-server's ServerCapability flag


class EventFilter(msgspec.Struct):
    server_name: str = ""
    cluster: str = ""
    host: str = ""
    exact_match: bool = False
    tags: list[str] = msgspec.field(default_factory=list)
    domain: str = ""


class SystemRequests:
    def __init__(
        self, settings: Settings, identity: Identity, endpoints: Endpoints, statsz: Statsz
    ) -> None:
        self.settings = settings
        self.identity = identity
        self.endpoints = endpoints
        self.statsz = statsz
        self._seq = itertools.count(1)
        e = endpoints
        self._answers: dict[str, tuple[type[Any] | None, Callable[[Any], Awaitable[Any]]]] = {
            "VARZ": (None, lambda _: e.varz.answer()),
            "JSZ": (jsz.JszOptions, e.jsz.answer),
            "CONNZ": (connz.ConnzOptions, _now(e.connz.answer)),
            "SUBSZ": (subsz.SubszOptions, _now(e.subsz.answer)),
            "ACCOUNTZ": (accountz.AccountzOptions, _now(e.accountz.answer)),
            "ROUTEZ": (None, _now(lambda _: e.cluster.routez())),
            "GATEWAYZ": (None, _now(lambda _: e.cluster.gatewayz())),
            "LEAFZ": (None, _now(lambda _: e.cluster.leafz())),
            "HEALTHZ": (health.HealthzOptions, self._healthz),
        }

    def _name(self, account: str, subject: str) -> str | None:
        """The endpoint a client of `account` asks for on `subject`, if this server answers
        it. The system account asks for any; every account may ask for its own connections,
        statistics and user (nats-server imports these subjects into every account)."""
        if account != system_account(self.settings):
            return ACCOUNT_SCOPED.get(subject)
        if subject in (ACCOUNT_CONNZ, ACCOUNT_STATZ, USER_INFO):
            return ACCOUNT_SCOPED[subject]
        if subject == PING:
            return "STATSZ"  # the older form of PING.STATZ, which `nats server ls` sends
        if not subject.startswith(PREFIX):
            return None
        target, _, name = subject[len(PREFIX) :].partition(".")
        if target not in ("PING", self.identity.server_id):
            return None
        return name if name in self._answers or name in ("STATSZ", "IDZ") else None

    def serves(self, account: str, subject: str) -> bool:
        """Whether this server answers a client of `account` on `subject` (others find no
        responders)."""
        return self._name(account, subject) is not None

    async def answer(
        self, subject: str, payload: bytes, account: str, user: str = ""
    ) -> bytes | None:
        """The reply to a request of a client of `account` on `subject`, or None when this
        server stays silent (its server filters leave it out)."""
        name = self._name(account, subject)
        if name is None:
            return None
        if name == "USER_INFO":
            data = {"user": user, "account": account, "account_name": account}
            return _encode({"server": self._server_info(), "data": data})
        if name == "ACCOUNT_STATZ":
            opts = accountz.AccountStatzOptions(accounts=[account], include_unused=True)
            data = self.endpoints.accstatz.answer(opts)
            return _encode({"server": self._server_info(), "data": data})
        if name == "ACCOUNT_CONNZ":
            account_connz = self._account_connz(account)
            return await self._respond(payload, connz.ConnzOptions, account_connz)
        if name == "IDZ":
            s = self.settings
            return _encode({"name": s.server_name, "host": s.host, "id": self.identity.server_id})
        if name == "STATSZ":
            if payload.strip():
                try:
                    if not self._selected(decode_json(payload, type=EventFilter)):
                        return None
                except (msgspec.DecodeError, msgspec.ValidationError):
                    pass  # nats-server's STATSZ answers regardless
            return _encode({"server": self._server_info(), "statsz": await self.statsz.answer()})
        options_type, compute = self._answers[name]
        return await self._respond(payload, options_type, compute)

    def _account_connz(self, account: str) -> Callable[[Any], Awaitable[Any]]:
        async def compute(opts: connz.ConnzOptions) -> Any:
            opts.acc = account  # whatever the request says: its own account's only
            return self.endpoints.connz.answer(opts)

        return compute

    async def _respond(
        self,
        payload: bytes,
        options_type: type[Any] | None,
        compute: Callable[[Any], Awaitable[Any]],
    ) -> bytes | None:
        options: Any = options_type() if options_type is not None else None
        response: dict[str, Any] = {"server": self._server_info()}
        if payload.strip():
            try:
                selected = self._selected(decode_json(payload, type=EventFilter))
                if options_type is not None:
                    options = decode_json(payload, type=options_type)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                response["error"] = {"code": 400, "description": str(exc)}
                return _encode(response)
            if not selected:
                return None
        try:
            response["data"] = await compute(options)
        except query.BadOption as exc:
            # As nats-server: the answer it failed to make, then the error.
            response.update(data=None, error={"code": 500, "description": str(exc)})
        except Exception as exc:  # a store that fails: said in the same envelope
            log.warning("system request failed: %s", exc)
            response.update(data=None, error={"code": 500, "description": str(exc)})
        return _encode(response)

    def _selected(self, f: EventFilter) -> bool:
        """Whether this server passes a request's server filters (nats-server's
        filterRequest: a substring of the name or host unless `exact_match`)."""
        s = self.settings

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
        _, body = await self.endpoints.healthz.answer(opts)
        return body

    def _server_info(self) -> dict[str, Any]:
        s = self.settings
        return {
            "name": s.server_name,
            "host": s.host,
            "id": self.identity.server_id,
            "ver": NATS_COMPAT_VERSION,
            "jetstream": True,
            "flags": JETSTREAM_ENABLED,
            "seq": next(self._seq),
            "time": rfc3339(time.time()),
        }


def _now(f: Callable[[Any], Any]) -> Callable[[Any], Awaitable[Any]]:
    async def call(options: Any) -> Any:
        return f(options)

    return call


def _encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()
