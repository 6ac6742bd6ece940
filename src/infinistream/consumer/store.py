"""Reading consumers from metadata and changing their state with compare-and-set."""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from infinistream.consumer.progress import copy_state
from infinistream.consumer.records import (
    ConsumerKeys,
    ConsumerRecord,
    ConsumerState,
    consumers_prefix,
    decode_consumer,
    decode_consumer_state,
    encode,
)
from infinistream.jetstream import errors
from infinistream.metadata.kv import Compare, MetadataStore, Put
from infinistream.stream.catalog import Catalog

R = TypeVar("R")
MAX_ATTEMPTS = 64
# Consumers whose last committed state this agent keeps, so the next change of a busy consumer
# starts from it instead of reading and decoding the state again.
CACHED_STATES = 1024


class ConsumerGone(Exception):
    """The consumer (or its stream) was deleted meanwhile."""


@dataclass(slots=True)
class LoadedConsumer:
    stream: str
    name: str
    keys: ConsumerKeys
    record: ConsumerRecord
    record_rev: int
    state: ConsumerState
    state_rev: int


@dataclass(frozen=True, slots=True)
class Changed(Generic[R]):
    """What `ConsumerStore.change_state` did."""

    # The consumer as committed, or as last read when the change left nothing to write.
    loaded: LoadedConsumer
    # What the change returned for it.
    result: R
    written: bool


def _has_result(result: object) -> bool:
    return result is not None


class ConsumerStore:
    def __init__(self, meta: MetadataStore, catalog: Catalog) -> None:
        self.meta = meta
        self.catalog = catalog
        self.commits = 0
        self.conflicts = 0
        # (stream, consumer) -> (its last committed state here, the stream's uid then).
        self._committed: OrderedDict[tuple[str, str], tuple[LoadedConsumer, str | None]] = (
            OrderedDict()
        )
        # Held while this agent writes a consumer's state, so its own writers (the delivery loop
        # and the ack batcher) queue behind one another instead of failing each other's
        # compare-and-set; other agents are kept out by the compare-and-set alone.
        self._locks: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    def lock(self, stream: str, name: str) -> asyncio.Lock:
        lock = self._locks.get((stream, name))
        if lock is None:
            lock = self._locks[(stream, name)] = asyncio.Lock()
        return lock

    def keys(self, stream: str, name: str) -> ConsumerKeys:
        return ConsumerKeys(self.catalog.keys(stream), name)

    async def load(self, stream: str, name: str) -> LoadedConsumer | None:
        keys = self.keys(stream, name)
        items = await self.meta.get_many([keys.config, keys.state])
        record_item, state_item = items.get(keys.config), items.get(keys.state)
        if record_item is None or state_item is None:
            return None
        record = decode_consumer(record_item.value)
        state = decode_consumer_state(state_item.value)
        if state.uid != record.uid:
            return None
        return LoadedConsumer(
            stream, name, keys, record, record_item.mod_revision, state, state_item.mod_revision
        )

    def known_record(self, stream: str, name: str) -> ConsumerRecord | None:
        """The record this agent last committed the consumer's state against, if kept.

        Current as of that commit, in this incarnation of the stream: another agent may have
        deleted or changed the consumer since, which the next compare-and-set finds out.
        """
        kept = self._committed.get((stream, name))
        if kept is None or kept[1] != self._stream_uid(stream):
            return None
        return kept[0].record

    def forget(self, stream: str, name: str) -> None:
        """Drop what is kept of a consumer this agent deleted or reconfigured."""
        self._committed.pop((stream, name), None)

    def _stream_uid(self, stream: str) -> str | None:
        entry = self.catalog.streams.get(stream)
        return entry.uid if entry is not None else None

    async def record(self, stream: str, name: str) -> ConsumerRecord | None:
        """Just the consumer's record (its config), without reading its state."""
        item = await self.meta.get(self.keys(stream, name).config)
        return decode_consumer(item.value) if item is not None else None

    async def names(self, stream: str) -> list[str]:
        prefix = consumers_prefix(self.catalog.keys(stream))
        items = await self.meta.range(prefix, keys_only=True)
        return [item.key[len(prefix) :] for item in items]

    async def load_all(self, stream: str) -> list[LoadedConsumer]:
        prefix = consumers_prefix(self.catalog.keys(stream))
        records = await self.meta.range(prefix)
        if not records:
            return []
        names = [item.key[len(prefix) :] for item in records]
        states = await self.meta.get_many([self.keys(stream, n).state for n in names])
        out = []
        for name, item in zip(names, records, strict=True):
            keys = self.keys(stream, name)
            state_item = states.get(keys.state)
            if state_item is None:
                continue
            out.append(
                LoadedConsumer(
                    stream,
                    name,
                    keys,
                    decode_consumer(item.value),
                    item.mod_revision,
                    decode_consumer_state(state_item.value),
                    state_item.mod_revision,
                )
            )
        return out

    async def count(self, stream: str) -> int:
        return len(await self.names(stream))

    async def change_state(
        self,
        stream: str,
        name: str,
        change: Callable[[LoadedConsumer], R],
        *,
        durable: bool = True,
        writes: Callable[[R], bool] = _has_result,
    ) -> Changed[R]:
        """Apply `change` to a fresh copy of the state and commit it (see `MetadataStore.txn`
        for `durable`).

        `change` edits `loaded.state` in place and returns a result; `writes` says from the
        result whether there is anything to write (by default: a result other than None). It
        may run several times when other agents change the consumer meanwhile.

        The first attempt starts from the state this agent last committed, if it has it: the
        compare-and-set proves it current, and a failure costs one read, as a stale read
        would. "Nothing to write" is only believed of a state just read.
        """
        key = (stream, name)
        for _ in range(MAX_ATTEMPTS):
            loaded = self._last_committed(key)
            from_cache = loaded is not None
            if loaded is None:
                loaded = await self.load(stream, name)
                if loaded is None:
                    raise ConsumerGone(f"{stream} > {name}")
            result = change(loaded)
            if not writes(result):
                if from_cache:
                    continue
                return Changed(loaded, result, written=False)
            txn = await self.meta.txn(
                [
                    Compare(loaded.keys.config, loaded.record_rev),
                    Compare(loaded.keys.state, loaded.state_rev),
                ],
                [Put(loaded.keys.state, encode(loaded.state))],
                durable=durable,
            )
            if txn.succeeded:
                self.commits += 1
                loaded.state_rev = txn.revision
                self._remember(key, loaded)
                return Changed(loaded, result, written=True)
            self.conflicts += 1
        raise errors.consumer_store_failed("consumer state kept changing under concurrent updates")

    def _last_committed(self, key: tuple[str, str]) -> LoadedConsumer | None:
        """What this agent last committed for `key`, taken out of the cache.

        Taken out, so that a failed or skipped attempt falls back to reading; put back only
        by the next successful commit. Once out it is nobody else's: no copy is needed.
        """
        kept = self._committed.pop(key, None)
        return kept[0] if kept is not None else None

    def _remember(self, key: tuple[str, str], loaded: LoadedConsumer) -> None:
        # A copy: the caller goes on using (and may change) the one it was given.
        self._committed[key] = (_copy(loaded), self._stream_uid(key[0]))
        if len(self._committed) > CACHED_STATES:
            self._committed.popitem(last=False)


def _copy(loaded: LoadedConsumer) -> LoadedConsumer:
    return dataclasses.replace(loaded, state=copy_state(loaded.state))
