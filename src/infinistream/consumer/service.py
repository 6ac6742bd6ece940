"""Everything this agent does for consumers, wired together, and the background work it needs.

Background: a watch that notices other agents' commits and acks for consumers with requests
waiting or subscribers here (an etcd watch, or SQLite's data_version read every 2 ms: woken
within milliseconds of another agent's commit; the metadata store's `watch`), a poll of the
push directory (so a subscriber here is served when another agent creates or moves its
consumer), and the removal of consumers idle past their inactive_threshold.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from infinistream.consumer.acks import (
    AckBatcher,
    AckMessage,
    Queued,
    needs_durable,
    parse_ack,
    parse_plain_acks,
)
from infinistream.consumer.clock import SYSTEM_CLOCK, Clock
from infinistream.consumer.config import (
    ConsumerConfig,
    NextRequestError,
    check_next_request,
    parse_next_request,
)
from infinistream.consumer.directory import ConsumerId, PushDirectory, target_ops
from infinistream.consumer.engine import EngineParts
from infinistream.consumer.priority import live_pin, unpin
from infinistream.consumer.progress import NEXT, skip_purged
from infinistream.consumer.pull import AdvisorySource, PullService
from infinistream.consumer.push import PushService
from infinistream.consumer.records import PushTarget
from infinistream.consumer.retention import Retention
from infinistream.consumer.store import ConsumerGone, ConsumerStore, LoadedConsumer
from infinistream.jetstream.messages import (
    DeliverMany,
    Distribute,
    Drained,
    HasInterest,
    Send,
    status,
)
from infinistream.metadata.kv import ChangeWatch, Compare, Delete, Item, MetadataStore
from infinistream.stream.catalog import Catalog
from infinistream.stream.committer import Committer
from infinistream.stream.reader import MessageReader
from infinistream.stream.watching import other_commits

log = logging.getLogger(__name__)

# How long the remote-changes loop waits on the metadata watch before reading anyway, and how
# often it looks whether anything here waits at all.
POLL_SECONDS = 0.1
DIRECTORY_POLL_SECONDS = 0.25
INACTIVITY_CHECK_SECONDS = 1.0
INACTIVITY_SWEEP_SHARE = 20


@dataclass(eq=False)
class ConsumerService:
    """The consumers of every stream as this agent serves them: acks, pull requests, push
    delivery to this agent's subscribers, retention.

    Its parts call one another through it (a delivery loop takes the acks its claim will
    commit, a commit of acks wakes loops and runs retention), so the service builds them and
    hands each the callbacks it needs.
    """

    meta: MetadataStore
    catalog: Catalog
    store: ConsumerStore
    committer: Committer
    reader: MessageReader
    send: Send
    deliver_many: DeliverMany
    distribute: Distribute
    has_interest: HasInterest
    # Wakes the remote-changes loop when another agent commits (metadata.kv.ChangeWatch).
    changes: ChangeWatch
    clock: Clock = SYSTEM_CLOCK
    # Who the priority group advisories say they come from.
    advisory: AdvisorySource = field(default_factory=AdvisorySource)
    # Until the clients on an inbox have read what waits for them (a pull request's batch goes
    # out in chunks, each after this); None: nothing waits.
    drained: Drained | None = None
    acks: AckBatcher = field(init=False)
    pulls: PullService = field(init=False)
    directory: PushDirectory = field(init=False)
    push: PushService = field(init=False)
    retention: Retention = field(init=False)
    _tasks: list[asyncio.Task[Any]] = field(default_factory=list, init=False)
    _retention_running: set[str] = field(default_factory=set, init=False)
    _retention_again: set[str] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self.acks = AckBatcher(
            self.store,
            committed=self._acks_committed,
            loop_takes=self._loop_takes,
            may_linger=self._acks_may_linger,
            clock=self.clock,
        )
        parts = EngineParts(
            self.store, self.catalog, self.reader, self.acks, self.delivered, self.clock
        )
        self.pulls = PullService(
            parts, self.deliver_many, self.has_interest, self.send, self.advisory, self.drained
        )
        self.directory = PushDirectory(self.meta, self.catalog.group)
        self.push = PushService(parts, self.directory, self.distribute, self.has_interest)
        self.retention = Retention(self.store, self.committer)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._poll_remote_changes()),
            loop.create_task(self._poll_push_directory()),
            loop.create_task(self._remove_inactive()),
        ]

    async def stop(self) -> None:
        await self.acks.drain()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.changes.close()

    # -- requests from clients -------------------------------------------------------------

    async def next_request(self, stream: str, name: str, reply: str | None, body: bytes) -> bool:
        """Queue a pull request; False if no such consumer (nothing serves the subject)."""
        if not reply:
            return True
        # The record alone: the state is the delivery loop's to read, when it serves the
        # request. For a consumer this agent is busy with, the record of its last commit, so the
        # request is queued at once, before the acks that came with it are committed on their
        # own.
        record = self.store.known_record(stream, name)
        if record is None:
            record = await self.store.record(stream, name)
        if record is None:
            return False
        try:
            req = parse_next_request(body)
            check_next_request(req, record.config)
        except NextRequestError as exc:
            self.send(reply, status(exc.status, exc.description), b"")
            return True
        if req.id and not await self._pin_holds(stream, name, req.id):
            self.send(reply, status(423, "Nats-Pin-Id mismatch"), b"")
            return True
        self.pulls.add(stream, name, record.config, req, reply)
        await self._pulled(stream, name, record.config)
        return True

    def ack(
        self, subject: str, reply: str | None, body: bytes, unserved: Callable[[str], None]
    ) -> None:
        """An ack published to `subject`; `unserved` answers its reply if nothing serves it."""
        msg = parse_ack(subject, body)
        if msg is None:
            return
        if reply is not None:
            msg.reply = reply
            msg.unserved = unserved
        self.acks.add(msg)

    def plain_acks(self, subjects: list[str]) -> None:
        """A run of acks published to `subjects` with no reply and a plain-ack body."""
        self.acks.add_many(parse_plain_acks(subjects))

    def subscribed(self, subject: str) -> None:
        """A client of this agent subscribed: push consumers delivering there are served here."""
        self.push.subscribed(subject)

    def unsubscribed(self, subject: str) -> None:
        self.push.unsubscribed(subject)

    def flow_control(self, subject: str) -> bool:
        """A subscriber's answer to a flow-control request (`$JS.FC.*`); False if nothing
        here listens on that subject."""
        return self.push.flow_control(subject)

    def _loop_takes(self, stream: str, name: str) -> bool:
        return self.pulls.take_acks(stream, name) or self.push.take_acks(stream, name)

    def consumer_changed(self, stream: str, name: str) -> None:
        """Something changed a consumer's state or config: whoever serves it looks again."""
        self.pulls.consumer_changed(stream, name)
        self.push.consumer_changed(stream, name)

    def target_changed(self, stream: str, name: str, target: PushTarget | None) -> None:
        """This agent committed where a consumer pushes to (None: nowhere)."""
        self.push.target_changed(stream, name, target)

    def consumer_deleted(self, stream: str, name: str) -> None:
        self.pulls.consumer_deleted(stream, name)
        self.push.consumer_deleted(stream, name)

    def _acks_may_linger(self, stream: str) -> bool:
        # On interest and workqueue streams acks free messages: retention runs on their commit.
        entry = self.catalog.streams.get(stream)
        return entry is not None and entry.config.retention == "limits"

    async def _acks_committed(self, loaded: LoadedConsumer, batch: list[Queued]) -> None:
        for msg in batch if needs_durable(batch) else ():  # answers, if any awaits one
            if not isinstance(msg, AckMessage) or msg.reply is None:
                continue
            if msg.kind == NEXT:
                await self.next_request(msg.stream, msg.consumer, msg.reply, _next_body(msg.body))
            else:
                self.send(msg.reply, None, b"")
        self.consumer_changed(loaded.stream, loaded.name)
        entry = self.catalog.streams.get(loaded.stream)
        if entry is not None and entry.config.retention != "limits":
            await self._apply_retention(loaded.stream)

    async def _apply_retention(self, stream: str) -> None:
        # One pass at a time per stream; a request while one runs asks for one more pass after
        # it, since the running pass may have read consumer states from before the new acks.
        if stream in self._retention_running:
            self._retention_again.add(stream)
            return
        self._retention_running.add(stream)
        try:
            while True:
                self._retention_again.discard(stream)
                try:
                    await self.retention.apply(stream)
                except Exception:
                    log.exception("retention for stream %s failed", stream)
                if stream not in self._retention_again:
                    break
        finally:
            self._retention_running.discard(stream)

    async def delivered(self, stream: str, cfg: ConsumerConfig) -> None:
        """After a claim: with ack none, delivery is all an interest stream waits for."""
        entry = self.catalog.streams.get(stream)
        if cfg.ack_policy == "none" and entry is not None and entry.config.retention == "interest":
            await self._apply_retention(stream)

    async def purged(self, stream: str) -> None:
        """The stream was purged: consumers resume at its new first sequence."""
        view = await self.catalog.view(stream)
        if view is None:
            return
        first = view.first_seq
        for loaded in await self.store.load_all(stream):

            def change(c: LoadedConsumer) -> bool | None:
                return True if skip_purged(c.state, first) else None

            try:
                await self.store.change_state(stream, loaded.name, change)
            except ConsumerGone:
                continue
            self.consumer_changed(stream, loaded.name)

    async def after_delete(self, stream: str) -> None:
        entry = self.catalog.streams.get(stream)
        if entry is not None and entry.config.retention == "interest":
            await self._apply_retention(stream)

    def streams_committed(self, streams: list[str]) -> None:
        for stream in streams:
            self.pulls.stream_changed(stream)
            self.push.stream_changed(stream)

    async def count(self, stream: str) -> int:
        return await self.store.count(stream)

    # -- background ------------------------------------------------------------------------

    def _watched(self) -> set[ConsumerId]:
        return {*self.pulls.watched(), *self.push.watched()}

    async def _poll_remote_changes(self) -> None:
        """Wake what is served here when other agents commit to its stream or consumer."""
        seen = Revisions()
        while True:
            if not self._watched():
                # Nothing waits here: a new pull request reads the state itself first.
                await asyncio.sleep(POLL_SECONDS)
                continue
            await other_commits(self.changes, POLL_SECONDS, retry_after=POLL_SECONDS, log=log)
            try:
                await self._wake_changed(seen, self._watched())
            except Exception:
                log.exception("polling consumer state")

    async def _wake_changed(self, seen: Revisions, watched: set[ConsumerId]) -> None:
        """Wake the loops of `watched` consumers whose state or stream moved since last seen."""
        streams = {stream for stream, _ in watched}
        stream_keys = {self.catalog.keys(stream).state: stream for stream in streams}
        consumer_keys = {self.store.keys(*cid).state: cid for cid in watched}
        items = await self.meta.get_many([*stream_keys, *consumer_keys])
        changed_streams = {
            stream for key, stream in stream_keys.items() if seen.moved(key, items.get(key))
        }
        for key, (stream, name) in consumer_keys.items():
            item = items.get(key)
            if seen.moved(key, item):
                self.pulls.consumer_changed(stream, name)
                self.push.consumer_changed(
                    stream, name, item.mod_revision if item is not None else None
                )
            elif stream in changed_streams:
                self.pulls.consumer_changed(stream, name)
        for stream in changed_streams:
            self.push.stream_changed(stream)

    async def _poll_push_directory(self) -> None:
        """Serve subscribers here when another agent creates or moves their push consumer."""
        while True:
            try:
                changed = await self.directory.refresh()
                if changed:
                    self.push.directory_changed(changed)
            except Exception:
                log.exception("reading the push directory")
            await asyncio.sleep(DIRECTORY_POLL_SECONDS)

    async def _remove_inactive(self) -> None:
        pause = INACTIVITY_CHECK_SECONDS
        while True:
            await asyncio.sleep(pause)
            started = self.clock.monotonic()
            try:
                await self.remove_inactive()
            except Exception:
                log.exception("removing inactive consumers")
            # A pass reads every consumer of the group: with 100,000 of them it takes a good
            # fraction of a second, and once a second it would keep a core busy doing nothing.
            # Pausing INACTIVITY_SWEEP_SHARE times as long as the pass took bounds the sweep to
            # a small share of the agent (inactive thresholds are then honoured that late).
            pause = max(
                INACTIVITY_CHECK_SECONDS,
                INACTIVITY_SWEEP_SHARE * (self.clock.monotonic() - started),
            )

    async def remove_inactive(self) -> None:
        """One pass: delete the consumers idle past their inactive_threshold."""
        now = self.clock.wall_ns()
        for stream in list(self.catalog.streams):
            for loaded in await self.store.load_all(stream):
                threshold = loaded.record.config.inactive_threshold
                if threshold <= 0:
                    continue
                if self.pulls.waiting_count(stream, loaded.name) or self.push.serving(
                    stream, loaded.name
                ):
                    # Requests waiting or subscribers here: in use, as other agents must see.
                    await self._touch(loaded, now, threshold)
                    continue
                state = loaded.state
                last = max(
                    loaded.record.created_ns,
                    state.last_active_ns,
                    state.last_ack_ns,
                    state.last_delivered_ns,
                )
                if now - last < threshold:
                    continue
                # Idle as read: removed only if nothing touched it since.
                if await self.delete(loaded, only_if_untouched=True):
                    log.info("removed inactive consumer %s > %s", stream, loaded.name)

    async def delete(self, loaded: LoadedConsumer, *, only_if_untouched: bool = False) -> bool:
        """Delete the consumer read as `loaded`; False if it changed meanwhile.

        Its config must be the one read: the push directory entry removed is the one that
        config names, and a consumer deleted and created again meanwhile is not the one meant.
        Its state may have moved since (an ack, a delivery by another agent), unless
        `only_if_untouched`: a client's delete is not refused because its consumer is busy, but
        a consumer found idle from its state is removed only if that state is still the one read.
        """
        compares = [Compare(loaded.keys.config, loaded.record_rev)]
        if only_if_untouched:
            compares.append(Compare(loaded.keys.state, loaded.state_rev))
        result = await self.meta.txn(
            compares,
            [
                Delete(loaded.keys.config),
                Delete(loaded.keys.state),
                *target_ops(self.catalog.group, loaded.keys, loaded.record.target(), None),
            ],
        )
        if not result.succeeded:
            return False
        self.store.forget(loaded.stream, loaded.name)
        self.consumer_deleted(loaded.stream, loaded.name)
        await self.after_delete(loaded.stream)
        return True

    async def _pin_holds(self, stream: str, name: str, pin_id: str) -> bool:
        """A pull request carrying `pin_id` (pinned_client): False if another pin holds. If
        its own holds, the request keeps it (its timeout counts from now, on every agent).
        Without a pin, the request waits, to be refused if another client is pinned first."""
        now = self.clock.wall_ns()

        def seen(c: LoadedConsumer) -> bool:
            if live_pin(c.state, c.record.config, now) != pin_id:
                return False
            c.state.pin_seen_ns = max(c.state.pin_seen_ns, now)
            return True

        loaded = await self.store.load(stream, name)
        if loaded is None:
            return True
        held = live_pin(loaded.state, loaded.record.config, now)
        if not held:
            return True
        if held != pin_id:
            return False
        try:
            async with self.store.lock(stream, name):
                changed = await self.store.change_state(stream, name, seen, writes=bool)
        except ConsumerGone:
            return True
        return changed.result

    async def unpin(self, stream: str, name: str, group: str) -> None:
        """Unpin the consumer's client (CONSUMER.UNPIN): the next request without a pin is
        pinned, on whichever agent it waits."""

        def change(c: LoadedConsumer) -> bool:
            unpin(c.state)
            return True

        async with self.store.lock(stream, name):
            await self.store.change_state(stream, name, change)
        self.pulls.advise(stream, name, "UNPINNED", group, reason="admin")
        self.consumer_changed(stream, name)

    async def _pulled(self, stream: str, name: str, cfg: ConsumerConfig) -> None:
        # A pull request is activity: keep other agents from removing an idle-looking
        # consumer that is in fact being polled here.
        threshold = cfg.inactive_threshold
        if threshold <= 0:
            return
        loaded = await self.store.load(stream, name)
        if loaded is not None:
            await self._touch(loaded, self.clock.wall_ns(), threshold)

    async def _touch(self, loaded: LoadedConsumer, now: int, threshold: int) -> None:
        """Requests waiting here count as activity that other agents must see."""
        if now - loaded.state.last_active_ns < threshold // 4:
            return

        def change(c: LoadedConsumer) -> bool:
            c.state.last_active_ns = now
            return True

        await self.store.change_state(loaded.stream, loaded.name, change)


class Revisions:
    """The revision of each key as last seen, to tell which keys moved since."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}

    def moved(self, key: str, item: Item | None) -> bool:
        """Whether `key` (read as `item`) has a revision other than the last one seen; the
        one read is remembered."""
        rev = item.mod_revision if item is not None else -1
        if self._seen.get(key) == rev:
            return False
        self._seen[key] = rev
        return True


def _next_body(body: bytes) -> bytes:
    rest = body.strip()[len(b"+NXT") :].strip()
    return rest or b"1"
