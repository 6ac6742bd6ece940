"""Leases on pipeline jobs, and the fences that stop a stale holder from committing.

Only one agent at a time should run each job of a group. Whoever wants to run `job` takes its
lease in metadata with compare-and-set; the lease expires unless renewed, so a holder that dies
frees it. A holder that only *stalls* (a long GC pause, a partitioned host) may wake up after
another agent took the lease over, still believing it holds it: its metadata commits must then
fail. That is what the fence is for.

Two keys per job:

    {group}/leases/{job}   LeaseRecord (holder, times): rewritten by every renewal
    {group}/fences/{job}   written only when a holder takes the lease, deleted on release

The fencing token is the metadata revision of the transaction that took the lease, which is
the `mod_revision` of the fence key for as long as that holder keeps the lease. Renewals rewrite
only the lease key, so the token a job received at the start stays valid while the lease is
renewed, and changes the moment anyone else takes the lease (or it is released).

A job that holds a lease adds `Fence.compare()` to every metadata transaction it commits; when
the compare fails the job has lost its lease and must stop. `fenced(meta, fence)` does that for
every transaction of a store, so library code (the committer, compaction's index swap) gets
fenced without knowing about leases, and raises `FenceLost` instead of retrying a commit that
can never succeed.

Expiry compares wall clocks of different machines: keep the TTL far above their skew.

An agent that leaves the pool (lame duck mode, a clean stop) tells every lease holder in it
through `LeaseHolders.leave`: each stops the work it holds a lease for and releases the lease,
so another agent takes it over at once instead of after the TTL. The jobs role registers
there; so does anything else that runs under a lease (a mirror's consumer of its origin).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import msgspec

from infinistream.metadata.kv import (
    Compare,
    Delete,
    MetadataStore,
    Op,
    Put,
    StoreWrapper,
    TxnResult,
)

log = logging.getLogger(__name__)

DEFAULT_TTL = 60.0
# How long one holder may take to hand its leases over when the agent leaves.
LEAVE_TIMEOUT = 10.0


class LeaseRecord(msgspec.Struct, kw_only=True):
    holder: str
    job: str
    acquired_ns: int
    renewed_ns: int
    expires_ns: int


_encode = msgspec.msgpack.Encoder().encode
_decode_record = msgspec.msgpack.Decoder(LeaseRecord).decode


def lease_key(group: str, job: str) -> str:
    return f"{group}/leases/{job}"


def fence_key(group: str, job: str) -> str:
    return f"{group}/fences/{job}"


class FenceLost(Exception):
    """The lease this job was fenced by was taken over or released: it must not commit."""


class LeaseLost(FenceLost):
    """A renewal found the lease in someone else's hands (or gone)."""


@dataclass(frozen=True, slots=True)
class Fence:
    """The fencing token of a lease: the fence key and the revision it must still have."""

    key: str
    revision: int

    def compare(self) -> Compare:
        """Add this to a transaction's compares: it then commits only under this lease."""
        return Compare(self.key, self.revision)

    def args(self) -> list[str]:
        """The command-line arguments that hand this fence to a job."""
        return ["--fence-key", self.key, "--fence-revision", str(self.revision)]

    def __str__(self) -> str:
        return f"{self.key}@{self.revision}"


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease held by this process."""

    group: str
    job: str
    holder: str
    # mod_revision of the lease key as this holder last wrote it: renew and release compare it.
    revision: int
    fence: Fence
    expires_ns: int


@dataclass(frozen=True, slots=True)
class LeaseState:
    """A lease as anyone can see it in metadata."""

    record: LeaseRecord
    revision: int
    fence: Fence | None

    def expired(self, now_ns: int | None = None) -> bool:
        return (time.time_ns() if now_ns is None else now_ns) >= self.record.expires_ns


async def read_lease(meta: MetadataStore, group: str, job: str) -> LeaseState | None:
    """Who holds `job`'s lease, until when, and its fence; None if nobody does."""
    lkey, fkey = lease_key(group, job), fence_key(group, job)
    items = await meta.get_many([lkey, fkey])
    item = items.get(lkey)
    if item is None:
        return None
    fence_item = items.get(fkey)
    fence = Fence(fkey, fence_item.mod_revision) if fence_item is not None else None
    return LeaseState(_decode_record(item.value), item.mod_revision, fence)


async def acquire(
    meta: MetadataStore, group: str, job: str, holder: str, ttl: float = DEFAULT_TTL
) -> Lease | None:
    """Take the lease if it is free or expired; None if someone else holds it."""
    lkey, fkey = lease_key(group, job), fence_key(group, job)
    current = await meta.get(lkey)
    now = time.time_ns()
    if current is not None and now < _decode_record(current.value).expires_ns:
        return None
    record = LeaseRecord(
        holder=holder, job=job, acquired_ns=now, renewed_ns=now, expires_ns=now + _ns(ttl)
    )
    # Writing the fence key in the same transaction gives it this transaction's revision: the
    # new token, which also invalidates the token of whoever held the lease before.
    result = await meta.txn(
        [Compare(lkey, current.mod_revision if current is not None else 0)],
        [Put(lkey, _encode(record)), Put(fkey, holder.encode())],
    )
    if not result.succeeded:
        return None  # another contender got there first
    return Lease(
        group, job, holder, result.revision, Fence(fkey, result.revision), record.expires_ns
    )


