"""/accountz and /accstatz: the accounts, and per account its connections and traffic
(accounts_model: the configured ones, the system account and `$G`, as nats-server lists them).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import msgspec

from infinistream.server.monitoring import query
from infinistream.server.monitoring.accounts_model import (
    account_names,
    account_of,
    jetstream_enabled,
    system_account,
)
from infinistream.server.monitoring.timefmt import rfc3339
from infinistream.server.reports import Reports


class AccountzOptions(msgspec.Struct):
    account: str = ""


class AccountStatzOptions(msgspec.Struct):
    accounts: list[str] = msgspec.field(default_factory=list)
    include_unused: bool = False


def accountz_options_from_query(q: Mapping[str, str]) -> AccountzOptions:
    return AccountzOptions(account=query.text(q, "acc"))


def accstatz_options_from_query(q: Mapping[str, str]) -> AccountStatzOptions:
    return AccountStatzOptions(include_unused=query.boolean(q, "unused"))


def accountz(reports: Reports, opts: AccountzOptions) -> dict[str, Any]:
    settings = reports.settings
    names = account_names(settings)
    out: dict[str, Any] = {
        "server_id": reports.identity.server_id,
        "now": rfc3339(time.time()),
        "system_account": system_account(settings),
    }
    if not opts.account:
        out["accounts"] = names
        return out
    if opts.account not in names:
        raise query.BadOption(f"Account {opts.account} does not exist")
    conns = [c for c in reports.clients.connections.values() if account_of(c) == opts.account]
    subscriptions = sum(len(c.subs) for c in conns)
    detail: dict[str, Any] = {
        "account_name": opts.account,
        "update_time": rfc3339(reports.identity.started),
        "expired": False,
        "complete": True,
        "jetstream_enabled": jetstream_enabled(settings, opts.account),
        "leafnode_connections": 0,
        "client_connections": len(conns),
        "subscriptions": subscriptions,
        "name_tag": opts.account,
        "sublist_stats": _sublist_stats(reports, opts.account, subscriptions),
    }
    out["account_detail"] = detail
    return out


def _sublist_stats(reports: Reports, account: str, subscriptions: int) -> dict[str, Any]:
    """Each account has a subscription index of its own: its statistics."""
    stats: dict[str, Any] = reports.clients.sublist_stats(account)
    stats["num_subscriptions"] = subscriptions
    return stats


def _traffic(counts: dict[str, int], direction: str) -> dict[str, Any]:
    def none() -> dict[str, int]:
        return {"msgs": 0, "bytes": 0}

    return {
        "msgs": counts[f"{direction}_msgs"],
        "bytes": counts[f"{direction}_bytes"],
        "gateways": none(),
        "routes": none(),
        "leafs": none(),
    }


def accstatz(reports: Reports, opts: AccountStatzOptions) -> dict[str, Any]:
    clients = reports.clients
    names = account_names(reports.settings)
    stats = []
    for name in opts.accounts or names:
        if name not in names:
            continue
        conns = [c for c in clients.connections.values() if account_of(c) == name]
        if not conns and not opts.include_unused:
            continue
        counts = clients.counts(name)
        slow = sum(
            1 for c in clients.closed_connections if c.account == name and "Slow" in c.reason
        )
        stats.append(
            {
                "acc": name,
                "name": name,
                "conns": len(conns),
                "leafnodes": 0,
                "total_conns": clients.total_connections_of(name),
                "num_subscriptions": sum(len(c.subs) for c in conns),
                # What the account's clients were sent, and what they sent.
                "sent": _traffic(counts, "out"),
                "received": _traffic(counts, "in"),
                "slow_consumers": slow,
            }
        )
    return {
        "server_id": reports.identity.server_id,
        "now": rfc3339(time.time()),
        "account_statz": stats,
    }
