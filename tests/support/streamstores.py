"""Streams in a real metadata store, for stream-layer tests that need no agent."""

from __future__ import annotations

import json
from typing import Any

from infinistream.jetstream.api import StreamConfig
from infinistream.metadata.kv import MetadataStore, Op, Put
from infinistream.stream import records
from infinistream.stream.catalog import Catalog
from infinistream.stream.config import normalize
from infinistream.stream.records import StreamRecord, StreamState, catalog_key

GROUP = "g"


class Sink:
    """Collects what the write buffer hands the agent to send."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str | bytes], list[bytes]]] = []

    def __call__(self, replies: list[str | bytes], payloads: list[bytes]) -> None:
        self.calls.append((replies, payloads))

    def answers(self) -> dict[str, Any]:
        pairs = [p for replies, payloads in self.calls for p in zip(replies, payloads, strict=True)]
        return {reply: json.loads(payload) for reply, payload in pairs}


async def make_streams(meta: MetadataStore, **configs: StreamConfig) -> Catalog:
    catalog = Catalog(meta, GROUP)
    ops: list[Op] = [Put(catalog_key(GROUP), b"1")]
    for name, cfg in configs.items():
        keys = catalog.keys(name)
        record = StreamRecord(config=normalize(cfg), created_ns=1, uid=f"uid-{name}")
        ops.append(Put(keys.config, records.encode(record)))
        state = StreamState(uid=f"uid-{name}", first_seq=1, last_seq=0)
        ops.append(Put(keys.state, records.encode(state)))
    assert (await meta.txn([], ops)).succeeded
    await catalog.refresh(force=True)
    return catalog
