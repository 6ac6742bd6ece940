"""Accounts as JetStream sees them: their names, their limits, and the virtual group each one
is stored under.

Every account is a virtual group in the same metadata store and bucket: its streams,
consumers and objects all live under its group's keys, so accounts share nothing but the
store. The global account (`$G`, the one clients land in when no accounts are configured)
keeps the agent's configured group, so data written before accounts were configured stays
where it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from infinistream.security.config import JetStreamLimits
from infinistream.security.identity import GLOBAL_ACCOUNT

__all__ = ["GLOBAL_ACCOUNT", "AccountPolicy", "account_group", "limits_to_wire"]

# Between the agent's group and an account's name; `quote` escapes it inside names, so no
# two accounts share a group.
_SEPARATOR = "@"


def account_group(base: str, account: str) -> str:
    """The virtual group of `account`, for an agent configured with group `base`.

    An account's name may hold any character, a group's may not hold `/` (keys and object
    paths are built with it): everything but letters, digits, `_`, `-` and `.` is
    percent-escaped, which keeps the mapping one-to-one.
    """
    if account == GLOBAL_ACCOUNT:
        return base
    return f"{base}{_SEPARATOR}{quote(account, safe='_-.')}"


@dataclass(eq=False)
class AccountPolicy:
    """An account's limits as the config says now: one object shared by everything that holds
    the account to them, so that a reload of the config changes them in one place."""

    limits: JetStreamLimits = field(default_factory=JetStreamLimits)


def limits_to_wire(limits: JetStreamLimits) -> dict[str, Any]:
    """The `limits` object of account info, in nats-server's shape."""
    return {
        "max_memory": limits.max_mem,
        "max_storage": limits.max_file,
        "max_streams": limits.max_streams,
        "max_consumers": limits.max_consumers,
        "max_ack_pending": limits.max_ack_pending,
        "memory_max_stream_bytes": -1,
        "storage_max_stream_bytes": -1,
        "max_bytes_required": limits.max_bytes_required,
    }
