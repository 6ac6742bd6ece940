"""/subsz: the subscription index's statistics and, with `subs`, its subscriptions.

Options as nats-server's: `subs`, `offset`/`limit`, `test` (only the subscriptions a literal
subject would reach), `acc`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import msgspec

from infinistream.jetstream.subjects import is_literal, is_valid_subject, matches
from infinistream.server.connection import ClientConnection
from infinistream.server.monitoring import query
from infinistream.server.monitoring.accounts_model import ClientsEndpoint, account_names, account_of
from infinistream.server.monitoring.timefmt import rfc3339

DEFAULT_LIMIT = 1024


class SubszOptions(msgspec.Struct):
    """nats-server's SubszOptions, with its JSON names (the $SYS request body)."""

    offset: int = 0
    limit: int = 0
    subscriptions: bool = False
    account: str = ""
    test: str = ""


def options_from_query(q: Mapping[str, str]) -> SubszOptions:
    return SubszOptions(
        subscriptions=query.boolean(q, "subs"),
        offset=query.integer(q, "offset"),
        limit=query.integer(q, "limit"),
        test=query.text(q, "test"),
        account=query.text(q, "acc"),
    )


class Subsz(ClientsEndpoint):
    def answer(self, opts: SubszOptions) -> dict[str, Any]:
        offset = max(opts.offset, 0)
        limit = opts.limit if opts.limit > 0 else DEFAULT_LIMIT
        if opts.test and not (is_valid_subject(opts.test) and is_literal(opts.test)):
            raise query.BadOption(
                f"invalid test subject, must be valid publish subject: {opts.test}"
            )
        # Each account has a subscription index of its own: together, the server's statistics.
        stats: dict[str, Any] = self.clients.sublist_stats()
        conns = [
            c
            for c in self.clients.connections.values()
            if not opts.account or account_of(c) == opts.account
        ]
        if opts.account in account_names(self.settings):
            stats["num_subscriptions"] = sum(len(c.subs) for c in conns)
        elif opts.account:
            stats = dict.fromkeys(stats, 0)  # an account nats-server does not know: nothing
        out: dict[str, Any] = {
            "server_id": self.identity.server_id,
            "now": rfc3339(time.time()),
            **stats,
            "total": 0,
            "offset": offset,
            "limit": limit,
        }
        if opts.subscriptions:
            details = _subscriptions(conns, opts.test)
            start, end = query.page(len(details), offset, limit)
            out["total"] = len(details)
            if end > start:  # nats-server's omitempty leaves an empty list out
                out["subscriptions_list"] = details[start:end]
        return out


def _subscriptions(conns: list[ClientConnection], test: str) -> list[dict[str, Any]]:
    """The subscriptions of `conns` (those `test` would reach, when given)."""
    details = []
    for conn in conns:
        account = account_of(conn)
        for sub in conn.subs.values():
            if test and not matches(sub.subject, test):
                continue
            d: dict[str, Any] = {"account": account, "account_tag": account, "subject": sub.subject}
            if sub.queue:
                d["qgroup"] = sub.queue
            d.update(sid=sub.sid, msgs=sub.delivered, cid=conn.client_id)
            if sub.max_msgs:
                d["max"] = sub.max_msgs
            details.append(d)
    return details
