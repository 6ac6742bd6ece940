"""/connz: the clients connected to this agent (and the last ones closed), nats-server's Connz.

Options as nats-server's: `sort` (cid, start, subs, pending, msgs_to, msgs_from, bytes_to,
bytes_from, last, idle, uptime, stop, reason, rtt; cid ascending, the others descending),
`offset`/`limit` paging, `subs` (true, or `detail`), `auth`, `cid`, `state` (open, closed,
any), `user` and `acc` filters. The agent does not measure round trips: `rtt` is left out and
sorting by it keeps the cid order.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from infinistream.jetstream.subjects import collide
from infinistream.server.clients import ClosedConnection
from infinistream.server.connection import ClientConnection
from infinistream.server.monitoring import query
from infinistream.server.monitoring.accounts_model import (
    GLOBAL_ACCOUNT,
    ClientsEndpoint,
    account_names,
    account_of,
)
from infinistream.server.monitoring.timefmt import rfc3339, uptime

DEFAULT_LIMIT = 1024
OPEN, CLOSED, ANY = 0, 1, 2
SORTS = (
    "cid",
    "start",
    "subs",
    "pending",
    "msgs_to",
    "msgs_from",
    "bytes_to",
    "bytes_from",
    "last",
    "idle",
    "uptime",
    "stop",
    "reason",
    "rtt",
)


class ConnzOptions(msgspec.Struct):
    """nats-server's ConnzOptions, with its JSON names (the $SYS request body)."""

    sort: str = ""
    auth: bool = False
    subscriptions: bool = False
    subscriptions_detail: bool = False
    offset: int = 0
    limit: int = 0
    cid: int = 0
    state: int = OPEN
    user: str = ""
    acc: str = ""
    mqtt_client: str = ""
    # Only the connections with a subscription that collides with it (with `acc` only).
    filter_subject: str = ""


def _state(q: Mapping[str, str]) -> int:
    value = q.get("state", "")
    states = {"": OPEN, "open": OPEN, "closed": CLOSED, "any": ANY, "all": ANY}
    if value.lower() not in states:
        raise query.BadOption(f"Error decoding state for {value}")
    return states[value.lower()]


def options_from_query(q: Mapping[str, str]) -> ConnzOptions:
    opts = ConnzOptions(sort=query.text(q, "sort"), auth=query.boolean(q, "auth"))
    if q.get("subs", "").lower() == "detail":
        opts.subscriptions_detail = True
    else:
        opts.subscriptions = query.boolean(q, "subs")
    opts.offset = query.integer(q, "offset")
    opts.limit = query.integer(q, "limit")
    opts.cid = query.unsigned(q, "cid")
    opts.state = _state(q)
    opts.user = query.text(q, "user")
    opts.acc = query.text(q, "acc")
    opts.mqtt_client = query.text(q, "mqtt_client")
    return opts


def _user(conn: ClientConnection) -> str:
    identity = conn.identity
    return (identity.user or "") if identity is not None else ""


def _subs_fields(
    subs: list[tuple[str, str, str | None, int]], cid: int, opts: ConnzOptions
) -> dict[str, Any]:
    if not subs:
        return {}
    if opts.subscriptions_detail:
        detail = []
        for subject, sid, queue, msgs in subs:
            d: dict[str, Any] = {"subject": subject}
            if queue:
                d["qgroup"] = queue
            d.update(sid=sid, msgs=msgs, cid=cid)
            detail.append(d)
        return {"subscriptions_list_detail": detail}
    if opts.subscriptions:
        return {"subscriptions_list": [s[0] for s in subs]}
    return {}


def _info(
    c: ClientConnection | ClosedConnection,
    pending: int,
    who: tuple[str, str],
    subs: list[tuple[str, str, str | None, int]],
    now: float,
    opts: ConnzOptions,
) -> dict[str, Any]:
    """A connection as /connz shows it, open or closed (the figures both keep)."""
    info: dict[str, Any] = {
        "cid": c.client_id,
        "kind": "Client",
        "type": "nats",
        "ip": c.peer[0],
        "port": c.peer[1],
        "start": rfc3339(c.started),
        "last_activity": rfc3339(c.last_activity),
    }
    end = now
    if isinstance(c, ClosedConnection):
        info.update(stop=rfc3339(c.stopped), reason=c.reason)
        end = c.stopped
    info.update(
        uptime=uptime(end - c.started),
        idle=uptime(now - c.last_activity),
        pending_bytes=pending,
        in_msgs=c.in_msgs,
        out_msgs=c.out_msgs,
        in_bytes=c.in_bytes,
        out_bytes=c.out_bytes,
        subscriptions=len(subs),
    )
    for key in ("name", "lang", "version"):
        if c.options.get(key):
            info[key] = str(c.options[key])
    account, user = who
    if opts.auth and user:
        info["authorized_user"] = user
    if opts.auth and account != GLOBAL_ACCOUNT:
        info["account"] = account
    info.update(_subs_fields(subs, c.client_id, opts))
    if opts.auth:
        info["name_tag"] = account
    return info


