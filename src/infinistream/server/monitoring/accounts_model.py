"""The accounts monitoring speaks of: the configured accounts (security/config.py), the system
account, and nats-server's global account `$G` (every client's when no accounts are
configured), as nats-server lists them.
"""

from __future__ import annotations

from infinistream.security.identity import GLOBAL_ACCOUNT, SYSTEM_ACCOUNT
from infinistream.server.connection import ClientConnection
from infinistream.settings import Settings

__all__ = [
    "GLOBAL_ACCOUNT",
    "SYSTEM_ACCOUNT",
    "account_names",
    "account_of",
    "jetstream_enabled",
    "streams_account",
    "system_account",
]


def system_account(settings: Settings) -> str:
    return settings.auth.system_account


def account_names(settings: Settings) -> list[str]:
    """The system account, the configured ones, then `$G`."""
    auth = settings.auth
    names = [auth.system_account]
    names += [a.name for a in auth.accounts if a.name not in names]
    if GLOBAL_ACCOUNT not in names:
        names.append(GLOBAL_ACCOUNT)
    return names


def jetstream_enabled(settings: Settings, account: str) -> bool:
    """Whether the account may use JetStream: `$G` unless accounts are configured (as
    nats-server), a configured account when it says so."""
    auth = settings.auth
    if account == auth.system_account:
        return False
    for spec in auth.accounts:
        if spec.name == account:
            return spec.jetstream
    return account == GLOBAL_ACCOUNT and not auth.accounts


def account_of(conn: ClientConnection) -> str:
    """The account of a connection (`$G` until its CONNECT names another)."""
    return conn.identity.account if conn.identity is not None else GLOBAL_ACCOUNT


def streams_account(settings: Settings) -> str:
    """The account the group's streams are reported under: the first configured account with
    JetStream, else `$G`. (Every account shares the agent's group until accounts have groups
    of their own.)"""
    for spec in settings.auth.accounts:
        if spec.jetstream and spec.name != settings.auth.system_account:
            return spec.name
    return GLOBAL_ACCOUNT
