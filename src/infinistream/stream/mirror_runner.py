"""Runs every mirror and every stream with sources of one account group: in a pool of agents,
one agent at a time for each stream, the one holding its lease (`OriginLeases`).

Each pass copies what the origins hold beyond what the stream has (stream.mirror,
stream.sources); passes repeat while there is more, then wait for a commit on this agent or
for `poll` seconds (commits on other agents are seen at the next poll). What each stream's
copying last did (its lag, when it was last active, its error) is kept for stream info.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from infinistream.jetstream import errors
from infinistream.jetstream.api import StreamConfig, StreamSource
from infinistream.stream.catalog import Catalog, StreamEntry
from infinistream.stream.mirror import MirrorCopier
from infinistream.stream.origins import source_identity
from infinistream.stream.sources import SourceCopier

log = logging.getLogger(__name__)

POLL = 0.25


class OriginLeases(Protocol):
    """Who runs a stream's copying in the pool."""

    async def hold(self, job: str) -> bool:
        """Take or keep the lease of `job`: True while this agent holds it."""
        ...

    async def release(self, job: str) -> None:
        """Give the lease of `job` up, if held."""
        ...


class LocalLeases:
    """A single agent's leases: it always holds them (an agent with no pool to share with)."""

    async def hold(self, job: str) -> bool:
        return True

    async def release(self, job: str) -> None:
        return None


@dataclass(slots=True)
class OriginStatus:
    """How one mirror or source is doing, as stream info reports it."""

    lag: int = 0
    # When a pass last ran on this agent (ns, 0: never).
    active_ns: int = 0
    error: errors.ApiError | None = None

    def active(self, now_ns: int) -> int:
        """nats-server's `active`: ns since the origin was last heard from (-1: never)."""
        return now_ns - self.active_ns if self.active_ns else -1


def _has_origins(entry: StreamEntry) -> bool:
    return bool(entry.config.mirror or entry.config.sources)


def job_of(stream: str) -> str:
    return f"origins.{stream}"


@dataclass(eq=False)
class MirrorRunner:
    catalog: Catalog
    mirrors: MirrorCopier
    sources: SourceCopier
    leases: OriginLeases
    poll: float = POLL
    # By stream, then by origin (a mirror's: "", a source's: its identity).
    status: dict[str, dict[str, OriginStatus]] = field(default_factory=dict, init=False)
    _held: set[str] = field(default_factory=set, init=False)
    _wake: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    def committed(self, streams: list[str]) -> None:
        """Commits on this agent: an origin may have more to copy. With no stream that has
        one (nor leases to let go), a pass has nothing to do: a publisher's every commit
        would wake it for nothing."""
        if self._held or self.catalog.selected("origins", _has_origins):
            self._wake.set()

    def wake(self) -> None:
        """A message of an origin on an upstream arrived."""
        self._wake.set()

    async def run(self) -> None:
        try:
            while True:
                try:
                    busy = await self.run_once()
                except Exception:
                    # Metadata unreachable for a moment (a lease not renewed): try again at
                    # the next poll; an expired lease is taken over meanwhile.
                    log.exception("copying mirrors and sources failed")
                    busy = False
                if not busy:
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), self.poll)
        finally:
            if self.mirrors.feeds is not None:
                await self.mirrors.feeds.close()
            for name in list(self._held):
                with contextlib.suppress(Exception):
                    await self.leases.release(job_of(name))

    async def run_once(self) -> bool:
        """One pass over every stream with origins; whether any copied something. The
        catalog is the tenant's, which keeps it current (a stream created, updated or deleted
        on any agent is seen within its poll)."""
        entries = self.catalog.selected("origins", _has_origins)
        names = {e.name for e in entries}
        for gone in self._held - names:
            self._held.discard(gone)
            self.status.pop(gone, None)
            self.sources.forget(gone)
            if self.mirrors.feeds is not None:
                await self.mirrors.feeds.stop_stream(gone)
            await self.leases.release(job_of(gone))
        busy = False
        for entry in entries:
            busy |= await self._pass(entry)
        return busy

    async def _pass(self, entry: StreamEntry) -> bool:
        name = entry.name
        if not await self.leases.hold(job_of(name)):
            if name in self._held:
                self._held.discard(name)
                self.sources.forget(name)
                if self.mirrors.feeds is not None:
                    await self.mirrors.feeds.stop_stream(name)
            return False
        self._held.add(name)
        statuses = self.status.setdefault(name, {})
        mirror = entry.config.mirror
        try:
            if mirror is not None:
                copied = {"": await self.mirrors.copy(name, mirror)}
            else:
                copied = await self.sources.copy(name, list(entry.config.sources or ()))
        except errors.ApiError as exc:
            for status in statuses.values():
                status.error = exc
            return False
        except Exception:
            log.exception("copying into stream %s failed", name)
            self.sources.forget(name)
            return False
        now = time.time_ns()
        for key, done in copied.items():
            status = statuses.setdefault(key, OriginStatus())
            status.lag, status.active_ns, status.error = done.lag, now, None
        self._missing(entry, statuses)
        return any(done.copied for done in copied.values())

    def _missing(self, entry: StreamEntry, statuses: dict[str, OriginStatus]) -> None:
        """Origins that are not there: their error, as nats-server reports a mirror or source
        it cannot set up."""
        cfg = entry.config
        pairs = [("", cfg.mirror)] if cfg.mirror is not None else []
        pairs += [(source_identity(s), s) for s in cfg.sources or ()]
        for key, src in pairs:
            if src.external is None and src.name not in self.catalog.streams:
                status = statuses.setdefault(key, OriginStatus())
                status.error = errors.stream_not_found()


