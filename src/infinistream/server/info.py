"""Who this agent is, and the INFO it greets every client with.

Every figure is read from the part that owns it when asked; nothing here counts on its own.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field
from typing import Any

from infinistream import __version__
from infinistream.jetstream.api import NATS_COMPAT_VERSION
from infinistream.pool import LiveMembers
from infinistream.settings import Settings


@dataclass
class Identity:
    """Who this agent is, and where it listens (known once it is listening)."""

    server_id: str = field(default_factory=lambda: "N" + os.urandom(27).hex().upper()[:55])
    started: float = field(default_factory=time.time)
    port: int = 0
    http_port: int = 0

    @property
    def agent_id(self) -> str:
        """The short id object names carry."""
        return self.server_id[-8:]


# What /varz and STATSZ call the agent's software (nats-server's Go version).
GO = f"infinistream {__version__} (python {platform.python_version()})"


@dataclass(eq=False)
class Greeting:
    """The INFO a client is sent on connecting, and again when the pool changes."""

    settings: Settings
    identity: Identity
    pool: LiveMembers
    # Lame duck mode: INFO says `ldm`, and lists only the other agents (nats-server's
    # sendLDMToClients), so that clients reconnect to them.
    lame_duck: bool = False

    def info(self, client_id: int) -> dict[str, Any]:
        s = self.settings
        info: dict[str, Any] = {
            "server_id": self.identity.server_id,
            "server_name": s.server_name,
            "version": NATS_COMPAT_VERSION,
            "proto": 1,
            "go": GO,
            "host": s.host,
            "port": self.identity.port,
            "headers": True,
            "max_payload": s.max_payload,
            "jetstream": True,
            "client_id": client_id,
        }
        if s.jetstream_domain:
            info["domain"] = s.jetstream_domain
        # The pool's live agents, this zone first: clients fail over to them (nats-py and
        # nats.js add them to their server lists, as with a nats-server cluster). Until this
        # agent has registered, only itself.
        info["connect_urls"] = self.pool.client_urls() or [
            s.client_advertise or f"{advertised(s.host)}:{self.identity.port}"
        ]
        if self.lame_duck:
            own = s.client_advertise or f"{advertised(s.host)}:{self.identity.port}"
            info["connect_urls"] = [url for url in self.pool.client_urls() if url != own]
            info["ldm"] = True
        # auth_required (and the nkey nonce) are the connection's to add: they follow the
        # authenticator, which a reload changes.
        return info


def advertised(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else host
