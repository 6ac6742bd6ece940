"""/jsz: JetStream's usage, and per account its streams and consumers (nats-server's JSInfo).

Options as nats-server's: `accounts`, `streams`, `consumers` (implies streams), `config`,
`acc` (one account, which wins over `accounts`), `offset`/`limit` (pages of accounts).
Accounts are read through `JetStreamAccounts` (usage.py); every agent of a group serves the
same streams, so every agent answers with the same figures.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from infinistream.handlers.streams import stream_state_to_wire
from infinistream.jetstream.api import API_LEVEL, stream_config_to_wire
from infinistream.jetstream.times import go_time_or_zero
from infinistream.server.info import Identity
from infinistream.server.monitoring import query
from infinistream.server.monitoring.timefmt import rfc3339 as time_rfc3339
from infinistream.server.monitoring.usage import (
    AccountUsage,
    JetStreamAccounts,
    StreamUsage,
    all_usage,
)

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


def config(store_dir: str, domain: str = "") -> dict[str, Any]:
    """JetStreamConfig: storage is object storage, unbounded; every ack follows a durable
    commit (nats-server's sync_always)."""
    out: dict[str, Any] = {
        "max_memory": 0,
        "max_storage": -1,
        "store_dir": store_dir,
        "sync_interval": 0,
        "sync_always": True,
    }
    if domain:
        out["domain"] = domain
    return out


def stats(usage: list[AccountUsage]) -> dict[str, Any]:
    """JetStreamStats of the server (varz `jetstream.stats`, the top of /jsz): every account's."""
    return {
        "memory": 0,
        "storage": sum(u.storage for u in usage),
        "reserved_memory": 0,
        "reserved_storage": 0,
        "accounts": len(usage),
        "ha_assets": 0,
        "api": {
            "level": API_LEVEL,
            "total": sum(u.api_total for u in usage),
            "errors": sum(u.api_errors for u in usage),
        },
    }


def _account_stats(usage: AccountUsage) -> dict[str, Any]:
    return {
        "memory": 0,
        "storage": usage.storage,
        "reserved_memory": 0,
        "reserved_storage": 0,
        "accounts": 0,
        "ha_assets": 0,
        "api": {"level": API_LEVEL, "total": usage.api_total, "errors": usage.api_errors},
    }


@dataclass(eq=False)
class Jsz:
    identity: Identity
    # Every agent of a group leads every stream: this one's name is the leader's.
    server_name: str
    store_dir: str
    accounts: JetStreamAccounts
    domain: str = ""

    async def answer(self, opts: JszOptions) -> dict[str, Any]:
        offset = max(opts.offset, 0)
        limit = opts.limit or DEFAULT_LIMIT
        show_streams = opts.streams or opts.consumer
        show_accounts = opts.accounts or (show_streams and not opts.account)
        usage = await all_usage(self.accounts)
        out: dict[str, Any] = stats(usage)
        out.update(
            server_id=self.identity.server_id,
            now=time_rfc3339(time.time()),
            config=config(self.store_dir, self.domain),
            limits={},
            streams=sum(len(u.streams) for u in usage),
            consumers=sum(u.consumers for u in usage),
            messages=sum(u.messages for u in usage),
            bytes=sum(u.storage for u in usage),
        )
        shown = [u for u in usage if u.account == opts.account]
        if not shown and not opts.account and show_accounts and limit > 0:
            shown = usage[min(offset, len(usage)) :][:limit]
        if shown:
            out["account_details"] = [
                await self._account_detail(u, show_streams, opts) for u in shown
            ]
        out["total"] = len(usage)
        return out

    async def _account_detail(
        self, usage: AccountUsage, show_streams: bool, opts: JszOptions
    ) -> dict[str, Any]:
        detail: dict[str, Any] = {"name": usage.account, "id": usage.account}
        detail.update(_account_stats(usage))
        if show_streams and usage.streams:
            detail["stream_detail"] = [
                await self._stream_detail(usage.account, u, opts) for u in usage.streams
            ]
        return detail

    async def _stream_detail(
        self, account: str, u: StreamUsage, opts: JszOptions
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": u.entry.name,
            "created": go_time_or_zero(u.entry.created_ns),
            "cluster": {"leader": self.server_name},
        }
        if opts.config:
            out["config"] = stream_config_to_wire(u.entry.config)
        out["state"] = stream_state_to_wire(u.state, u.consumers)
        out.update(u.origins)
        if opts.consumer:
            details = await self.accounts.consumer_details(account, u.entry.name, opts.config)
            if details:
                out["consumer_detail"] = details
        return out
