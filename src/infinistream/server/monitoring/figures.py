"""The parts of the agent whose own counters monitoring reads: /varz's `infinistream` block
and /metrics' `infinistream_*` families.

Each counter is read from the part that keeps it, when asked; nothing here counts on its own.
The write buffer, committer and consumer store are the global account's (`$G`), the account
every client is in when no accounts are configured.
"""

from __future__ import annotations

from dataclasses import dataclass

from infinistream.consumer.store import ConsumerStore
from infinistream.storage import ObjectStore, SectionCache, ZoneCacheStats
from infinistream.stream.committer import Committer
from infinistream.stream.damage import DamageLog
from infinistream.stream.index_cache import IndexCache
from infinistream.stream.write_buffer import WriteBuffer


@dataclass(frozen=True, eq=False)
class AgentFigures:
    write_buffer: WriteBuffer
    committer: Committer
    consumer_store: ConsumerStore
    objects: ObjectStore
    cache: SectionCache[bytes]
    # Stored messages found damaged by this agent's reads (stream.damage).
    damage: DamageLog
    # The zone cache (storage.zonecache): reads through it and blocks owned here.
    zone_cache: ZoneCacheStats
    # What the views hold of stream indexes, within its budget (`--index-cache`).
    index_cache: IndexCache
