"""The consumers half of the JetStream API: create, info, names, list, delete and pause (the
subjects are handlers/router.py's; MSG.NEXT is the consumer service's)."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from infinistream.consumer.config import (
    ConsumerConfig,
    check_update,
    check_workqueue_overlap,
    consumer_config_to_wire,
    normalize,
    pause_ns,
    refuse_unsupported,
    same_config,
    stamp_required_level,
)
from infinistream.consumer.directory import target_ops
from infinistream.consumer.priority import live_pin
from infinistream.consumer.progress import (
    Filter,
    copy_state,
    expire_pending,
    num_ack_pending,
    num_pending,
    num_redelivered,
    prune,
    starting_point,
)
from infinistream.consumer.pull import PullService
from infinistream.consumer.records import (
    ConsumerRecord,
    ConsumerState,
    encode,
)
from infinistream.consumer.requests import (
    ConsumerPauseRequest,
    ConsumerUnpinRequest,
    decode_create_request,
    read_lenient,
    utc_time,
    valid_group_name,
)
from infinistream.consumer.reset import decode_reset_request, reset_sequence, reset_state
from infinistream.consumer.service import ConsumerService
from infinistream.consumer.store import ConsumerGone, ConsumerStore, LoadedConsumer
from infinistream.handlers.account_limits import check_consumer_count
from infinistream.jetstream import errors
from infinistream.jetstream.accounts import AccountPolicy
from infinistream.jetstream.api import (
    LIST_LIMIT,
    NAMES_LIMIT,
    TYPE_PREFIX,
    PagedRequest,
    decode_if_object,
    is_empty_request,
    page_of,
)
from infinistream.jetstream.times import ZERO_TIME, go_time, go_time_or_zero, parse_go_time
from infinistream.jetstream.versioning import as_answered, without_server_keys
from infinistream.metadata.kv import Compare, MetadataStore, Put
from infinistream.stream.catalog import Catalog, StreamEntry
from infinistream.stream.view import StreamView, seq_from_time


def _as_reported(loaded: LoadedConsumer, view: StreamView | None) -> tuple[ConsumerState, int]:
    """The consumer's state as info reports it, and its pending count."""
    state, cfg = loaded.state, loaded.record.config
    if view is None:
        return state, 0
    if any(not view.is_live(seq) for seq in state.pending):
        # Pending messages gone from the stream leave pending at the next claim; nats-server
        # drops them at once (decStreamPending), so report the state as it will be.
        state = copy_state(state)
        prune(state, cfg, view)
    return state, num_pending(state, Filter(cfg), view)


