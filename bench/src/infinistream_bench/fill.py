"""Writing a long stream through the agent's own write path, without the wire.

Publishing 100 million messages over one connection takes hours on a small machine; the
scale benchmark measures how an agent reads a stream that long, not how fast it was written.
`fill` appends the messages to an existing stream with the package's `WriteBuffer` and
`Committer`, as an agent would write them: objects of sections with their record
directories, one section entry per section, the subject records, the stream state, each
batch committed in one metadata transaction. Only the client, the connection and the PubAcks
are left out, so the stream reads back through any agent as if it had been published.

Sections are `batch` messages each (an agent's grow with what arrives during one PUT): the
benchmark chooses the size its wire runs give, so that metadata per message compares.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from infinistream.metadata import open_metadata
from infinistream.pipeline.options import StoreOptions
from infinistream.storage import ObjectStore, SectionCache
from infinistream.stream.catalog import Catalog
from infinistream.stream.committer import Committer
from infinistream.stream.damage import DamageLog
from infinistream.stream.index_cache import IndexCache
from infinistream.stream.put_budget import PutBudget
from infinistream.stream.reader import MessageReader
from infinistream.stream.records import StreamKeys, decode_state
from infinistream.stream.sealed_index import SealedIndex
from infinistream.stream.write_buffer import WriteBuffer


# The fill asks for no PubAcks: publishes without a reply get none. A failed batch is counted
# by the buffer (WriteStats.failed_batches) and the stream's last sequence is checked after.
def _no_acks(_replies: list[str | bytes], _answers: list[bytes]) -> None:
    pass


# A writing agent's view keeps every section it committed since it opened the stream in its
# open last page, and charges that page's cost to the index cache at each commit: a cost that
# grows with the sections written. The fill starts a new writer this often, as a restarted
# agent would, so that writing 100 million messages is not slowed by it.
RENEW_BATCHES = 256


class FillError(Exception):
    """The fill did not leave the stream holding the messages it appended."""


@dataclass(frozen=True, slots=True)
class Filled:
    """What a fill wrote: messages, batches (one object and one commit each), seconds, and
    the stream's last sequence after it."""

    messages: int
    batches: int
    seconds: float
    last_seq: int

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0


async def fill(
    store: StoreOptions,
    stream: str,
    count: int,
    message: Callable[[int], tuple[str, bytes]],
    *,
    first: int = 0,
    batch: int = 20_000,
) -> Filled:
    """Append `count` messages to `stream` (which must exist), message i's subject and payload
    `message(i)` (asked in order) for i from `first`, `batch` messages to an object and a
    commit."""
    meta = SealedIndex(open_metadata(store.metadata), store.encryption())
    objects = store.open_objects()
    reader = MessageReader(objects, SectionCache(1 << 20), DamageLog())
    started = time.perf_counter()
    batches = failed = 0
    end = first + count
    try:
        for low in range(first, end, batch * RENEW_BATCHES):
            # A writer of its own every RENEW_BATCHES batches, as if the agent had restarted.
            catalog = Catalog(meta, store.group, IndexCache(), reader.segment)
            buffer = _buffer(store, objects, Committer(meta, catalog))
            await catalog.refresh()
            for at in range(low, min(low + batch * RENEW_BATCHES, end), batch):
                for i in range(at, min(at + batch, end)):
                    subject, payload = message(i)
                    buffer.append(stream, subject, None, payload, None)
                await buffer.settle()
                batches += 1
            failed += buffer.stats.failed_batches
        seconds = time.perf_counter() - started
        if failed:
            raise FillError(f"{failed} of {batches} batches failed")
        state = await meta.get(StreamKeys(store.group, stream).state)
        last_seq = decode_state(state.value).last_seq if state is not None else 0
    finally:
        await meta.close()
    return Filled(count, batches, seconds, last_seq)


def _buffer(store: StoreOptions, objects: ObjectStore, committer: Committer) -> WriteBuffer:
    return WriteBuffer(
        objects,
        committer,
        SectionCache(1 << 20),
        _no_acks,
        group=store.group,
        agent_id="fill",
        # No PUT budget and no size trigger: each batch goes when `settle` says so.
        budget=PutBudget(rate=1e9),
        batch_bytes=1 << 40,
        encryption=store.encryption(),
    )
