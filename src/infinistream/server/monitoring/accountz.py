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
    ClientsEndpoint,
    account_names,
    account_of,
    jetstream_enabled,
    system_account,
)
from infinistream.server.monitoring.timefmt import rfc3339


class AccountzOptions(msgspec.Struct):
    account: str = ""


class AccountStatzOptions(msgspec.Struct):
    accounts: list[str] = msgspec.field(default_factory=list)
    include_unused: bool = False


def accountz_options_from_query(q: Mapping[str, str]) -> AccountzOptions:
    return AccountzOptions(account=query.text(q, "acc"))


def accstatz_options_from_query(q: Mapping[str, str]) -> AccountStatzOptions:
    return AccountStatzOptions(include_unused=query.boolean(q, "unused"))


class Accountz(ClientsEndpoint):
    def answer(self, opts: AccountzOptions) -> dict[str, Any]:
        settings = self.settings
        names = account_names(settings)
        out: dict[str, Any] = {
            "server_id": self.identity.server_id,
            "now": rfc3339(time.time()),
            "system_account": system_account(settings),
        }
        if not opts.account:
            out["accounts"] = names
            return out
        if opts.account not in names:
            raise query.BadOption(f"Account {opts.account} does not exist")
        conns = [c for c in self.clients.connections.values() if account_of(c) == opts.account]
        subscriptions = sum(len(c.subs) for c in conns)
        # Each account has a subscription index of its own: its statistics.
        sublist_stats: dict[str, Any] = self.clients.sublist_stats(opts.account)
        sublist_stats["num_subscriptions"] = subscriptions
        out["account_detail"] = {
            "account_name": opts.account,
            "update_time": rfc3339(self.identity.started),
            "expired": False,
            "complete": True,
            "jetstream_enabled": jetstream_enabled(settings, opts.account),
            "leafnode_connections": 0,
            "client_connections": len(conns),
            "subscriptions": subscriptions,
            "name_tag": opts.account,
            "sublist_stats": sublist_stats,
        }
        return out


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


class Accstatz(ClientsEndpoint):
    def answer(self, opts: AccountStatzOptions) -> dict[str, Any]:
        clients = self.clients
        names = account_names(self.settings)
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
            "server_id": self.identity.server_id,
            "now": rfc3339(time.time()),
            "account_statz": stats,
        }