@dataclass(eq=False)
class ConsumerApi:
    """`$JS.API.CONSUMER.*` requests, answered from the consumer store and the service that
    serves consumers on this agent."""

    meta: MetadataStore
    catalog: Catalog
    consumers: ConsumerService
    # The account's limits: its consumer count and max_ack_pending (none by default).
    policy: AccountPolicy = field(default_factory=AccountPolicy)

    @property
    def store(self) -> ConsumerStore:
        return self.consumers.store

    @property
    def pulls(self) -> PullService:
        return self.consumers.pulls

    async def count_all(self) -> int:
        """How many consumers the account has, over all its streams."""
        total = 0
        for name in list(self.catalog.streams):
            total += await self.consumers.count(name)
        return total

    async def _stream(self, stream: str) -> StreamEntry:
        await self.catalog.refresh()
        entry = self.catalog.streams.get(stream)
        if entry is None:
            await self.catalog.refresh(force=True)
            entry = self.catalog.streams.get(stream)
        if entry is None:
            raise errors.stream_not_found()
        return entry

    async def _consumer(self, stream: str, name: str) -> LoadedConsumer:
        """Consumer `name` of `stream`; JetStream's not-found error for either that is not."""
        await self._stream(stream)
        loaded = await self.store.load(stream, name)
        if loaded is None:
            raise errors.consumer_not_found()
        return loaded

    # -- create ----------------------------------------------------------------------------

    async def create(self, tokens: list[str], body: bytes) -> dict[str, Any]:
        durable_subject = tokens[3] == "DURABLE"
        stream = tokens[5] if durable_subject else tokens[4]
        name_in_subject = tokens[6] if durable_subject else (tokens[5] if len(tokens) > 5 else None)
        filter_in_subject = (
            ".".join(tokens[6:]) if not durable_subject and len(tokens) > 6 else None
        )
        req = decode_create_request(body)
        if req.stream_name != stream:  # an empty one too, as in nats-server
            raise errors.stream_mismatch()
        entry = await self._stream(stream)
        cfg = normalize(
            req.config,
            stream_config=entry.config,
            durable_in_subject=name_in_subject if durable_subject else None,
            name_in_subject=None if durable_subject else name_in_subject,
            filter_in_subject=filter_in_subject,
            action=req.action,
            pedantic=req.pedantic,
            account_max_ack_pending=self.policy.limits.max_ack_pending,
            refuse=False,
        )
        name = cfg.name or cfg.durable_name
        existing = await self.store.load(stream, name)
        if existing is not None:
            return await self._update_existing(entry, existing, cfg, req.action)
        if req.action == "update":
            raise errors.consumer_does_not_exist()
        refuse_unsupported(cfg)
        unnamed = not (req.config.name or req.config.durable_name or name_in_subject)
        return await self._create_new(entry, name, cfg, unnamed=unnamed)

    async def _update_existing(
        self, entry: StreamEntry, existing: LoadedConsumer, cfg: ConsumerConfig, action: str
    ) -> dict[str, Any]:
        old = existing.record.config
        if _same_config(old, cfg):
            return await self.info_of(existing, TYPE_PREFIX + "consumer_create_response")
        moved = cfg.deliver_subject != old.deliver_subject
        bound = moved and self.consumers.push.bound(old.deliver_subject)
        updated = check_update(old, cfg, action=action, bound=bound)
        # What may change is checked first, as nats-server checks it; then what is not served.
        refuse_unsupported(updated)
        await self._replace_config(existing, updated)
        if moved:
            await self._redeliver_pending(existing)
        loaded = await self.store.load(entry.name, existing.name)
        if loaded is None:
            raise errors.consumer_not_found()
        return await self.info_of(loaded, TYPE_PREFIX + "consumer_create_response")

    async def _create_new(
        self, entry: StreamEntry, name: str, cfg: ConsumerConfig, *, unnamed: bool
    ) -> dict[str, Any]:
        others = await self.store.load_all(entry.name)
        if entry.config.retention == "workqueue":
            check_workqueue_overlap(cfg, [o.record.config for o in others])
        if entry.config.max_consumers > 0 and len(others) >= entry.config.max_consumers:
            raise errors.maximum_consumers_limit()
        limits = self.policy.limits
        if limits.max_consumers > 0:
            check_consumer_count(limits, await self.count_all())
        view = await self.catalog.view(entry.name)
        if view is None:
            raise errors.stream_not_found()
        start_time = parse_go_time(cfg.opt_start_time) if cfg.opt_start_time else 0
        start, start_seqs = await self.catalog.answer(
            lambda: starting_point(cfg, view, seq_from_time(view, start_time))
        )
        uid = os.urandom(8).hex()
        now = time.time_ns()
        record = ConsumerRecord(config=cfg, created_ns=now, uid=uid, unnamed=unnamed)
        state = ConsumerState(
            uid=uid,
            stream_seq=start,
            # last_per_subject: nats-server's floor starts below the first message it hands out
            # (its o.sseq is that message), though newer ones follow only after all of them.
            ack_floor_stream=start_seqs[0] - 1 if start_seqs else start,
            start_seqs=start_seqs,
            last_active_ns=now,
        )
        keys = self.store.keys(entry.name, name)
        group = self.catalog.group
        result = await self.meta.txn(
            [Compare(entry.keys.config, entry.revision), Compare(keys.config, 0)],
            [
                Put(keys.config, encode(record)),
                Put(keys.state, encode(state)),
                *target_ops(group, keys, None, record.target()),
            ],
        )
        if result.succeeded:
            self.consumers.target_changed(entry.name, name, record.target())
        else:
            existing = await self.store.load(entry.name, name)
            if existing is not None and _same_config(existing.record.config, cfg):
                return await self.info_of(existing, TYPE_PREFIX + "consumer_create_response")
            raise errors.consumer_create("stream or consumer changed concurrently, try again")
        loaded = await self.store.load(entry.name, name)
        if loaded is None:
            raise errors.consumer_not_found()
        return await self.info_of(loaded, TYPE_PREFIX + "consumer_create_response")

    async def _replace_config(self, loaded: LoadedConsumer, cfg: ConsumerConfig) -> None:
        """Store a consumer's new config, if nothing changed the consumer since it was read."""
        record = msgspec.structs.replace(loaded.record, config=cfg)
        old_target, new_target = loaded.record.target(), record.target()
        result = await self.meta.txn(
            [Compare(loaded.keys.config, loaded.record_rev)],
            [
                Put(loaded.keys.config, encode(record)),
                *target_ops(self.catalog.group, loaded.keys, old_target, new_target),
            ],
        )
        if not result.succeeded:
            raise errors.consumer_create("consumer changed concurrently, try again")
        self.store.forget(loaded.stream, loaded.name)
        if new_target != old_target:
            self.consumers.target_changed(loaded.stream, loaded.name, new_target)
        self.consumers.consumer_changed(loaded.stream, loaded.name)

    async def _redeliver_pending(self, loaded: LoadedConsumer) -> None:
        """A push consumer's deliver subject moved: what awaits an ack goes out again, to the
        new subject (nats-server's forceExpirePending)."""

        def change(c: LoadedConsumer) -> bool | None:
            return True if expire_pending(c.state) else None

        with contextlib.suppress(ConsumerGone):
            async with self.store.lock(loaded.stream, loaded.name):
                await self.store.change_state(loaded.stream, loaded.name, change)
        self.consumers.consumer_changed(loaded.stream, loaded.name)

    # -- info, names, list -----------------------------------------------------------------

    async def info(self, stream: str, name: str, body: bytes = b"") -> dict[str, Any]:
        if not is_empty_request(body):
            raise errors.not_empty_request()
        await self._stream(stream)
        await self.consumers.acks.commit_queued(stream, name)
        loaded = await self.store.load(stream, name)
        if loaded is None:
            raise errors.consumer_not_found()
        return await self.info_of(loaded, TYPE_PREFIX + "consumer_info_response")

    async def info_of(
        self, loaded: LoadedConsumer, kind: str | None, view: StreamView | None = None
    ) -> dict[str, Any]:
        if view is None:
            view = await self.catalog.view(loaded.stream)
        cfg = loaded.record.config
        state, pending = await self.catalog.answer(lambda: _as_reported(loaded, view))
        info: dict[str, Any] = {}
        if kind is not None:
            info["type"] = kind
        delivered_stream = state.stream_seq
        if state.start_seqs and not state.consumer_seq:
            # last_per_subject before its first delivery: as the floor (see _create_new).
            delivered_stream = state.ack_floor_stream
        elif state.start_seqs:
            # Part way through last_per_subject: nats-server shows its next sequence less one.
            delivered_stream = state.start_seqs[0] - 1
        delivered: dict[str, Any] = {
            "consumer_seq": state.consumer_seq,
            "stream_seq": delivered_stream,
        }
        if state.last_delivered_ns:
            delivered["last_active"] = go_time_or_zero(state.last_delivered_ns)
        ack_floor: dict[str, Any] = {
            "consumer_seq": state.ack_floor_consumer,
            "stream_seq": state.ack_floor_stream,
        }
        if state.last_ack_ns:
            ack_floor["last_active"] = go_time_or_zero(state.last_ack_ns)
        info.update(
            stream_name=loaded.stream,
            name=loaded.name,
            created=go_time_or_zero(loaded.record.created_ns),
            config=_config_shown(loaded.record),
            delivered=delivered,
            ack_floor=ack_floor,
            num_ack_pending=num_ack_pending(state),
            num_redelivered=num_redelivered(state, cfg),
            num_waiting=self.pulls.waiting_count(loaded.stream, loaded.name),
            num_pending=pending,
        )
        if self.consumers.push.bound(cfg.deliver_subject):
            # Subscribed to on this agent (nats-server: "active", which is its own interest).
            info["push_bound"] = True
        paused_ns = pause_ns(cfg)
        now = time.time_ns()
        if cfg.pause_until is not None and paused_ns > now:
            info["paused"] = True
            info["pause_remaining"] = _until(paused_ns, now)
        info["ts"] = go_time(now)
        if cfg.priority_groups:
            # nats-server reports the first group only, with its pin (a zero time when none).
            pinned = live_pin(state, cfg, now)
            info["priority_groups"] = [
                {
                    "group": cfg.priority_groups[0],
                    **({"pinned_client_id": pinned} if pinned else {}),
                    "pinned_ts": go_time_or_zero(state.pinned_ns if pinned else 0),
                }
            ]
        return info

    async def names(self, stream: str, body: bytes) -> dict[str, Any]:
        req = decode_if_object(body, PagedRequest)
        await self._stream(stream)
        page = page_of(sorted(await self.store.names(stream)), req.offset, NAMES_LIMIT)
        return page.response("consumer_names_response") | {"consumers": list(page.items)}

    async def list(self, stream: str, body: bytes) -> dict[str, Any]:
        req = decode_if_object(body, PagedRequest)
        await self._stream(stream)
        for name in await self.store.names(stream):
            await self.consumers.acks.commit_queued(stream, name)
        consumers = sorted(await self.store.load_all(stream), key=lambda c: c.name)
        view = await self.catalog.view(stream)
        page = page_of(consumers, req.offset, LIST_LIMIT)
        listed = [_as_listed(await self.info_of(c, None, view)) for c in page.items]
        return page.response("consumer_list_response") | {"consumers": listed}

    # -- reset -----------------------------------------------------------------------------

    async def reset(self, stream: str, name: str, body: bytes) -> dict[str, Any] | None:
        """CONSUMER.RESET: the consumer starts again at a sequence. None when there is no
        such consumer (nothing answers)."""
        await self.catalog.refresh()
        entry = self.catalog.streams.get(stream)
        if entry is None:
            return None
        await self.consumers.acks.commit_queued(stream, name)
        loaded = await self.store.load(stream, name)
        if loaded is None:
            return None
        asked = decode_reset_request(body)
        cfg = loaded.record.config
        seq_for_time = 0
        if cfg.deliver_policy == "by_start_time" and asked:
            view = await self.catalog.view(stream)
            start = parse_go_time(cfg.opt_start_time) if cfg.opt_start_time else 0
            seq_for_time = seq_from_time(view, start) if view is not None else 0

        def change(c: LoadedConsumer) -> int:
            seq = reset_sequence(c.record.config, asked, c.state.ack_floor_stream, seq_for_time)
            reset_state(c.state, seq)
            return seq

        try:
            async with self.store.lock(stream, name):
                changed = await self.store.change_state(stream, name, change)
        except ConsumerGone:
            return None
        self.consumers.consumer_changed(stream, name)
        if entry.config.retention == "interest":
            # What the consumer no longer waits for may go (checkStateForInterestStream).
            await self.consumers.after_delete(stream)
        info = await self.info_of(changed.loaded, RESET_RESPONSE)
        info["reset_seq"] = changed.result
        return info

    # -- delete and pause ------------------------------------------------------------------

    async def delete(self, stream: str, name: str, body: bytes = b"") -> dict[str, Any]:
        if not is_empty_request(body):
            raise errors.not_empty_request()
        loaded = await self._consumer(stream, name)
        if not await self.consumers.delete(loaded):
            raise errors.consumer_store_failed("consumer changed concurrently, try again")
        return {"type": TYPE_PREFIX + "consumer_delete_response", "success": True}

    async def pause(self, stream: str, name: str, body: bytes) -> dict[str, Any]:
        req = decode_if_object(body, ConsumerPauseRequest)
        loaded = await self._consumer(stream, name)
        # nats-server keeps any non-zero time, a past one too (then the consumer just is not
        # paused), in UTC; the zero time or none resumes.
        until = req.pause_until
        if until is not None:
            until = utc_time(until)
            if until == ZERO_TIME:
                until = None
        cfg = stamp_required_level(msgspec.structs.replace(loaded.record.config, pause_until=until))
        await self._replace_config(loaded, cfg)
        now = time.time_ns()
        paused_ns = pause_ns(cfg)
        response: dict[str, Any] = {
            "type": TYPE_PREFIX + "consumer_pause_response",
            "paused": until is not None and paused_ns > now,
            "pause_until": until or ZERO_TIME,
        }
        if response["paused"]:
            response["pause_remaining"] = _until(paused_ns, now)
        return response

    # -- priority groups -------------------------------------------------------------------

    async def unpin(self, stream: str, name: str, body: bytes) -> dict[str, Any]:
        """CONSUMER.UNPIN: the group's pinned client is unpinned (jsConsumerUnpinRequest, its
        checks in its order); the next request without a pin is pinned."""
        group = read_lenient(body, ConsumerUnpinRequest).group
        if not group:
            raise errors.invalid_json("consumer group not specified")
        if not valid_group_name(group):
            raise errors.consumer_invalid_group_name()
        loaded = await self._consumer(stream, name)
        if group not in (loaded.record.config.priority_groups or ()):
            raise errors.consumer_invalid_priority_group()
        try:
            await self.consumers.unpin(stream, name, group)
        except ConsumerGone:
            raise errors.consumer_not_found() from None
        return {"type": TYPE_PREFIX + "consumer_unpin_response"}


