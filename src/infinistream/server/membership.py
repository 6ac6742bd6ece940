"""Membership: this agent registers in metadata with a lease, renews it, and reads who is live.

    {group}/members/{server_id}   MemberRecord: the Member, when it was last renewed, its TTL

Every `ttl / 3` the agent rewrites its own record (a soft-state write: `durable=False`, losing it
costs one renewal) and reads every record of its group. A member is live while its record keeps
being renewed: the reader judges that by *its own* monotonic clock (the record's mod_revision
must have moved within one TTL), so clocks of different hosts never have to agree; a record seen
for the first time counts as live when its wall-clock expiry is still ahead. A killed agent
therefore drops out of every view within one TTL plus one read interval (about 4 s by default).
An agent that stops cleanly, or enters lame duck mode, deletes its record at once and renews
it no more: the other agents drop it from their views (their clients' `connect_urls`, the
zone cache's owners) at their next read, while it still serves the clients it has. Records
dead for a long time (another agent's crash) are deleted by whoever notices, with a compare on
their revision so a renewal that races the deletion wins.

The view (`pool.LiveMembers`) is replaced wholesale after each read; INFO's `connect_urls`,
/varz, the roles and the zone cache read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from infinistream.metadata.kv import Compare, Delete, MetadataStore, Put
from infinistream.pool import LiveMembers, Member

log = logging.getLogger(__name__)

DEFAULT_TTL = 3.0
# A record not renewed for this many TTLs is deleted by whoever reads it.
FORGET_AFTER_TTLS = 20


class MemberRecord(msgspec.Struct, kw_only=True):
    member: Member
    renewed_ns: int
    ttl_ns: int


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(MemberRecord).decode


def members_prefix(group: str) -> str:
    return f"{group}/members/"


def member_key(group: str, member_id: str) -> str:
    return f"{members_prefix(group)}{member_id}"


@dataclass
class _Seen:
    """A record as this reader last saw it: the revision, and when (monotonic) it last moved."""

    revision: int
    moved: float


@dataclass(eq=False)
class Membership:
    """Keeps this agent registered and `view` up to date while `run` runs."""

    meta: MetadataStore
    group: str
    view: LiveMembers
    # This agent as it registers: called at each renewal, since its addresses are known only
    # once it listens (and a zone-cache endpoint may come later).
    local: Callable[[], Member]
    ttl: float = DEFAULT_TTL
    # Called (no arguments) when the set of live members changed: the clients are told (INFO).
    on_change: Callable[[], None] | None = None
    reads: int = field(default=0, init=False)
    renewals: int = field(default=0, init=False)
    _seen: dict[str, _Seen] = field(default_factory=dict, init=False)
    _registered: bool = field(default=False, init=False)
    _left: bool = field(default=False, init=False)

    @property
    def interval(self) -> float:
        return self.ttl / 3

    async def run(self) -> None:
        """Renew and read every interval (the agent joins, renews and reads once, first);
        once it has left, only read."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                if not self._left:
                    await self.renew()
                await self.refresh()
            except Exception:
                log.exception("membership: renewing or reading the pool failed")

    async def renew(self) -> None:
        me = self.local()
        record = MemberRecord(member=me, renewed_ns=time.time_ns(), ttl_ns=int(self.ttl * 1e9))
        # Only this agent writes its own key; a concurrent forget compares the old revision
        # and so loses to this write.
        await self.meta.txn(
            [], [Put(member_key(self.group, me.id), _encode(record))], durable=False
        )
        self._registered = True
        self.renewals += 1

    async def refresh(self) -> bool:
        """Read the group's records into the view; True if the live set changed."""
        items = await self.meta.range(members_prefix(self.group))
        self.reads += 1
        now = time.monotonic()
        wall = time.time_ns()
        live: list[Member] = []
        present: set[str] = set()
        stale: list[tuple[str, int]] = []
        for item in items:
            present.add(item.key)
            try:
                record = _decode(item.value)
            except msgspec.DecodeError:
                log.warning("membership: undecodable record %s ignored", item.key)
                continue
            seen = self._seen.get(item.key)
            if seen is None:
                # First sight: trust the writer's clock once (how long ago it renewed), then
                # only our own.
                since = max(0.0, (wall - record.renewed_ns) / 1e9)
                seen = self._seen[item.key] = _Seen(item.mod_revision, now - since)
            elif seen.revision != item.mod_revision:
                seen.revision, seen.moved = item.mod_revision, now
            age = now - seen.moved
            if record.member.id == self.view.self_id and self._left:
                continue  # a renewal that raced the deletion: gone from this view all the same
            if record.member.id == self.view.self_id or age < record.ttl_ns / 1e9:
                live.append(record.member)
            elif age > FORGET_AFTER_TTLS * record.ttl_ns / 1e9:
                stale.append((item.key, item.mod_revision))
        for key in list(self._seen):
            if key not in present:
                del self._seen[key]
        for key, revision in stale:
            with contextlib.suppress(Exception):
                await self.meta.txn([Compare(key, revision)], [Delete(key)], durable=False)
        changed = self.view.update(live)
        if changed and self.on_change is not None:
            self.on_change()
        return changed

    async def leave(self) -> None:
        """Delete this agent's record and renew it no more (a clean stop, lame duck mode):
        the others drop it at their next read, and this agent's view leaves it out. Its
        clients are not told here: they are being closed, or told by lame duck mode's INFO."""
        self._left = True
        me = self.view.self_id
        self.view.update(m for m in self.view.members if m.id != me)
        if not self._registered:
            return
        with contextlib.suppress(Exception):
            await self.meta.txn([], [Delete(member_key(self.group, me))])