def _open_info(conn: ClientConnection, now: float, opts: ConnzOptions) -> dict[str, Any]:
    transport = conn.transport
    pending = transport.get_write_buffer_size() if transport is not None else 0
    subs = [(s.subject, s.sid, s.queue, s.delivered) for s in conn.subs.values()]
    return _info(conn, pending, (account_of(conn), _user(conn)), subs, now, opts)


def _closed_info(c: ClosedConnection, now: float, opts: ConnzOptions) -> dict[str, Any]:
    return _info(c, 0, (c.account, c.user), list(c.subs), now, opts)


def _sort_key(sort: str, now: float) -> Callable[[dict[str, Any]], Any]:
    keys: dict[str, Callable[[dict[str, Any]], Any]] = {
        "subs": lambda c: c["subscriptions"],
        "pending": lambda c: c["pending_bytes"],
        "msgs_to": lambda c: c["out_msgs"],
        "msgs_from": lambda c: c["in_msgs"],
        "bytes_to": lambda c: c["out_bytes"],
        "bytes_from": lambda c: c["in_bytes"],
        "last": lambda c: c["_last"],
        "idle": lambda c: now - c["_last"],
        "stop": lambda c: c.get("stop", ""),
    }
    return keys[sort]


def _wanted(opts: ConnzOptions, cid: int, account: str, user: str) -> bool:
    """Whether the connection passes the cid, account, user and MQTT filters."""
    return (
        (not opts.cid or cid == opts.cid)
        and (not opts.acc or account == opts.acc)
        and (not opts.user or user == opts.user)
        and not opts.mqtt_client
    )


class Connz(ClientsEndpoint):
    def answer(self, opts: ConnzOptions) -> dict[str, Any]:
        sort = opts.sort or "cid"
        if sort not in SORTS:
            raise query.BadOption(f"invalid sorting option: {sort}")
        if sort in ("stop", "reason") and opts.state != CLOSED:
            raise query.BadOption(f"sort by {sort} only valid on closed connections")
        offset = max(opts.offset, 0)
        limit = opts.limit if opts.limit > 0 else DEFAULT_LIMIT
        if opts.cid > 0:
            limit = 1
        subject_filter = opts.filter_subject if opts.filter_subject not in ("", ">") else ""
        if subject_filter and not opts.acc:
            raise query.BadOption("filter by subject only valid with account filtering")
        now = time.time()
        if opts.acc and opts.acc not in account_names(self.settings):
            # nats-server's answer for an account it does not know: no server id, no list.
            return {
                "server_id": "",
                "now": rfc3339(now),
                "num_connections": 0,
                "total": 0,
                "offset": offset,
                "limit": limit,
                "connections": None,
            }
        rows = self._rows(opts, subject_filter, now)
        _sort(rows, sort, now)
        start, end = query.page(len(rows), offset, limit)
        return {
            "server_id": self.identity.server_id,
            "now": rfc3339(now),
            "num_connections": end - start,
            "total": len(rows),
            "offset": offset,
            "limit": limit,
            "connections": [r[0] for r in rows[start:end]],
        }

    def _rows(
        self, opts: ConnzOptions, subject_filter: str, now: float
    ) -> list[tuple[dict[str, Any], float, float]]:
        """Each connection shown: its info, when it started, its last activity."""
        rows: list[tuple[dict[str, Any], float, float]] = []
        if opts.state in (OPEN, ANY):
            for conn in list(self.clients.connections.values()):
                if not _wanted(opts, conn.client_id, account_of(conn), _user(conn)):
                    continue
                if subject_filter and not any(
                    collide(subject_filter, sub.subject) for sub in conn.subs.values()
                ):
                    continue
                rows.append((_open_info(conn, now, opts), conn.started, conn.last_activity))
        if opts.state in (CLOSED, ANY) and not (opts.cid and rows):
            for c in list(self.clients.closed_connections):
                if _wanted(opts, c.client_id, c.account, c.user):
                    rows.append((_closed_info(c, now, opts), c.started, c.last_activity))
        return rows


def _sort(rows: list[tuple[dict[str, Any], float, float]], sort: str, now: float) -> None:
    if sort in ("cid", "start", "rtt"):
        rows.sort(key=lambda r: r[0]["cid"])
    elif sort == "uptime":
        rows.sort(key=lambda r: r[1])  # oldest first: the longest uptime
    elif sort == "reason":
        rows.sort(key=lambda r: r[0].get("reason", ""))
    else:
        key = _sort_key(sort, now)
        rows.sort(key=lambda r: key({**r[0], "_last": r[2]}), reverse=True)
