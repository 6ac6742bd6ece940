"""/jsz: JetStream's usage, and per account its streams and consumers (nats-server's JSInfo).

Options as nats-server's: `accounts`, `streams`, `consumers` (implies streams), `config`,
`acc` (one account, which wins over `accounts`), `offset`/`limit` (pages of accounts).
The figures are the group's: every agent of a group serves the same streams.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from infinistream.handlers.streams import stream_state_to_wire
from infinistream.jetstream.api import API_LEVEL, rfc3339, stream_config_to_wire
from infinistream.server.monitoring import query
from infinistream.server.monitoring.accounts_model import streams_account
from infinistream.server.monitoring.timefmt import rfc3339 as time_rfc3339
from infinistream.server.reports import Reports
from infinistream.stream.catalog import StreamEntry
from infinistream.stream.records import StreamState, decode_state

DEFAULT_LIMIT = 1024


class JszOptions(msgspec.Struct, omit_defaults=True):
    """nats-server's JSzOptions, with its JSON names (the $SYS request body)."""

    account: str = ""
    accounts: bool = False
    streams: bool = False
    consumer: bool = False
    config: bool = False
    leader_only: bool = False
    offset: int = 0
    limit: int = 0


def options_from_query(q: Mapping[str, str]) -> JszOptions:
    opts = JszOptions(
        accounts=query.boolean(q, "accounts"),
        streams=query.boolean(q, "streams"),
        consumer=query.boolean(q, "consumers"),
    )
    query.boolean(q, "direct-consumers")  # checked as nats-server does; none exist here
    opts.config = query.boolean(q, "config")
    opts.offset = query.integer(q, "offset")
    opts.limit = query.integer(q, "limit")
    opts.leader_only = query.boolean(q, "leader-only")
    query.boolean(q, "raft")
    query.boolean(q, "stream-leader-only")
    opts.account = query.text(q, "acc")
    return opts


@dataclass(frozen=True)
class StreamUsage:
    entry: StreamEntry
    state: StreamState
    consumers: int


async def stream_usage(reports: Reports) -> list[StreamUsage]:
    """Every stream of the group with its state and consumer count, by name."""
    catalog = reports.catalog
    await catalog.refresh()
    entries = sorted(catalog.streams.values(), key=lambda e: e.name)
    items = await reports.meta.get_many([e.keys.state for e in entries])
    out = []
    for e in entries:
        item = items.get(e.keys.state)
        if item is not None:
            count = await reports.consumer_store.count(e.name)
            out.append(StreamUsage(e, decode_state(item.value), count))
    return out


def config(reports: Reports) -> dict[str, Any]:
    """JetStreamConfig: storage is object storage, unbounded; every ack follows a durable
    commit (nats-server's sync_always)."""
    return {
        "max_memory": 0,
        "max_storage": -1,
        "store_dir": reports.settings.store_dir,
        "sync_interval": 0,
        "sync_always": True,
    }


def stats(reports: Reports, usage: list[StreamUsage]) -> dict[str, Any]:
    """JetStreamStats of the server (varz `jetstream.stats`, the top of /jsz)."""
    return {
        "memory": 0,
        "storage": sum(u.state.bytes for u in usage),
        "reserved_memory": 0,
        "reserved_storage": 0,
        "accounts": 1,
        "ha_assets": 0,
        "api": {"level": API_LEVEL, "total": reports.api.total, "errors": reports.api.errors},
    }


async def jsz(reports: Reports, opts: JszOptions) -> dict[str, Any]:
    offset = max(opts.offset, 0)
    limit = opts.limit or DEFAULT_LIMIT
    show_streams = opts.streams or opts.consumer
    show_accounts = opts.accounts or (show_streams and not opts.account)
    usage = await stream_usage(reports)
    out: dict[str, Any] = stats(reports, usage)
    out.update(
        server_id=reports.identity.server_id,
        now=time_rfc3339(time.time()),
        config=config(reports),
        limits={},
        streams=len(usage),
        consumers=sum(u.consumers for u in usage),
        messages=sum(u.state.msgs for u in usage),
        bytes=sum(u.state.bytes for u in usage),
    )
    accounts = [streams_account(reports.settings)]
    if opts.account:
        accounts = [a for a in accounts if a == opts.account]
    elif show_accounts and limit > 0:
        accounts = accounts[min(offset, len(accounts)) :][:limit]
    else:
        accounts = []
    if accounts:
        out["account_details"] = [
            await _account_detail(reports, name, usage, show_streams, opts) for name in accounts
        ]
    out["total"] = 1
    return out


async def _account_detail(
    reports: Reports, name: str, usage: list[StreamUsage], show_streams: bool, opts: JszOptions
) -> dict[str, Any]:
    detail: dict[str, Any] = {"name": name, "id": name, **stats(reports, usage)}
    detail["accounts"] = 0
    if show_streams and usage:
        detail["stream_detail"] = [await _stream_detail(reports, u, opts) for u in usage]
    return detail


async def _stream_detail(reports: Reports, u: StreamUsage, opts: JszOptions) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": u.entry.name,
        "created": rfc3339(u.entry.created_ns),
        "cluster": {"leader": reports.settings.server_name},
    }
    if opts.config:
        out["config"] = stream_config_to_wire(u.entry.config)
    out["state"] = stream_state_to_wire(u.state, u.consumers)
    if opts.consumer:
        consumers = await reports.consumer_store.load_all(u.entry.name)
        if consumers:
            view = await reports.catalog.view(u.entry.name)
            details = []
            for loaded in sorted(consumers, key=lambda c: c.name):
                info = await reports.consumer_api.info_of(loaded, None, view)
                if not opts.config:
                    info.pop("config", None)
                details.append(info)
            out["consumer_detail"] = details
    return out
