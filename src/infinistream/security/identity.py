"""What a connection is once its CONNECT is accepted: its account, its user, its permissions.

The routing layer reads `ClientConnection.identity` to know which account (virtual group) a
client's subjects belong to. Without configured accounts every client is in nats-server's
global account, `$G`.
"""

from __future__ import annotations

from dataclasses import dataclass

# nats-server's names: the account of clients when no accounts are configured, and the
# system account's default name.
GLOBAL_ACCOUNT = "$G"
SYSTEM_ACCOUNT = "$SYS"


@dataclass(frozen=True, slots=True)
class SubjectPermission:
    """One direction's allow and deny lists; `allow` None means everything not denied."""

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ResponsePermission:
    """`allow_responses`: a client may publish to the reply subjects of requests it received,
    up to `max_msgs` replies each (negative: no limit) within `expires` seconds (<= 0: none)."""

    max_msgs: int = 1
    expires: float = 0.0


@dataclass(frozen=True, slots=True)
class Permissions:
    publish: SubjectPermission | None = None
    subscribe: SubjectPermission | None = None
    responses: ResponsePermission | None = None


@dataclass(frozen=True, slots=True)
class Identity:
    account: str
    user: str | None = None
    permissions: Permissions | None = None


ANONYMOUS = Identity(GLOBAL_ACCOUNT)