async def renew(meta: MetadataStore, lease: Lease, ttl: float = DEFAULT_TTL) -> Lease:
    """Extend the lease; raises LeaseLost if it is no longer this holder's."""
    lkey = lease_key(lease.group, lease.job)
    now = time.time_ns()
    current = await meta.get(lkey)
    if current is None or current.mod_revision != lease.revision:
        raise LeaseLost(f"lease {lkey} was taken over or released")
    record = _decode_record(current.value)
    record.renewed_ns = now
    record.expires_ns = now + _ns(ttl)
    result = await meta.txn(
        [Compare(lkey, lease.revision), lease.fence.compare()], [Put(lkey, _encode(record))]
    )
    if not result.succeeded:
        raise LeaseLost(f"lease {lkey} was taken over or released")
    return Lease(
        lease.group, lease.job, lease.holder, result.revision, lease.fence, record.expires_ns
    )


async def release(meta: MetadataStore, lease: Lease) -> bool:
    """Give the lease up (and with it the fence); False if it was not this holder's any more."""
    lkey, fkey = lease_key(lease.group, lease.job), fence_key(lease.group, lease.job)
    result = await meta.txn([Compare(lkey, lease.revision)], [Delete(lkey), Delete(fkey)])
    return result.succeeded


async def check_fence(meta: MetadataStore, fence: Fence) -> None:
    """Raise FenceLost unless the fence still holds."""
    item = await meta.get(fence.key)
    if item is None or item.mod_revision != fence.revision:
        raise FenceLost(
            f"fence {fence} no longer holds: the job's lease was taken over or released"
        )


class FencedMetadataStore(StoreWrapper):
    """A metadata store whose every transaction also compares the fence.

    Reads pass through. A transaction whose compares fail is checked against the fence: if the
    fence is what failed, FenceLost is raised, so callers that retry conflicts (the committer)
    stop at once instead of retrying a commit that can never succeed.
    """

    def __init__(self, inner: MetadataStore, fence: Fence) -> None:
        super().__init__(inner)
        self.fence = fence

    async def txn(
        self, compares: list[Compare], ops: list[Op], *, durable: bool = True
    ) -> TxnResult:
        result = await self.inner.txn([*compares, self.fence.compare()], ops, durable=durable)
        if not result.succeeded:
            await check_fence(self.inner, self.fence)
        return result

    async def forget_deleted(self) -> None:
        await check_fence(self.inner, self.fence)
        await self.inner.forget_deleted()


def fenced(meta: MetadataStore, fence: Fence | None) -> MetadataStore:
    """`meta` with every transaction fenced by `fence` (or `meta` itself when there is none)."""
    return meta if fence is None else FencedMetadataStore(meta, fence)


# A holder's hand-over: stop the work done under its leases and release them.
HandOver = Callable[[], Awaitable[None]]


@dataclass(eq=False)
class LeaseHolders:
    """Whatever in this process holds leases, each with its hand-over, run when the agent
    leaves the pool. Once it is leaving, `leaving` stays True: holders take no new lease."""

    leave_timeout: float = LEAVE_TIMEOUT
    leaving: bool = field(default=False, init=False)
    _holders: dict[str, HandOver] = field(default_factory=dict, init=False)

    def register(self, name: str, hand_over: HandOver) -> Callable[[], None]:
        """Run `hand_over` when the agent leaves; the function returned unregisters it."""
        if name in self._holders:
            raise ValueError(f"lease holder {name!r} is registered already")
        self._holders[name] = hand_over

        def unregister() -> None:
            self._holders.pop(name, None)

        return unregister

    async def leave(self) -> list[str]:
        """Every holder's hand-over, at once (each within `leave_timeout`); the names of
        those that did not finish, whose leases then run out after their TTL."""
        self.leaving = True
        holders = list(self._holders.items())
        self._holders.clear()
        results = await asyncio.gather(
            *(asyncio.wait_for(hand_over(), self.leave_timeout) for _, hand_over in holders),
            return_exceptions=True,
        )
        failed = []
        for (name, _), result in zip(holders, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("handing over the leases of %s failed: %r", name, result)
                failed.append(name)
        return failed


def add_fence_arguments(parser: argparse.ArgumentParser) -> None:
    """`--fence-key KEY --fence-revision N`: how the jobs role hands a job its lease's fence."""
    add = parser.add_argument
    add(
        "--fence-key", dest="fence_key", help="Metadata key fencing this run (set by the jobs role)"
    )
    add(
        "--fence-revision",
        dest="fence_revision",
        type=int,
        help="Revision the fence key must still have for this run's commits to succeed",
    )


def fence_from_args(args: argparse.Namespace) -> Fence | None:
    """The fence given on the command line; ValueError if only half of it is."""
    key = getattr(args, "fence_key", None)
    revision = getattr(args, "fence_revision", None)
    if key is None and revision is None:
        return None
    if key is None or revision is None or revision <= 0:
        raise ValueError("--fence-key and --fence-revision (> 0) go together")
    return Fence(key, revision)


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)
