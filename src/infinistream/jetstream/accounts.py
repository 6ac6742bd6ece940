"""Accounts as JetStream sees them: their names, their limits, and the virtual group each one
is stored under.

Every account is a virtual group in the same metadata store and bucket: its streams,
consumers and objects all live under its group's keys, so accounts share nothing but the
store. The global account (`$G`, the one clients land in when no accounts are configured)
keeps the agent's configured group, so data written before accounts were configured stays
where it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

__all__ = ["GLOBAL_ACCOUNT", "SYSTEM_ACCOUNT", "AccountLimits", "account_group"]

# nats-server's names for the account of clients when none is configured, and its system
# account when `system_account` does not name one.
GLOBAL_ACCOUNT = "$G"
SYSTEM_ACCOUNT = "$SYS"
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


@dataclass(frozen=True, slots=True)
class AccountLimits:
    """An account's JetStream limits, as nats-server's `jetstream: {...}` block of an account
    sets them; -1 is unlimited."""

    max_memory: int = -1
    max_storage: int = -1
    max_streams: int = -1
    max_consumers: int = -1
    max_ack_pending: int = -1
    max_bytes_required: bool = False

    def to_wire(self) -> dict[str, Any]:
        """The `limits` object of account info, in nats-server's shape."""
        return {
            "max_memory": self.max_memory,
            "max_storage": self.max_storage,
            "max_streams": self.max_streams,
            "max_consumers": self.max_consumers,
            "max_ack_pending": self.max_ack_pending,
            "memory_max_stream_bytes": -1,
            "storage_max_stream_bytes": -1,
            "max_bytes_required": self.max_bytes_required,
        }