def _origin_wire(src: StreamSource, lag: int | None, status: OriginStatus | None) -> dict[str, Any]:
    """One StreamSourceInfo as nats-server renders it. `lag` is what the streams show now
    (None: not known here), else the last pass's."""
    out: dict[str, Any] = {"name": src.name}
    if src.external is not None:
        out["external"] = msgspec.to_builtins(src.external)
    now = time.time_ns()
    if lag is None:
        lag = status.lag if status is not None else 0
    out["lag"] = lag
    out["active"] = status.active(now) if status is not None else -1
    if src.filter_subject:
        out["filter_subject"] = src.filter_subject
    if src.subject_transforms:
        out["subject_transforms"] = msgspec.to_builtins(src.subject_transforms)
    if status is not None and status.error is not None:
        err = status.error
        out["error"] = {"code": err.code, "err_code": err.err_code, "description": err.description}
    return out


async def _local_last(catalog: Catalog, src: StreamSource) -> int | None:
    """The last sequence of an origin in this group (None: on an upstream, or not there)."""
    if src.external is not None:
        return None
    view = await catalog.view(src.name)
    return view.last_seq if view is not None else None


async def origin_info(
    catalog: Catalog, runner: MirrorRunner | None, cfg: StreamConfig, last_seq: int
) -> dict[str, Any]:
    """Stream info's `mirror` and `sources`: the lag the streams show now where the origin is
    in this group (a source's needs this agent to be copying it), else what this agent's
    last pass saw."""
    statuses = runner.status.get(cfg.name, {}) if runner is not None else {}
    out: dict[str, Any] = {}
    if cfg.mirror is not None:
        origin_last = await _local_last(catalog, cfg.mirror)
        lag = None if origin_last is None else max(0, origin_last - last_seq)
        out["mirror"] = _origin_wire(cfg.mirror, lag, statuses.get(""))
    sources = []
    for src in cfg.sources or ():
        identity = source_identity(src)
        origin_last = await _local_last(catalog, src)
        copied = runner.sources.copied(cfg.name, identity) if runner is not None else None
        lag = None
        if origin_last is not None and copied is not None:
            lag = max(0, origin_last - copied)
        sources.append(_origin_wire(src, lag, statuses.get(identity)))
    if sources:
        out["sources"] = sources
    return out
