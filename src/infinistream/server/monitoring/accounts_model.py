"""The accounts monitoring speaks of. The agent has one account for clients (nats-server's
global account `$G`, as a server with no accounts configured) and the system account `$SYS`
nats-server always has; per-account figures are the global account's.
"""

from __future__ import annotations

GLOBAL_ACCOUNT = "$G"
SYSTEM_ACCOUNT = "$SYS"
ACCOUNTS = (SYSTEM_ACCOUNT, GLOBAL_ACCOUNT)
