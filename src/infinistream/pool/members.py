"""A member of the pool, and the view of the live members every part of an agent reads.

A member is one agent process as it registers itself in metadata (server/membership.py):
its id (the INFO `server_id`), the address clients connect to, its zone, its roles, the
software version, and the address of its zone-cache endpoint when it serves one.

`LiveMembers` is the agent's current picture of the pool, replaced wholesale by the
membership loop after every read of metadata; readers never block and never see a half-updated
list. It includes this agent itself as soon as it has registered.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

# What an agent may do; by default all of it (`--roles publish,fetch,jobs,cache`).
#   publish  accept publishes to stream subjects (and the stream write API's direct writes)
#   fetch    serve consumers: pull requests, consumer creation, push delivery
#   jobs     take part in the pipeline jobs' leases (which jobs: `--jobs`)
#   cache    own a share of the zone's object cache and serve it to the zone's agents
PUBLISH = "publish"
FETCH = "fetch"
JOBS = "jobs"
CACHE = "cache"
ROLES: tuple[str, ...] = (PUBLISH, FETCH, JOBS, CACHE)


def parse_roles(text: str) -> tuple[str, ...]:
    """`"publish,fetch"` -> the roles in canonical order; ValueError for unknown or none."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError(f"no roles given (known: {','.join(ROLES)})")
    if "all" in names:
        return ROLES
    unknown = [n for n in names if n not in ROLES]
    if unknown:
        raise ValueError(f"unknown role {unknown[0]!r} (known: {','.join(ROLES)})")
    return tuple(role for role in ROLES if role in names)


class Member(msgspec.Struct, frozen=True, kw_only=True):
    """One agent of the pool, as it registered itself."""

    # The agent's INFO server_id: unique per process start.
    id: str
    # The agent's server_name (a host may run several agents under one name).
    name: str
    # host:port clients connect to (the advertised client address).
    address: str
    # "" when no zone is set: then every agent is in the one zone "".
    zone: str = ""
    roles: tuple[str, ...] = ROLES
    # The software version (rolling upgrades show as members of two versions).
    version: str = ""
    # host:port of the agent's zone-cache endpoint, when it serves one (the cache role).
    cache_address: str | None = None
    # host:port of the HTTP monitoring endpoint, when it listens on one.
    monitor_address: str | None = None
    # When the process started (Unix ns).
    started_ns: int = 0

    def has_role(self, role: str) -> bool:
        return role in self.roles


class LiveMembers:
    """The live members of this agent's pool, as last read from metadata."""

    def __init__(self, self_id: str, zone: str) -> None:
        self.self_id = self_id
        self.zone = zone
        self._members: tuple[Member, ...] = ()
        # Bumped whenever the set of live members (or any member's record) changes: a reader
        # that caches something derived from the view (an owner table) compares it.
        self.generation = 0

    @property
    def members(self) -> tuple[Member, ...]:
        """Every live member, sorted by id."""
        return self._members

    def update(self, members: Iterable[Member]) -> bool:
        """Replace the view; True if anything changed."""
        new = tuple(sorted(members, key=lambda m: m.id))
        if new == self._members:
            return False
        self._members = new
        self.generation += 1
        return True

    def get(self, member_id: str) -> Member | None:
        for member in self._members:
            if member.id == member_id:
                return member
        return None

    @property
    def me(self) -> Member | None:
        return self.get(self.self_id)

    def with_role(self, role: str, zone: str | None = None) -> list[Member]:
        """Live members with `role`, of `zone` when given (None: every zone), sorted by id."""
        return [m for m in self._members if m.has_role(role) and (zone is None or m.zone == zone)]

    def zones(self) -> list[str]:
        return sorted({m.zone for m in self._members})

    def client_urls(self) -> list[str]:
        """The client addresses of the live members: this agent's zone first, then the rest.

        Each address once (the workers of one agent share theirs), in id order within a zone,
        as INFO's `connect_urls` lists them for clients to fail over to.
        """
        ordered = sorted(self._members, key=lambda m: (m.zone != self.zone, m.id))
        seen: dict[str, None] = {}
        for member in ordered:
            seen.setdefault(member.address, None)
        return list(seen)