RESET_RESPONSE = TYPE_PREFIX + "consumer_reset_response"


def _same_config(a: ConsumerConfig, b: ConsumerConfig) -> bool:
    """Equal but for the pause (its own API) and the versioning metadata."""
    return same_config(
        msgspec.structs.replace(a, pause_until=None), msgspec.structs.replace(b, pause_until=None)
    )


def _until(deadline_ns: int, now_ns: int) -> int:
    """Go's time.Until as a Duration: nanoseconds to `deadline_ns`, at most the largest
    int64 (a pause until the year 2999 is "forever")."""
    return min(deadline_ns - now_ns, 2**63 - 1)


def _as_listed(info: dict[str, Any]) -> dict[str, Any]:
    """A consumer's info as nats-server lists it: its config as stored, without the server's
    version and level that an info adds (setDynamicConsumerMetadata)."""
    info["config"]["metadata"] = without_server_keys(info["config"]["metadata"])
    return info


def _config_shown(record: ConsumerRecord) -> dict[str, Any]:
    """A consumer's config as an info shows it: with the server's version and level, and
    without the name the agent chose for a consumer created with none (nats-server keeps
    such a config nameless)."""
    cfg = record.config
    shown = consumer_config_to_wire(cfg) | {"metadata": as_answered(cfg.metadata)}
    if record.unnamed:
        shown.pop("name", None)
    return shown
