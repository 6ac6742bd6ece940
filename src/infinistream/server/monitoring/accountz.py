"""/accountz and /accstatz: the accounts, and per account its connections and traffic.

The agent's clients are all in the global account `$G` (accounts_model); `$SYS` is listed as
nats-server lists its system account, with no clients of its own.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import msgspec

from infinistream.server.monitoring import query
from infinistream.server.monitoring.accounts_model import ACCOUNTS, GLOBAL_ACCOUNT, SYSTEM_ACCOUNT
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
    out: dict[str, Any] = {
        "server_id": reports.identity.server_id,
        "now": rfc3339(time.time()),
        "system_account": SYSTEM_ACCOUNT,
    }
    if not opts.account:
        out["accounts"] = list(ACCOUNTS)
        return out
    if opts.account not in ACCOUNTS:
        raise query.BadOption(f"Account {opts.account} does not exist")
    clients = reports.clients
    mine = opts.account == GLOBAL_ACCOUNT
    stats = clients.subscriptions.stats() if mine else None
    detail: dict[str, Any] = {
        "account_name": opts.account,
        "update_time": rfc3339(reports.identity.started),
        "expired": False,
        "complete": True,
        "jetstream_enabled": mine,
        "leafnode_connections": 0,
        "client_connections": len(clients.connections) if mine else 0,
        "subscriptions": len(clients.subscriptions) if mine else 0,
        "name_tag": opts.account,
    }
    if stats is not None:
        detail["sublist_stats"] = stats
    out["account_detail"] = detail
    return out


def _traffic(msgs: int, nbytes: int) -> dict[str, Any]:
    none = {"msgs": 0, "bytes": 0}
    return {"msgs": msgs, "bytes": nbytes, "gateways": none, "routes": none, "leafs": dict(none)}


def accstatz(reports: Reports, opts: AccountStatzOptions) -> dict[str, Any]:
    clients = reports.clients
    counts = clients.counts()
    stats = []
    for name in opts.accounts or ACCOUNTS:
        if name not in ACCOUNTS:
            continue
        mine = name == GLOBAL_ACCOUNT
        conns = len(clients.connections) if mine else 0
        if not conns and not opts.include_unused:
            continue
        stats.append(
            {
                "acc": name,
                "name": name,
                "conns": conns,
                "leafnodes": 0,
                "total_conns": conns,
                "num_subscriptions": len(clients.subscriptions) if mine else 0,
                "sent": _traffic(counts["out_msgs"], counts["out_bytes"])
                if mine
                else _traffic(0, 0),
                "received": _traffic(counts["in_msgs"], counts["in_bytes"])
                if mine
                else _traffic(0, 0),
                "slow_consumers": clients.slow_consumers if mine else 0,
            }
        )
    return {
        "server_id": reports.identity.server_id,
        "now": rfc3339(time.time()),
        "account_statz": stats,
    }
