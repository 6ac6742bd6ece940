"""The accounts monitoring speaks of: the configured accounts (security/config.py), the system
account, and nats-server's global account `$G` (every client's when no accounts are
configured), as nats-server lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

from infinistream.security.identity import GLOBAL_ACCOUNT, SYSTEM_ACCOUNT
from infinistream.server.clients import Clients
from infinistream.server.connection import ClientConnection
from infinistream.server.info import Identity
from infinistream.server.tenants import jetstream_accounts
from infinistream.settings import Settings

__all__ = [
    "GLOBAL_ACCOUNT",
    "SYSTEM_ACCOUNT",
    "ClientsEndpoint",
    "account_names",
    "account_of",
    "jetstream_enabled",
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
    """Whether the account may use JetStream, as the agent serves it (tenants.py)."""
    spec = jetstream_accounts(settings.auth).get(account)
    return spec is not None and spec.jetstream


def account_of(conn: ClientConnection) -> str:
    """The account of a connection (`$G` until its CONNECT names another)."""
    return conn.identity.account if conn.identity is not None else GLOBAL_ACCOUNT


@dataclass(eq=False)
class ClientsEndpoint:
    """What the endpoints on connections and accounts read (/connz, /subsz, /accountz,
    /accstatz): this agent, its configured accounts (in `settings`), and its clients."""

    identity: Identity
    settings: Settings
    clients: Clients
