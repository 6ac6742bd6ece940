"""The pool of agents: who is alive, where, in which zone, doing what (pure types, no I/O).

The lowest layer of all, so any layer may read the live members: the zone cache (storage
owners), the reports (INFO's `connect_urls`, /varz), the roles checks. Registering in metadata
and keeping the view fresh is `server/membership.py`'s job.
"""

from infinistream.pool.members import (
    ROLES,
    LiveMembers,
    Member,
    parse_roles,
)

__all__ = ["ROLES", "LiveMembers", "Member", "parse_roles"]
